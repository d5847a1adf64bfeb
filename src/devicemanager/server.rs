//! The registration side (kubelet's device plugin server): `Register` on
//! `kubelet.sock`, the same plugins arriving through the plugin watcher, and the
//! manager's run loop.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::DeviceManager;
use super::api;
use super::{DeviceError, KUBELET_SOCKET};
use crate::grpc_unix;
use crate::pluginwatcher::{DEVICE_PLUGIN, PluginError, PluginHandler, PluginWatcher};

/// How often the run loop looks for resources past their grace period.
const GRACE_CHECK: Duration = Duration::from_secs(30);

/// kubelet's `IsExtendedResourceName`: a qualified name with a domain prefix outside
/// `kubernetes.io`, that is still qualified with `requests.` in front (quota's form).
pub(super) fn is_extended_resource_name(name: &str) -> bool {
    if !name.contains('/') || name.starts_with("requests.") {
        return false;
    }
    let (prefix, _) = name.split_once('/').unwrap_or_default();
    if prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") {
        return false;
    }
    is_qualified_name(&format!("requests.{name}"))
}

/// Kubernetes' `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain (at most
/// 253), the name at most 63 of alphanumerics, `-`, `_`, `.`, starting and ending with
/// an alphanumeric.
fn is_qualified_name(v: &str) -> bool {
    let (prefix, name) = match v.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, v),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) || name.contains('/') {
        return false;
    }
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 253
        && v.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Why a `RegisterRequest` is refused (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum RegisterError {
    #[error(
        "requested API version {0:?} is not supported by kubelet. Supported versions are [{supported:?}]",
        supported = api::VERSION
    )]
    Version(String),
    #[error("the ResourceName {0:?} is invalid")]
    ResourceName(String),
    #[error("the endpoint {0:?} is not a socket name in the device plugin directory")]
    Endpoint(String),
}

/// kubelet's checks of a `RegisterRequest`.
pub(super) fn validate_register(r: &api::RegisterRequest) -> Result<(), RegisterError> {
    if r.version != api::VERSION {
        return Err(RegisterError::Version(r.version.clone()));
    }
    if !is_extended_resource_name(&r.resource_name) {
        return Err(RegisterError::ResourceName(r.resource_name.clone()));
    }
    if crate::safe_path::component(&r.endpoint).is_err() {
        return Err(RegisterError::Endpoint(r.endpoint.clone()));
    }
    Ok(())
}

impl DeviceManager {
    /// `Register`: checks the request, then connects to the plugin before answering
    /// (kubelet 1.36 answers after the connection is made, so a plugin that cannot be
    /// reached hears of it).
    async fn register(
        self: Arc<Self>,
        r: api::RegisterRequest,
    ) -> Result<api::Empty, tonic::Status> {
        info!(resourceName = %r.resource_name, "Got registration request from device plugin with resource");
        crate::metrics::device_plugin_registration(&r.resource_name);
        if let Err(e) = validate_register(&r) {
            info!(resourceName = %r.resource_name, err = %e, "Bad registration request from device plugin");
            return Err(tonic::Status::invalid_argument(e.to_string()));
        }
        let socket = self.dir.join(&r.endpoint);
        if let Err(e) = self.connect_plugin(&r.resource_name, &socket).await {
            error!(resourceName = %r.resource_name, err = %e, "Error connecting to device plugin client");
            return Err(tonic::Status::unavailable(e.to_string()));
        }
        Ok(api::Empty {})
    }

    /// Serves `kubelet.sock` until `cancel` (the plugins' sockets left in the directory
    /// are removed first, kubelet's signal to plugins to register again), and removes
    /// resources past their grace period as time passes.
    pub(crate) async fn run(self: Arc<Self>, cancel: CancellationToken) -> Result<(), DeviceError> {
        self.remove_stale_sockets();
        let path = self.dir.join(KUBELET_SOCKET);
        let listener = grpc_unix::listen(&path).map_err(|e| DeviceError::Io(e.to_string()))?;
        let m = Arc::clone(&self);
        let router = grpc_unix::Router::new()
            .unary(api::REGISTER, move |r: api::RegisterRequest| {
                Arc::clone(&m).register(r)
            });
        info!(path = %path.display(), "Serving device plugin registration server");
        let serve = grpc_unix::serve(listener, &path, router, cancel.clone());
        tokio::pin!(serve);
        let mut tick = tokio::time::interval(GRACE_CHECK);
        let result = loop {
            tokio::select! {
                r = &mut serve => break r,
                _ = tick.tick() => {
                    if self.grace_expired() {
                        self.notify();
                    }
                }
            }
        };
        self.stop.cancel();
        result.map_err(|e| DeviceError::Io(e.to_string()))
    }

    fn grace_expired(&self) -> bool {
        let now = std::time::Instant::now();
        self.state().endpoints.values().any(|ep| {
            ep.stopped_at
                .is_some_and(|t| now.duration_since(t) >= super::manager::STOP_GRACE)
        })
    }

    /// kubelet's `CleanupPluginDirectory`: every socket in the directory but ours to be.
    fn remove_stale_sockets(&self) {
        use std::os::unix::fs::FileTypeExt as _;
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let is_socket = e.file_type().is_ok_and(|t| t.is_socket());
            if is_socket && let Err(err) = std::fs::remove_file(e.path()) {
                error!(path = %e.path().display(), err = %err, "Failed to remove file");
            }
        }
    }

    /// Hands the `DevicePlugin` sockets the plugin watcher finds to this manager (the
    /// second way kubelet lets device plugins register).
    pub(crate) fn handle_watched_plugins(self: &Arc<Self>, watcher: &mut PluginWatcher) {
        watcher.add_handler(DEVICE_PLUGIN, Arc::new(WatcherHandler(Arc::clone(self))));
    }
}

/// Device plugins registered through `plugins_registry/` (kubelet's server as a
/// `cache.PluginHandler`).
struct WatcherHandler(Arc<DeviceManager>);

impl PluginHandler for WatcherHandler {
    fn validate(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), PluginError> {
        info!(pluginName = %name, endpoint = %endpoint.display(), "Got plugin at endpoint with versions");
        if !versions.iter().any(|v| v == api::VERSION) {
            return Err(PluginError(format!(
                "manager version, {}, is not among plugin supported versions {versions:?}",
                api::VERSION
            )));
        }
        if !is_extended_resource_name(name) {
            return Err(PluginError(format!(
                "invalid name of device plugin socket: {name}"
            )));
        }
        Ok(())
    }

    fn register(
        &self,
        name: &str,
        endpoint: &Path,
        _versions: &[String],
    ) -> BoxFuture<'_, Result<(), PluginError>> {
        let name = name.to_string();
        let endpoint = endpoint.to_path_buf();
        Box::pin(async move {
            info!(pluginName = %name, endpoint = %endpoint.display(), "Registering plugin at endpoint");
            self.0
                .connect_plugin(&name, &endpoint)
                .await
                .map_err(|e| PluginError(e.to_string()))
        })
    }

    fn deregister(&self, name: &str) {
        info!(pluginName = %name, "Deregistering plugin");
        self.0.disconnect(name, None, std::time::Instant::now());
    }
}
