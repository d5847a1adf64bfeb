//! The boundary to systemd-logind (kubelet's `dbusInhibiter`): the one trait the
//! manager talks through, so its unit tests use a fake; `dbus.rs` is the real one.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::stream::BoxStream;

/// A delay inhibitor lock: logind waits for it (up to `InhibitDelayMaxSec`) before
/// it shuts the node down; dropping it closes the descriptor, which releases it.
#[derive(Debug)]
pub(crate) struct InhibitLock(#[allow(dead_code, reason = "held for its drop")] pub OwnedFd);

/// Why a call to logind (or the bus) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogindError {
    #[error("not connected to the system bus")]
    NotConnected,
    #[error("{what}: {source}")]
    Bus {
        what: &'static str,
        #[source]
        source: zbus::Error,
    },
    #[error("{what}: {reason}")]
    Reply { what: &'static str, reason: String },
    #[error("writing the logind drop-in {path}: {source}")]
    DropIn {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// logind on the system bus, as the shutdown manager uses it.
pub(crate) trait Logind: Send + Sync + 'static {
    /// Connects to the system bus anew; the calls below use this connection.
    fn connect(&mut self) -> impl Future<Output = Result<(), LogindError>> + Send;
    /// logind's `InhibitDelayMaxUSec`: the longest a delay lock may hold a shutdown.
    fn inhibit_delay_max(&self) -> impl Future<Output = Result<Duration, LogindError>> + Send;
    /// Takes a delay lock on shutdown (`Inhibit("shutdown", …, "delay")`).
    fn inhibit_shutdown(&self) -> impl Future<Output = Result<InhibitLock, LogindError>> + Send;
    /// Raises logind's `InhibitDelayMaxSec` to `delay` (kubelet's drop-in).
    fn override_inhibit_delay(
        &self,
        delay: Duration,
    ) -> impl Future<Output = Result<(), LogindError>> + Send;
    /// Asks systemd to make logind read its configuration again (SIGHUP).
    fn reload_logind(&self) -> impl Future<Output = Result<(), LogindError>> + Send;
    /// logind's `PrepareForShutdown` signals: true when a shutdown starts, false when
    /// it is cancelled. The stream ends when the connection does.
    fn shutdown_events(
        &self,
    ) -> impl Future<Output = Result<BoxStream<'static, bool>, LogindError>> + Send;
}
