//! kubelet's plugin manager (`pkg/kubelet/pluginmanager`): plugins announce themselves
//! with a socket in `<root-dir>/plugins_registry/`; the watcher asks each new socket
//! who it is (`Registration.GetInfo`), hands it to the handler of its type
//! (`DevicePlugin`, `DRAPlugin`, `CSIPlugin`), tells the plugin how that went
//! (`NotifyRegistrationStatus`), and deregisters it when its socket goes away.
//!
//! - [`api`]: the plugin registration API (v1), written by hand.
//! - [`watcher`]: the directory watch and the reconciler.

mod api;
mod watcher;

pub(crate) use watcher::PluginWatcher;

use std::path::Path;

use futures::future::BoxFuture;

/// The plugin types kubelet knows.
pub(crate) const DEVICE_PLUGIN: &str = "DevicePlugin";
pub(crate) const DRA_PLUGIN: &str = "DRAPlugin";

/// Why a handler refused or failed a plugin; the text goes back to the plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PluginError(pub String);

/// What handles one plugin type (kubelet's `PluginHandler`).
pub(crate) trait PluginHandler: Send + Sync {
    /// Checks the plugin before anything is set up for it.
    fn validate(&self, name: &str, endpoint: &Path, versions: &[String])
    -> Result<(), PluginError>;
    /// Sets the plugin up (connects to `endpoint`).
    fn register(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> BoxFuture<'_, Result<(), PluginError>>;
    /// The plugin's socket is gone.
    fn deregister(&self, name: &str);
}
