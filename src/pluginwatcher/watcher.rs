//! The watch of `plugins_registry/` and the reconciler (kubelet's pluginwatcher,
//! desired and actual state caches, and operation executor, folded into one loop):
//! inotify on the directory and every directory below it wakes the loop, a periodic
//! rescan is the safety net; each pass walks the tree, registers the sockets that
//! appeared and deregisters the plugins whose socket went away.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::Watcher as _;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api;
use super::{PluginError, PluginHandler};
use crate::grpc_unix;

/// The safety net's period (kubelet's reconciler runs every second off its caches).
const RESCAN: Duration = Duration::from_secs(2);
/// Bounds on what a local user can make the watcher hold or try.
const MAX_SOCKETS: usize = 128;
/// Directories read per pass, and how deep below the registry (kubelet has no bound).
const MAX_DIRS: usize = 256;
const MAX_DEPTH: usize = 8;
const MAX_NAME: usize = 316;
/// A unix socket path's limit (`sun_path`, without its NUL).
const MAX_SOCKET_PATH: usize = 107;
const MAX_VERSIONS: usize = 16;
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a socket that failed to register back off to this.
const MAX_BACKOFF: Duration = Duration::from_secs(120);

/// A socket as found: its identity changes when the plugin recreates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SocketId {
    ino: u64,
    mtime: i64,
}

/// A registered plugin.
struct Registered {
    id: SocketId,
    kind: String,
    name: String,
}

/// A socket that failed, and when to try it again.
struct Failed {
    id: SocketId,
    retry_at: Instant,
    backoff: Duration,
}

/// kubelet's plugin manager for one directory.
pub(crate) struct PluginWatcher {
    dir: PathBuf,
    handlers: BTreeMap<String, Arc<dyn PluginHandler>>,
    registered: BTreeMap<PathBuf, Registered>,
    failed: BTreeMap<PathBuf, Failed>,
}

impl PluginWatcher {
    /// A watcher of `dir` (`<root-dir>/plugins_registry`).
    pub(crate) fn new(dir: &Path) -> Self {
        PluginWatcher {
            dir: dir.to_path_buf(),
            handlers: BTreeMap::new(),
            registered: BTreeMap::new(),
            failed: BTreeMap::new(),
        }
    }

    /// The handler of plugins of type `kind` (`DevicePlugin`, `DRAPlugin`, `CSIPlugin`).
    pub(crate) fn add_handler(&mut self, kind: &str, handler: Arc<dyn PluginHandler>) {
        self.handlers.insert(kind.to_string(), handler);
    }

    /// Watches until `cancel`.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        use std::os::unix::fs::DirBuilderExt as _;
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(&self.dir)
        {
            warn!(path = %self.dir.display(), err = %e, "Failed to create the plugin registration directory");
        }
        let (tx, mut wake) = tokio::sync::mpsc::channel::<()>(1);
        let on_event = move |res: notify::Result<notify::Event>| {
            // A socket made or removed (or a backend error, which may mean lost events):
            // rescan. Not an access: the rescan's own read of the directory is one, and
            // waking on it would rescan without end.
            let wanted = res.as_ref().map_or(true, |e| {
                matches!(
                    e.kind,
                    notify::EventKind::Create(_)
                        | notify::EventKind::Remove(_)
                        | notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
                        | notify::EventKind::Any
                )
            });
            if wanted {
                let _ = tx.try_send(());
            }
        };
        // Every directory below is watched too, and each one made later as it appears
        // (kubelet adds a watch per directory); a symlink is not followed.
        let config = notify::Config::default().with_follow_symlinks(false);
        let watcher = notify::RecommendedWatcher::new(on_event, config).and_then(|mut w| {
            w.watch(&self.dir, notify::RecursiveMode::Recursive)
                .map(|()| w)
        });
        if let Err(e) = &watcher {
            warn!(path = %self.dir.display(), err = %e, "Failed to watch the plugin registration directory; rescanning periodically only");
        }
        info!(path = %self.dir.display(), "Plugin Watcher Start");
        let mut tick = tokio::time::interval(RESCAN);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {}
                Some(()) = wake.recv() => {}
            }
            self.reconcile().await;
        }
        drop(watcher);
    }

    /// The sockets below the directory now, in it and in its subdirectories (kubelet
    /// walks the tree), hidden names, symlinks and non-sockets left out.
    fn scan(&self) -> BTreeMap<PathBuf, SocketId> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![(self.dir.clone(), 0)];
        let mut read = 0;
        while let Some((dir, depth)) = dirs.pop() {
            read += 1;
            if read > MAX_DIRS {
                warn!(path = %self.dir.display(), max = MAX_DIRS, "Too many plugin directories; ignoring the rest");
                break;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let Ok(path) = crate::safe_path::beneath(&dir, &[&name]) else {
                    continue;
                };
                if meta.is_dir() {
                    if depth < MAX_DEPTH {
                        dirs.push((path, depth + 1));
                    }
                    continue;
                }
                if !meta.file_type().is_socket() {
                    continue;
                }
                if out.len() == MAX_SOCKETS {
                    warn!(path = %path.display(), max = MAX_SOCKETS, "Too many plugin sockets; ignoring the rest");
                    return out;
                }
                out.insert(
                    path,
                    SocketId {
                        ino: meta.ino(),
                        mtime: meta.mtime(),
                    },
                );
            }
        }
        out
    }

    async fn reconcile(&mut self) {
        let present = self.scan();
        let gone: Vec<PathBuf> = self
            .registered
            .iter()
            .filter(|(p, r)| present.get(*p) != Some(&r.id))
            .map(|(p, _)| p.clone())
            .collect();
        for path in gone {
            if let Some(r) = self.registered.remove(&path) {
                if let Some(h) = self.handlers.get(&r.kind) {
                    h.deregister(&r.name);
                }
                info!(path = %path.display(), pluginName = %r.name, pluginType = %r.kind, "Deregistered plugin: its socket is gone");
            }
        }
        self.failed.retain(|p, f| present.get(p) == Some(&f.id));
        let now = Instant::now();
        for (path, id) in present {
            if self.registered.contains_key(&path)
                || self.failed.get(&path).is_some_and(|f| f.retry_at > now)
            {
                continue;
            }
            match self.register(&path).await {
                Ok(r) => {
                    self.failed.remove(&path);
                    self.registered.insert(path, Registered { id, ..r });
                }
                Err(e) => {
                    let backoff = self
                        .failed
                        .get(&path)
                        .map_or(RESCAN, |f| (f.backoff * 2).min(MAX_BACKOFF));
                    warn!(path = %path.display(), err = %e, retryIn = %crate::duration::format_go_duration(backoff), "Plugin registration failed");
                    self.failed.insert(
                        path,
                        Failed {
                            id,
                            retry_at: now + backoff,
                            backoff,
                        },
                    );
                }
            }
        }
    }

    /// kubelet's `RegisterPlugin` operation: asks the socket who it is, hands it to its
    /// type's handler, and tells the plugin how that went.
    async fn register(&self, socket: &Path) -> Result<Registered, PluginError> {
        let channel = grpc_unix::connect(socket, DIAL_TIMEOUT)
            .await
            .map_err(|e| {
                PluginError(format!(
                    "RegisterPlugin error -- dial failed at socket {}, err: {e}",
                    socket.display()
                ))
            })?;
        let info: api::PluginInfo = grpc_unix::unary(&channel, api::GET_INFO, api::InfoRequest {}, CALL_TIMEOUT)
            .await
            .map_err(|s| {
                PluginError(format!(
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: {}",
                    socket.display(),
                    s.message()
                ))
            })?;
        let outcome = self.hand_over(socket, &info).await;
        let status = api::RegistrationStatus {
            plugin_registered: outcome.is_ok(),
            error: outcome
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default(),
        };
        let notified: Result<api::RegistrationStatusResponse, _> =
            grpc_unix::unary(&channel, api::NOTIFY, status, CALL_TIMEOUT).await;
        if let Err(s) = notified {
            debug!(path = %socket.display(), err = %s.message(), "Failed to notify the plugin of its registration status");
        }
        outcome?;
        info!(path = %socket.display(), pluginName = %info.name, pluginType = %info.r#type, "Registered plugin");
        Ok(Registered {
            id: SocketId { ino: 0, mtime: 0 },
            kind: info.r#type,
            name: info.name,
        })
    }

    async fn hand_over(&self, socket: &Path, info: &api::PluginInfo) -> Result<(), PluginError> {
        let Some(handler) = self.handlers.get(&info.r#type) else {
            return Err(PluginError(format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
                info.r#type,
                socket.display()
            )));
        };
        let root = self.dir.parent().unwrap_or(&self.dir);
        let endpoint = checked_info(info, socket, root)?;
        handler
            .validate(&info.name, &endpoint, &info.supported_versions)
            .map_err(|e| {
                PluginError(format!(
                    "RegisterPlugin error -- plugin validation failed with err: {e}"
                ))
            })?;
        handler
            .register(&info.name, &endpoint, &info.supported_versions)
            .await
            .map_err(|e| {
                PluginError(format!(
                    "RegisterPlugin error -- plugin registration failed with err: {e}"
                ))
            })
    }
}

/// The plugin's endpoint (its own socket when it names none), after the bounds: a name
/// and versions of sane size, an absolute endpoint without `.` or `..` below kubelet's
/// root directory, short enough to be a socket path.
fn checked_info(
    info: &api::PluginInfo,
    socket: &Path,
    root: &Path,
) -> Result<PathBuf, PluginError> {
    if info.name.is_empty() || info.name.len() > MAX_NAME {
        return Err(PluginError(format!(
            "plugin name must be 1 to {MAX_NAME} bytes long"
        )));
    }
    if info.supported_versions.len() > MAX_VERSIONS
        || info.supported_versions.iter().any(|v| v.len() > 64)
    {
        return Err(PluginError(
            "too many or too long supported versions".into(),
        ));
    }
    if info.endpoint.is_empty() {
        return Ok(socket.to_path_buf());
    }
    let endpoint = Path::new(&info.endpoint);
    if info.endpoint.len() > MAX_SOCKET_PATH {
        return Err(PluginError(format!(
            "endpoint {} is longer than {MAX_SOCKET_PATH} bytes",
            info.endpoint
        )));
    }
    let rest = endpoint.strip_prefix(root).map_err(|_| {
        PluginError(format!(
            "endpoint {} is not below {}",
            info.endpoint,
            root.display()
        ))
    })?;
    let mut parts = Vec::new();
    for c in rest.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().unwrap_or("..")),
            _ => {
                return Err(PluginError(format!(
                    "endpoint {} is not a plain path",
                    info.endpoint
                )));
            }
        }
    }
    crate::safe_path::beneath(root, &parts)
        .map_err(|e| PluginError(format!("endpoint {}: {e}", info.endpoint)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder {
        refuse: bool,
        calls: Mutex<Vec<String>>,
    }

    impl PluginHandler for Recorder {
        fn validate(&self, name: &str, _: &Path, versions: &[String]) -> Result<(), PluginError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("validate {name} {}", versions.join(",")));
            if self.refuse {
                return Err(PluginError("no thanks".into()));
            }
            Ok(())
        }
        fn register(
            &self,
            name: &str,
            endpoint: &Path,
            _: &[String],
        ) -> futures::future::BoxFuture<'_, Result<(), PluginError>> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("register {name} {}", endpoint.display()));
            Box::pin(async { Ok(()) })
        }
        fn deregister(&self, name: &str) {
            self.calls
                .lock()
                .unwrap()
                .push(format!("deregister {name}"));
        }
    }

    fn info(endpoint: &str) -> api::PluginInfo {
        api::PluginInfo {
            r#type: "DevicePlugin".into(),
            name: "example.com/widget".into(),
            endpoint: endpoint.into(),
            supported_versions: vec!["v1beta1".into()],
        }
    }

    #[test]
    fn endpoints_outside_the_root_and_oversized_names_are_refused() {
        let root = Path::new("/var/lib/kubelet");
        let sock = root.join("plugins_registry/w.sock");
        assert_eq!(checked_info(&info(""), &sock, root).unwrap(), sock);
        let inside = "/var/lib/kubelet/plugins/w/dp.sock";
        assert_eq!(
            checked_info(&info(inside), &sock, root).unwrap(),
            Path::new(inside)
        );
        assert!(checked_info(&info("/etc/shadow"), &sock, root).is_err());
        assert!(checked_info(&info("/var/lib/kubelet/../../etc/x"), &sock, root).is_err());
        let long = api::PluginInfo {
            name: "x".repeat(MAX_NAME + 1),
            ..info("")
        };
        assert!(checked_info(&long, &sock, root).is_err());
    }

    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        for _ in 0..200 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// A root dir with its `plugins_registry/` and `device-plugins/`.
    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let registry = root.path().join("plugins_registry");
        let plugins = root.path().join("device-plugins");
        std::fs::create_dir_all(&registry).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        (root, registry, plugins)
    }

    /// A watcher of `registry` handing device plugins to `handler`, until the token.
    fn watch(
        registry: &Path,
        handler: Arc<Recorder>,
    ) -> (CancellationToken, tokio::task::JoinHandle<()>) {
        let mut w = PluginWatcher::new(registry);
        w.add_handler(super::super::DEVICE_PLUGIN, handler);
        let cancel = CancellationToken::new();
        (cancel.clone(), tokio::spawn(w.run(cancel)))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plugin_socket_is_registered_notified_and_deregistered() {
        use testapi::device_plugin::{DevicePlugin, PluginConfig};
        let (_root, registry, plugins) = dirs();
        let ok = Arc::new(Recorder::default());
        let (cancel, task) = watch(&registry, ok.clone());

        let mut config = PluginConfig::new(&plugins, "example.com/widget", 1);
        config.registry_dir = Some(registry.clone());
        let plugin = DevicePlugin::start(config).await.unwrap();
        until("the registration", || {
            plugin.registration_statuses() == vec![(true, String::new())]
        })
        .await;
        let calls = ok.calls.lock().unwrap().clone();
        assert_eq!(calls[0], "validate example.com/widget v1beta1");
        assert_eq!(
            calls[1],
            format!("register example.com/widget {}", plugin.socket().display())
        );
        plugin.stop();
        until("the deregistration", || {
            ok.calls.lock().unwrap().last().map(String::as_str)
                == Some("deregister example.com/widget")
        })
        .await;
        cancel.cancel();
        task.await.unwrap();

        // A handler that refuses: the plugin hears why.
        let no = Arc::new(Recorder {
            refuse: true,
            ..Recorder::default()
        });
        let (cancel, task) = watch(&registry, no);
        plugin.restart().await.unwrap();
        until("the refusal", || plugin.registration_statuses().len() == 2).await;
        assert_eq!(
            plugin.registration_statuses()[1],
            (
                false,
                "RegisterPlugin error -- plugin validation failed with err: no thanks".to_string()
            )
        );
        cancel.cancel();
        task.await.unwrap();
        plugin.stop();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_socket_in_a_directory_made_after_start_is_registered_and_hidden_ones_are_not() {
        use testapi::device_plugin::{DevicePlugin, PluginConfig};
        let (_root, registry, plugins) = dirs();
        let rec = Arc::new(Recorder::default());
        let (cancel, task) = watch(&registry, rec.clone());
        tokio::time::sleep(Duration::from_millis(100)).await;

        // Hidden: a socket in a hidden directory, and a hidden socket in a plain one.
        let vendor = registry.join("vendor").join("nested");
        let hidden_dir = registry.join(".cache");
        std::fs::create_dir_all(&vendor).unwrap();
        std::fs::create_dir_all(&hidden_dir).unwrap();
        let hidden = |dir: &Path, socket: &str| {
            let mut c = PluginConfig::new(&plugins, "example.com/hidden", 1);
            c.socket_name = socket.into();
            c.registry_dir = Some(dir.to_path_buf());
            DevicePlugin::start(c)
        };
        let in_hidden_dir = hidden(&hidden_dir, "a.sock").await.unwrap();
        let hidden_name = hidden(&vendor, ".b.sock").await.unwrap();

        let mut config = PluginConfig::new(&plugins, "example.com/widget", 1);
        config.registry_dir = Some(vendor.clone());
        let plugin = DevicePlugin::start(config).await.unwrap();
        until("the registration", || {
            plugin.registration_statuses() == vec![(true, String::new())]
        })
        .await;
        // A full rescan later, the hidden ones were still never asked.
        tokio::time::sleep(RESCAN + Duration::from_millis(500)).await;
        assert!(in_hidden_dir.registration_statuses().is_empty());
        assert!(hidden_name.registration_statuses().is_empty());
        let calls = rec.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            [
                "validate example.com/widget v1beta1".to_string(),
                format!("register example.com/widget {}", plugin.socket().display()),
            ]
        );
        plugin.stop();
        until("the deregistration", || {
            rec.calls.lock().unwrap().last().map(String::as_str)
                == Some("deregister example.com/widget")
        })
        .await;
        cancel.cancel();
        task.await.unwrap();
        in_hidden_dir.stop();
        hidden_name.stop();
    }
}
