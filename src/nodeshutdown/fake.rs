//! A logind for unit tests: its delay, whether a reload honours the drop-in, the
//! locks it handed out (each the near end of a socket pair, so a released one reads
//! as closed on the far end), and the signal channel of the current connection.

use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use super::logind::{InhibitLock, Logind, LogindError};

#[derive(Debug, Default)]
pub(super) struct State {
    pub delay: Duration,
    /// A reload makes the drop-in's delay the current one.
    pub honour_drop_in: bool,
    /// Connecting fails (no bus).
    pub no_bus: bool,
    pub connects: usize,
    pub drop_ins: Vec<Duration>,
    pub reloads: usize,
    /// The far end of each lock handed out, in order.
    pub locks: Vec<UnixStream>,
    /// The current connection's signals; dropping it ends the stream.
    pub signals: Option<mpsc::UnboundedSender<bool>>,
}

/// Cheap to clone: the test keeps one, the manager the other.
#[derive(Debug, Clone, Default)]
pub(super) struct FakeLogind(pub Arc<Mutex<State>>);

impl FakeLogind {
    pub(super) fn with_delay(delay: Duration) -> Self {
        let f = FakeLogind::default();
        f.state().delay = delay;
        f
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// Sends `PrepareForShutdown(shutting_down)` on the current connection.
    pub(super) fn signal(&self, shutting_down: bool) {
        let state = self.state();
        let tx = state.signals.as_ref().expect("subscribed");
        tx.send(shutting_down).unwrap();
    }

    /// The bus goes away: the signal stream ends.
    pub(super) fn drop_bus(&self) {
        self.state().signals = None;
    }

    /// Whether lock `i` is released (its descriptor closed on the manager's side).
    pub(super) fn released(&self, i: usize) -> bool {
        let state = self.state();
        let mut far = &state.locks[i];
        far.set_nonblocking(true).unwrap();
        let mut buf = [0_u8; 1];
        matches!(far.read(&mut buf), Ok(0))
    }

    pub(super) fn locks(&self) -> usize {
        self.state().locks.len()
    }
}

impl Logind for FakeLogind {
    async fn connect(&mut self) -> Result<(), LogindError> {
        let mut s = self.state();
        s.connects += 1;
        if s.no_bus {
            return Err(LogindError::NotConnected);
        }
        Ok(())
    }

    async fn inhibit_delay_max(&self) -> Result<Duration, LogindError> {
        Ok(self.state().delay)
    }

    async fn inhibit_shutdown(&self) -> Result<InhibitLock, LogindError> {
        let (near, far) = UnixStream::pair().unwrap();
        self.state().locks.push(far);
        Ok(InhibitLock(near.into()))
    }

    async fn override_inhibit_delay(&self, delay: Duration) -> Result<(), LogindError> {
        self.state().drop_ins.push(delay);
        Ok(())
    }

    async fn reload_logind(&self) -> Result<(), LogindError> {
        let mut s = self.state();
        s.reloads += 1;
        if s.honour_drop_in
            && let Some(d) = s.drop_ins.last().copied()
        {
            s.delay = d;
        }
        Ok(())
    }

    async fn shutdown_events(&self) -> Result<BoxStream<'static, bool>, LogindError> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.state().signals = Some(tx);
        Ok(
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) })
                .boxed(),
        )
    }
}
