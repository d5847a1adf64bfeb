//! A device plugin for tests: it serves kubelet's device plugin API (v1beta1) on a
//! unix socket, registers with `kubelet.sock` (or announces itself in
//! `plugins_registry/`), advertises N fake devices of one resource, and gives each
//! allocated container the device files (one per device, in a temporary directory)
//! as mounts at `/widgets/<id>` and their ids in `WIDGET_IDS`.
//!
//! The protocol is written here independently of oxlet's side (messages by hand, the
//! field numbers of kubelet's `api.proto`), so a test checks the two against each other.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;

/// The messages, as the `.proto` numbers them.
pub mod wire {
    use std::collections::BTreeMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Options {
        #[prost(bool, tag = "1")]
        pub pre_start_required: bool,
        #[prost(bool, tag = "2")]
        pub get_preferred_allocation_available: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RegisterRequest {
        #[prost(string, tag = "1")]
        pub version: String,
        #[prost(string, tag = "2")]
        pub endpoint: String,
        #[prost(string, tag = "3")]
        pub resource_name: String,
        #[prost(message, optional, tag = "4")]
        pub options: Option<Options>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListAndWatchResponse {
        #[prost(message, repeated, tag = "1")]
        pub devices: Vec<Device>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Topology {
        #[prost(message, repeated, tag = "1")]
        pub nodes: Vec<Node>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Node {
        #[prost(int64, tag = "1")]
        pub id: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Device {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(string, tag = "2")]
        pub health: String,
        #[prost(message, optional, tag = "3")]
        pub topology: Option<Topology>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct IdsRequest {
        #[prost(message, repeated, tag = "1")]
        pub container_requests: Vec<Ids>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Ids {
        #[prost(string, repeated, tag = "1")]
        pub devices_ids: Vec<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AllocateResponse {
        #[prost(message, repeated, tag = "1")]
        pub container_responses: Vec<ContainerAllocateResponse>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerAllocateResponse {
        #[prost(btree_map = "string, string", tag = "1")]
        pub envs: BTreeMap<String, String>,
        #[prost(message, repeated, tag = "2")]
        pub mounts: Vec<Mount>,
        #[prost(message, repeated, tag = "3")]
        pub devices: Vec<DeviceSpec>,
        #[prost(btree_map = "string, string", tag = "4")]
        pub annotations: BTreeMap<String, String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mount {
        #[prost(string, tag = "1")]
        pub container_path: String,
        #[prost(string, tag = "2")]
        pub host_path: String,
        #[prost(bool, tag = "3")]
        pub read_only: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DeviceSpec {
        #[prost(string, tag = "1")]
        pub container_path: String,
        #[prost(string, tag = "2")]
        pub host_path: String,
        #[prost(string, tag = "3")]
        pub permissions: String,
    }
    /// `pluginregistration.PluginInfo`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PluginInfo {
        #[prost(string, tag = "1")]
        pub r#type: String,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(string, tag = "3")]
        pub endpoint: String,
        #[prost(string, repeated, tag = "4")]
        pub supported_versions: Vec<String>,
    }
    /// `pluginregistration.RegistrationStatus`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RegistrationStatus {
        #[prost(bool, tag = "1")]
        pub plugin_registered: bool,
        #[prost(string, tag = "2")]
        pub error: String,
    }
}

use wire::*;

/// What the plugin is and does.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// kubelet's `device-plugins/` directory (its `kubelet.sock` is there).
    pub plugin_dir: PathBuf,
    /// The resource name, e.g. `example.com/widget`.
    pub resource: String,
    /// The socket's file name in `plugin_dir`.
    pub socket_name: String,
    pub devices: usize,
    /// Device i is on NUMA node `numa[i % len]`; empty: no topology.
    pub numa: Vec<i64>,
    pub pre_start_required: bool,
    /// Answer `GetPreferredAllocation` (with the highest ids).
    pub preferred: bool,
    /// Announce in this `plugins_registry/` instead of calling `Register`.
    pub registry_dir: Option<PathBuf>,
}

impl PluginConfig {
    pub fn new(plugin_dir: &Path, resource: &str, devices: usize) -> Self {
        PluginConfig {
            plugin_dir: plugin_dir.to_path_buf(),
            resource: resource.to_string(),
            socket_name: "widget.sock".into(),
            devices,
            numa: Vec::new(),
            pre_start_required: false,
            preferred: false,
            registry_dir: None,
        }
    }
}

struct Inner {
    config: PluginConfig,
    files: tempfile_dir::Dir,
    health: watch::Sender<BTreeMap<String, bool>>,
    allocate_calls: AtomicUsize,
    pre_start_calls: AtomicUsize,
    preferred_calls: AtomicUsize,
    statuses: Mutex<Vec<(bool, String)>>,
    serving: Mutex<Option<CancellationToken>>,
}

/// A running test device plugin.
#[derive(Clone)]
pub struct DevicePlugin(Arc<Inner>);

/// A failure of the plugin's own set-up or of registration.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PluginError(String);

impl DevicePlugin {
    /// Creates the device files, serves the socket and registers.
    pub async fn start(config: PluginConfig) -> Result<Self, PluginError> {
        let files = tempfile_dir::Dir::new().map_err(|e| PluginError(e.to_string()))?;
        let mut health = BTreeMap::new();
        for i in 0..config.devices {
            let id = format!("widget-{i}");
            std::fs::write(files.0.join(&id), format!("{id}\n"))
                .map_err(|e| PluginError(e.to_string()))?;
            health.insert(id, true);
        }
        let plugin = DevicePlugin(Arc::new(Inner {
            config,
            files,
            health: watch::channel(health).0,
            allocate_calls: AtomicUsize::new(0),
            pre_start_calls: AtomicUsize::new(0),
            preferred_calls: AtomicUsize::new(0),
            statuses: Mutex::new(Vec::new()),
            serving: Mutex::new(None),
        }));
        plugin.restart().await?;
        Ok(plugin)
    }

    /// The device ids, in order.
    pub fn device_ids(&self) -> Vec<String> {
        self.0.health.borrow().keys().cloned().collect()
    }

    /// The file standing for device `id` on the host.
    pub fn device_file(&self, id: &str) -> PathBuf {
        self.0.files.0.join(id)
    }

    /// The plugin's socket.
    pub fn socket(&self) -> PathBuf {
        self.0.config.plugin_dir.join(&self.0.config.socket_name)
    }

    /// Reports device `id` healthy or not (a new `ListAndWatch` message).
    pub fn set_healthy(&self, id: &str, healthy: bool) {
        self.0.health.send_modify(|h| {
            if let Some(v) = h.get_mut(id) {
                *v = healthy;
            }
        });
    }

    pub fn allocate_calls(&self) -> usize {
        self.0.allocate_calls.load(Ordering::SeqCst)
    }

    pub fn pre_start_calls(&self) -> usize {
        self.0.pre_start_calls.load(Ordering::SeqCst)
    }

    pub fn preferred_calls(&self) -> usize {
        self.0.preferred_calls.load(Ordering::SeqCst)
    }

    /// What kubelet said through `NotifyRegistrationStatus` (watcher registration).
    pub fn registration_statuses(&self) -> Vec<(bool, String)> {
        self.0.statuses.lock().unwrap().clone()
    }

    /// Stops serving (ends `ListAndWatch`) and removes the sockets, as a plugin that exits.
    pub fn stop(&self) {
        if let Some(t) = self.0.serving.lock().unwrap().take() {
            t.cancel();
        }
        let _ = std::fs::remove_file(self.socket());
        if let Some(reg) = &self.0.config.registry_dir {
            let _ = std::fs::remove_file(reg.join(self.registry_socket_name()));
        }
    }

    fn registry_socket_name(&self) -> String {
        format!(
            "{}-reg.sock",
            self.0.config.socket_name.trim_end_matches(".sock")
        )
    }

    /// Serves again and registers again (a restarted plugin, or one answering a
    /// restarted kubelet).
    pub async fn restart(&self) -> Result<(), PluginError> {
        self.stop();
        let cancel = CancellationToken::new();
        *self.0.serving.lock().unwrap() = Some(cancel.clone());
        serve(self.socket(), self.router(), cancel.clone())?;
        match &self.0.config.registry_dir {
            Some(reg) => serve(reg.join(self.registry_socket_name()), self.router(), cancel),
            None => self.register().await,
        }
    }

    async fn register(&self) -> Result<(), PluginError> {
        let c = &self.0.config;
        let req = RegisterRequest {
            version: "v1beta1".into(),
            endpoint: c.socket_name.clone(),
            resource_name: c.resource.clone(),
            options: Some(Options {
                pre_start_required: c.pre_start_required,
                get_preferred_allocation_available: c.preferred,
            }),
        };
        let kubelet = c.plugin_dir.join("kubelet.sock");
        let channel =
            tonic::transport::Endpoint::from_shared(format!("unix://{}", kubelet.display()))
                .map_err(|e| PluginError(e.to_string()))?
                .connect()
                .await
                .map_err(|e| PluginError(format!("dialing kubelet.sock: {e}")))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| PluginError(e.to_string()))?;
        let path = http::uri::PathAndQuery::from_static("/v1beta1.Registration/Register");
        let _: tonic::Response<Empty> = grpc
            .unary(
                tonic::Request::new(req),
                path,
                tonic_prost::ProstCodec::default(),
            )
            .await
            .map_err(|s| PluginError(format!("Register refused: {}", s.message())))?;
        Ok(())
    }

    fn devices(&self) -> ListAndWatchResponse {
        let numa = &self.0.config.numa;
        let devices = self
            .0
            .health
            .borrow()
            .iter()
            .enumerate()
            .map(|(i, (id, healthy))| Device {
                id: id.clone(),
                health: if *healthy { "Healthy" } else { "Unhealthy" }.into(),
                topology: (!numa.is_empty()).then(|| Topology {
                    nodes: vec![Node {
                        id: numa[i % numa.len()],
                    }],
                }),
            })
            .collect();
        ListAndWatchResponse { devices }
    }

    fn allocate(&self, req: IdsRequest) -> Result<AllocateResponse, tonic::Status> {
        self.0.allocate_calls.fetch_add(1, Ordering::SeqCst);
        let mut out = AllocateResponse::default();
        for c in req.container_requests {
            let mut resp = ContainerAllocateResponse::default();
            for id in &c.devices_ids {
                if !self.0.health.borrow().contains_key(id) {
                    return Err(tonic::Status::invalid_argument(format!(
                        "unknown device {id}"
                    )));
                }
                resp.mounts.push(Mount {
                    container_path: format!("/widgets/{id}"),
                    host_path: self.device_file(id).display().to_string(),
                    read_only: true,
                });
            }
            resp.envs
                .insert("WIDGET_IDS".into(), c.devices_ids.join(","));
            out.container_responses.push(resp);
        }
        Ok(out)
    }

    fn router(&self) -> Router {
        let p = self.clone();
        let options = Options {
            pre_start_required: p.0.config.pre_start_required,
            get_preferred_allocation_available: p.0.config.preferred,
        };
        let mut r = Router::default();
        r.unary(
            "/v1beta1.DevicePlugin/GetDevicePluginOptions",
            move |_: Empty| {
                let o = options.clone();
                async move { Ok(o) }
            },
        );
        let q = p.clone();
        r.unary("/v1beta1.DevicePlugin/Allocate", move |req: IdsRequest| {
            let res = q.allocate(req);
            async move { res }
        });
        let q = p.clone();
        r.unary("/v1beta1.DevicePlugin/PreStartContainer", move |_: Ids| {
            q.0.pre_start_calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok(Empty {}) }
        });
        let q = p.clone();
        r.unary(
            "/v1beta1.DevicePlugin/GetPreferredAllocation",
            move |req: PreferredRequest| {
                q.0.preferred_calls.fetch_add(1, Ordering::SeqCst);
                let resp = PreferredResponse {
                    container_responses: req
                        .container_requests
                        .into_iter()
                        .map(|c| {
                            let mut ids = c.available_device_ids;
                            ids.sort();
                            ids.reverse();
                            ids.truncate(usize::try_from(c.allocation_size).unwrap_or(0));
                            Ids { devices_ids: ids }
                        })
                        .collect(),
                };
                async move { Ok(resp) }
            },
        );
        let q = p.clone();
        r.streaming("/v1beta1.DevicePlugin/ListAndWatch", move |_: Empty| {
            let q = q.clone();
            let cancel = q.0.serving.lock().unwrap().clone().unwrap_or_default();
            let rx = q.0.health.subscribe();
            let first = futures::stream::once({
                let d = q.devices();
                async move { Ok(d) }
            });
            let updates =
                futures::stream::unfold((rx, cancel, q), |(mut rx, cancel, q)| async move {
                    tokio::select! {
                        () = cancel.cancelled() => None,
                        changed = rx.changed() => match changed {
                            Ok(()) => Some((Ok(q.devices()), (rx, cancel, q))),
                            Err(_) => None,
                        },
                    }
                });
            let s: BoxStream<'static, Result<ListAndWatchResponse, tonic::Status>> =
                Box::pin(futures::StreamExt::chain(first, updates));
            s
        });
        let q = p.clone();
        r.unary(
            "/pluginregistration.Registration/GetInfo",
            move |_: Empty| {
                let c = &q.0.config;
                let info = PluginInfo {
                    r#type: "DevicePlugin".into(),
                    name: c.resource.clone(),
                    endpoint: q.socket().display().to_string(),
                    supported_versions: vec!["v1beta1".into()],
                };
                async move { Ok(info) }
            },
        );
        let q = p;
        r.unary(
            "/pluginregistration.Registration/NotifyRegistrationStatus",
            move |s: RegistrationStatus| {
                q.0.statuses
                    .lock()
                    .unwrap()
                    .push((s.plugin_registered, s.error));
                async move { Ok(Empty {}) }
            },
        );
        r
    }
}

/// `v1beta1.PreferredAllocationRequest` and its response.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredRequest {
    #[prost(message, repeated, tag = "1")]
    pub container_requests: Vec<PreferredContainer>,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredContainer {
    #[prost(string, repeated, tag = "1")]
    pub available_device_ids: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub must_include_device_ids: Vec<String>,
    #[prost(int32, tag = "3")]
    pub allocation_size: i32,
}
#[derive(Clone, PartialEq, prost::Message)]
pub struct PreferredResponse {
    #[prost(message, repeated, tag = "1")]
    pub container_responses: Vec<Ids>,
}

type Handler =
    Arc<dyn Fn(http::Request<Body>) -> BoxFuture<'static, http::Response<Body>> + Send + Sync>;

/// Method paths to handlers, as a tonic server's service.
#[derive(Clone, Default)]
struct Router(BTreeMap<&'static str, Handler>);

impl Router {
    fn unary<Req, Resp, F, Fut>(&mut self, path: &'static str, f: F)
    where
        Req: prost::Message + Default + Send + 'static,
        Resp: prost::Message + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Resp, tonic::Status>> + Send + 'static,
    {
        let h: Handler = Arc::new(move |req| {
            let f = f.clone();
            let svc = tower::service_fn(move |r: tonic::Request<Req>| {
                let fut = f(r.into_inner());
                async move { fut.await.map(tonic::Response::new) }
            });
            Box::pin(async move {
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default())
                    .unary(svc, req)
                    .await
            })
        });
        self.0.insert(path, h);
    }

    fn streaming<Req, Resp, F>(&mut self, path: &'static str, f: F)
    where
        Req: prost::Message + Default + Send + 'static,
        Resp: prost::Message + Send + 'static,
        F: Fn(Req) -> BoxStream<'static, Result<Resp, tonic::Status>>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        let h: Handler = Arc::new(move |req| {
            let f = f.clone();
            let svc = tower::service_fn(move |r: tonic::Request<Req>| {
                let s = f(r.into_inner());
                async move { Ok::<_, tonic::Status>(tonic::Response::new(s)) }
            });
            Box::pin(async move {
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default())
                    .server_streaming(svc, req)
                    .await
            })
        });
        self.0.insert(path, h);
    }
}

impl tower::Service<http::Request<Body>> for Router {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.0.get(req.uri().path()) {
            Some(h) => {
                let fut = h(req);
                Box::pin(async move { Ok(fut.await) })
            }
            None => {
                let (parts, ()) = tonic::Status::unimplemented("")
                    .into_http::<()>()
                    .into_parts();
                Box::pin(async move { Ok(http::Response::from_parts(parts, Body::empty())) })
            }
        }
    }
}

/// Binds `path` and serves `router` on it in a task until `cancel`.
fn serve(path: PathBuf, router: Router, cancel: CancellationToken) -> Result<(), PluginError> {
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| PluginError(format!("binding {}: {e}", path.display())))?;
    let incoming = futures::stream::unfold(listener, |l| async move {
        Some((l.accept().await.map(|(s, _)| s), l))
    });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .serve_with_incoming_shutdown(router, incoming, cancel.cancelled_owned())
            .await;
    });
    Ok(())
}

/// A temporary directory removed on drop (no `tempfile` dependency in this crate).
mod tempfile_dir {
    use std::path::PathBuf;

    pub(super) struct Dir(pub PathBuf);

    impl Dir {
        pub(super) fn new() -> std::io::Result<Self> {
            let p = std::env::temp_dir().join(format!(
                "widgets-{}-{}",
                std::process::id(),
                fastrand::u64(..)
            ));
            std::fs::create_dir_all(&p)?;
            Ok(Dir(p))
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
