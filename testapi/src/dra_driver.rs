//! A DRA driver for tests, as a real one runs beside kubelet: it registers through the
//! plugin registry (`<registry>/<driver>-reg.sock`, pluginregistration v1 `Registration`:
//! type `DRAPlugin`, its endpoint, the services it speaks), serves the kubelet DRA v1
//! service on its endpoint, publishes a ResourceSlice of its devices for its node, and
//! prepares a claim by writing a CDI spec (JSON) into its CDI dir: one CDI device per
//! allocated device, each mounting the host file given into the container at
//! `/var/run/dra/<device>`. Unprepare removes the spec. Calls are counted.
//!
//! It shares nothing with oxlet: the messages are its own copy of the wire contract.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::api::resource::v1::{Device, ResourcePool, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic_prost::ProstCodec;

use crate::ApiHandle;

/// The wire messages: kubelet's DRA v1 and pluginregistration v1.
pub mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodePrepareResourcesRequest {
        #[prost(message, repeated, tag = "1")]
        pub claims: Vec<Claim>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodePrepareResourcesResponse {
        #[prost(map = "string, message", tag = "1")]
        pub claims: std::collections::HashMap<String, NodePrepareResourceResponse>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodePrepareResourceResponse {
        #[prost(message, repeated, tag = "1")]
        pub devices: Vec<Device>,
        #[prost(string, tag = "2")]
        pub error: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Device {
        #[prost(string, repeated, tag = "1")]
        pub request_names: Vec<String>,
        #[prost(string, tag = "2")]
        pub pool_name: String,
        #[prost(string, tag = "3")]
        pub device_name: String,
        #[prost(string, repeated, tag = "4")]
        pub cdi_device_ids: Vec<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeUnprepareResourcesRequest {
        #[prost(message, repeated, tag = "1")]
        pub claims: Vec<Claim>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeUnprepareResourcesResponse {
        #[prost(map = "string, message", tag = "1")]
        pub claims: std::collections::HashMap<String, NodeUnprepareResourceResponse>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeUnprepareResourceResponse {
        #[prost(string, tag = "1")]
        pub error: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Claim {
        #[prost(string, tag = "1")]
        pub namespace: String,
        #[prost(string, tag = "2")]
        pub uid: String,
        #[prost(string, tag = "3")]
        pub name: String,
    }
    /// pluginregistration v1 `InfoRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InfoRequest {}
    /// pluginregistration v1 `PluginInfo`.
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
    /// pluginregistration v1 `RegistrationStatus`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RegistrationStatus {
        #[prost(bool, tag = "1")]
        pub plugin_registered: bool,
        #[prost(string, tag = "2")]
        pub error: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RegistrationStatusResponse {}
}

/// The pluginregistration service's methods.
pub const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
pub const NOTIFY_STATUS: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";
const PREPARE: &str = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
const UNPREPARE: &str = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";

/// What the driver is and where it lives.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// The driver's name (a DNS subdomain), also its CDI vendor.
    pub driver: String,
    pub node: String,
    /// The directory of its DRA socket (`dra.sock`), e.g. `/var/lib/kubelet/plugins/<driver>`.
    pub plugin_dir: PathBuf,
    /// kubelet's plugin registry, e.g. `/var/lib/kubelet/plugins_registry`.
    pub registry_dir: PathBuf,
    /// Where CDI specs go (`/etc/cdi`, `/var/run/cdi`).
    pub cdi_dir: PathBuf,
    /// The host file each prepared device mounts into the container.
    pub host_file: PathBuf,
    /// The devices the driver publishes (one pool named after the node).
    pub devices: Vec<String>,
    /// The services it says it speaks in its registration.
    pub versions: Vec<String>,
}

impl DriverConfig {
    /// A driver named `driver` on `node` with devices `dev-0`…`dev-<n-1>`, its sockets
    /// and CDI dir under `root`.
    pub fn under(root: &Path, driver: &str, node: &str, host_file: &Path, n: usize) -> Self {
        DriverConfig {
            driver: driver.to_owned(),
            node: node.to_owned(),
            plugin_dir: root.join("plugins").join(driver),
            registry_dir: root.join("plugins_registry"),
            cdi_dir: root.join("cdi"),
            host_file: host_file.to_owned(),
            devices: (0..n).map(|i| format!("dev-{i}")).collect(),
            versions: vec!["v1.DRAPlugin".into()],
        }
    }
}

#[derive(Default)]
struct Counters {
    prepare: AtomicUsize,
    unprepare: AtomicUsize,
    registered: Mutex<Option<(bool, String)>>,
    /// Claims the next prepare answers with this error, by claim name.
    fail: Mutex<HashMap<String, String>>,
}

struct Inner {
    config: DriverConfig,
    api: Option<ApiHandle>,
    counters: Counters,
}

/// A running test driver; dropping it stops both servers and removes the sockets.
pub struct TestDraDriver {
    inner: Arc<Inner>,
    cancel: CancellationToken,
}

impl Drop for TestDraDriver {
    fn drop(&mut self) {
        self.cancel.cancel();
        let _ = std::fs::remove_file(self.endpoint());
        let _ = std::fs::remove_file(self.registration_socket());
    }
}

impl TestDraDriver {
    /// Publishes its ResourceSlice through `api` (when given) and serves both sockets.
    pub async fn start(config: DriverConfig, api: Option<ApiHandle>) -> std::io::Result<Self> {
        for d in [&config.plugin_dir, &config.registry_dir, &config.cdi_dir] {
            std::fs::create_dir_all(d)?;
        }
        let inner = Arc::new(Inner {
            config,
            api,
            counters: Counters::default(),
        });
        if let Some(api) = &inner.api {
            api.put(&inner.slice()).map_err(std::io::Error::other)?;
        }
        let cancel = CancellationToken::new();
        let driver = TestDraDriver {
            inner: inner.clone(),
            cancel: cancel.clone(),
        };
        let dra = serve_on(driver.endpoint(), DraService(inner.clone()), cancel.clone())?;
        let reg = serve_on(
            driver.registration_socket(),
            RegistrationService(inner),
            cancel,
        )?;
        tokio::spawn(dra);
        tokio::spawn(reg);
        Ok(driver)
    }

    /// Its DRA service's socket.
    pub fn endpoint(&self) -> PathBuf {
        self.inner.config.plugin_dir.join("dra.sock")
    }

    /// Its registration socket in the plugin registry.
    pub fn registration_socket(&self) -> PathBuf {
        self.inner
            .config
            .registry_dir
            .join(format!("{}-reg.sock", self.inner.config.driver))
    }

    pub fn prepare_calls(&self) -> usize {
        self.inner.counters.prepare.load(Ordering::SeqCst)
    }

    pub fn unprepare_calls(&self) -> usize {
        self.inner.counters.unprepare.load(Ordering::SeqCst)
    }

    /// What kubelet's `NotifyRegistrationStatus` said last: registered, and the error.
    pub fn registration_status(&self) -> Option<(bool, String)> {
        self.inner
            .counters
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The CDI spec file of a prepared claim.
    pub fn cdi_spec(&self, claim_uid: &str) -> PathBuf {
        self.inner.spec_file(claim_uid)
    }

    /// The next prepare of claim `name` answers `error` for it.
    pub fn fail_claim(&self, name: &str, error: &str) {
        let mut f = self
            .inner
            .counters
            .fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.insert(name.to_owned(), error.to_owned());
    }
}

impl Inner {
    fn vendor_kind(&self) -> String {
        format!("{}/claim", self.config.driver)
    }

    fn spec_file(&self, claim_uid: &str) -> PathBuf {
        self.config
            .cdi_dir
            .join(format!("{}-{claim_uid}.json", self.config.driver))
    }

    fn slice(&self) -> ResourceSlice {
        let c = &self.config;
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(format!("{}-{}", c.node, c.driver.replace('.', "-"))),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: c.driver.clone(),
                node_name: Some(c.node.clone()),
                pool: ResourcePool {
                    name: c.node.clone(),
                    generation: 1,
                    resource_slice_count: 1,
                },
                devices: Some(
                    c.devices
                        .iter()
                        .map(|d| Device {
                            name: d.clone(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            },
        }
    }

    /// One claim: its devices of this driver from the allocation, a CDI spec written.
    fn prepare_claim(&self, claim: &wire::Claim) -> Result<Vec<wire::Device>, String> {
        if let Some(e) = self
            .counters
            .fail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&claim.name)
        {
            return Err(e);
        }
        let api = self
            .api
            .as_ref()
            .ok_or("no apiserver to read the claim from")?;
        let rc: ResourceClaim = api
            .get(&claim.namespace, &claim.name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("ResourceClaim {}/{} not found", claim.namespace, claim.name))?;
        if rc.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return Err(format!("ResourceClaim {} has another UID", claim.name));
        }
        let results = rc
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results);
        let mine: Vec<_> = results
            .into_iter()
            .flatten()
            .filter(|r| r.driver == self.config.driver)
            .collect();
        let kind = self.vendor_kind();
        let mut cdi_devices = Vec::new();
        let mut out = Vec::new();
        for r in mine {
            let name = format!("{}-{}", claim.uid, r.device);
            cdi_devices.push(json!({"name": name, "containerEdits": {
                "env": [format!("DRA_DEVICE_{}={}", r.request.to_uppercase().replace('-', "_"), r.device)],
                "mounts": [{"hostPath": self.config.host_file, "containerPath": format!("/var/run/dra/{}", r.device), "options": ["ro", "bind"]}],
            }}));
            out.push(wire::Device {
                request_names: vec![r.request],
                pool_name: r.pool,
                device_name: r.device,
                cdi_device_ids: vec![format!("{kind}={name}")],
            });
        }
        let spec = json!({"cdiVersion": "0.6.0", "kind": kind, "devices": cdi_devices});
        let file = self.spec_file(&claim.uid);
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, spec.to_string())
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn prepare(
        &self,
        req: wire::NodePrepareResourcesRequest,
    ) -> wire::NodePrepareResourcesResponse {
        self.counters.prepare.fetch_add(1, Ordering::SeqCst);
        let claims = req.claims.iter().map(|c| {
            let answer = match self.prepare_claim(c) {
                Ok(devices) => wire::NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
                Err(error) => wire::NodePrepareResourceResponse {
                    devices: Vec::new(),
                    error,
                },
            };
            (c.uid.clone(), answer)
        });
        wire::NodePrepareResourcesResponse {
            claims: claims.collect(),
        }
    }

    fn unprepare(
        &self,
        req: wire::NodeUnprepareResourcesRequest,
    ) -> wire::NodeUnprepareResourcesResponse {
        self.counters.unprepare.fetch_add(1, Ordering::SeqCst);
        let claims = req.claims.iter().map(|c| {
            let error = match std::fs::remove_file(self.spec_file(&c.uid)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => e.to_string(),
                _ => String::new(),
            };
            (c.uid.clone(), wire::NodeUnprepareResourceResponse { error })
        });
        wire::NodeUnprepareResourcesResponse {
            claims: claims.collect(),
        }
    }
}

/// Serves `svc` on a fresh unix socket at `path` until `cancel`.
fn serve_on<S>(
    path: PathBuf,
    svc: S,
    cancel: CancellationToken,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    let incoming = futures::stream::unfold(listener, |l| async move {
        let next = l.accept().await.map(|(s, _)| s);
        Some((next, l))
    });
    Ok(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
            .await;
    })
}

type BoxFut = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<http::Response<Body>, Infallible>> + Send>,
>;

/// One unary method: `f` on the decoded request, the answer encoded.
async fn unary<Req, Resp>(
    req: http::Request<Body>,
    f: impl FnOnce(Req) -> Resp + Send + 'static,
) -> http::Response<Body>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let f = Mutex::new(Some(f));
    let svc = tower::service_fn(move |r: tonic::Request<Req>| {
        let f = f.lock().unwrap_or_else(PoisonError::into_inner).take();
        async move {
            match f {
                Some(f) => Ok(tonic::Response::new(f(r.into_inner()))),
                None => Err(tonic::Status::internal("called twice")),
            }
        }
    });
    tonic::server::Grpc::new(ProstCodec::<Resp, Req>::default())
        .unary(svc, req)
        .await
}

#[derive(Clone)]
struct DraService(Arc<Inner>);

impl NamedService for DraService {
    const NAME: &'static str = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin";
}

impl tower::Service<http::Request<Body>> for DraService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> BoxFut {
        let inner = self.0.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                PREPARE => unary(req, move |r| inner.prepare(r)).await,
                UNPREPARE => unary(req, move |r| inner.unprepare(r)).await,
                _ => tonic::Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

#[derive(Clone)]
struct RegistrationService(Arc<Inner>);

impl NamedService for RegistrationService {
    const NAME: &'static str = "pluginregistration.Registration";
}

impl tower::Service<http::Request<Body>> for RegistrationService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> BoxFut {
        let inner = self.0.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                GET_INFO => {
                    unary(req, move |_: wire::InfoRequest| wire::PluginInfo {
                        r#type: "DRAPlugin".into(),
                        name: inner.config.driver.clone(),
                        endpoint: inner
                            .config
                            .plugin_dir
                            .join("dra.sock")
                            .display()
                            .to_string(),
                        supported_versions: inner.config.versions.clone(),
                    })
                    .await
                }
                NOTIFY_STATUS => {
                    unary(req, move |s: wire::RegistrationStatus| {
                        *inner
                            .counters
                            .registered
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) =
                            Some((s.plugin_registered, s.error));
                        wire::RegistrationStatusResponse {}
                    })
                    .await
                }
                _ => tonic::Status::unimplemented("no such method").into_http(),
            })
        })
    }
}
