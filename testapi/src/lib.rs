//! A small Kubernetes apiserver for oxlet's cluster-mode tests. It speaks the real HTTP/JSON
//! protocol (discovery, list/watch with selectors and resourceVersions, 410 Gone, the status
//! subresource with merge/strategic/JSON patches, graceful pod deletion with preconditions,
//! leases with optimistic locking, events, configMaps, secrets, TokenRequest, CSRs) and is as
//! strict as the real one (content types, unknown fields, list items without TypeMeta), so
//! kube-rs and kubectl run against it unmodified. It can stop and restart keeping its state,
//! for outage tests; tests also read and write objects directly, without HTTP.
//!
//! Pods are resized as 1.36 does it, through `pods/resize` only (GET, PUT and the three
//! patch types; `resize.rs`): the containers' and init containers' `resources` and
//! `resizePolicy` and the pod-level `spec.resources` are taken from the request and the
//! rest ignored, `ValidatePodResize`'s refusals come with its field paths and words (QoS
//! class kept, cpu and memory only, nothing removed, sidecars but no other init container,
//! no static or Windows pod, a running pod's node must report container resources), and a
//! change moves `metadata.generation`. A plain pod update may change only what
//! `ValidatePodUpdate` lets it (`pod_update.rs`: images, a lower or new
//! `activeDeadlineSeconds`, added tolerations, removed scheduling gates, a negative grace
//! period to 1, a gated pod's added node selector and affinity); anything else in the spec,
//! resources included, is refused with its fixed text (the spec diff the real one appends
//! is left out).
//!
//! resource.k8s.io/v1 is served (ResourceClaims with their status subresource, templates,
//! DeviceClasses, ResourceSlices with `deletecollection`; `dra_rules.rs`), with node
//! identities (`add_node_token`: `system:node:<name>`) bound by the node authorizer's rules
//! on that group; on koordinator's `slo.koordinator.sh` (and RBAC's own group) a node
//! identity gets only what a ClusterRoleBinding to it or to `system:nodes` grants
//! (`rbac.rs`; ClusterRoles and ClusterRoleBindings are served). `ApiHandle::allocate_claims`
//! does what the scheduler and the resourceclaim controller do for a pod's claims, and
//! `dra_driver` is a DRA driver for tests.
//!
//! Not a real apiserver: no admission but RuntimeClass's (so no NodeDeclaredFeatureValidator
//! on resizes, no LimitRanger or ResourceQuota), and validation only where oxlet's writes meet it
//! (pods: `validate.rs`; their status updates and server-set fields: `pod_rules.rs`;
//! nodes and their status: `node_rules.rs`); no
//! RBAC but for node identities as above (one bearer token, anonymous allowed unless
//! turned off); no Namespace objects; no
//! server-side apply (415) and no protobuf; no `sendInitialEvents` streaming lists; the two
//! Event APIs are stored apart (the real one converts between them); pods get `phase: Pending`,
//! their `qosClass` and `generation` 1 on create; a too-old resourceVersion is 410 with reason
//! `Expired` (as the watch cache answers), and a list or watch newer than the store is 504
//! at once (the real one waits up to 3 s for the version first).

mod allocate;
mod custom;
pub mod device_plugin;
pub mod dra_driver;
mod dra_rules;
#[cfg(test)]
mod dra_tests;
mod http;
mod node_rules;
mod patch;
mod pod_rules;
mod pod_update;
mod proxy;
mod rbac;
mod resize;
mod resources;
mod reviews;
mod selectors;
mod status;
mod store;
mod validate;
mod verbs;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use http::RequestRecord;
pub use reviews::{credential_id, user_uid};
pub use status::ApiError;

use http::Shared;
use store::{Persisted, Store};

/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a state file of this server: {source}")]
    State {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{kind} is not served by the test apiserver")]
    UnknownResource { kind: String },
    #[error("encoding or decoding {kind}: {source}")]
    Json {
        kind: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Api(#[from] ApiError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

/// A running (or stopped) test apiserver. Dropping it stops serving; `stop` also saves state.
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    state_dir: PathBuf,
    kubeconfig: PathBuf,
    running: Option<Running>,
}

struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.cancel.cancel();
        }
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, cancel: CancellationToken) {
    // Every connection is a task of this set, so stopping closes them all: a client's
    // pooled keep-alive connection must see the outage too.
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            a = listener.accept() => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Ok((stream, _)) = accepted else { continue };
        if conns.len() >= MAX_CONNECTIONS {
            drop(stream);
            continue;
        }
        let shared = shared.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(http::handle(shared, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                () = cancel.cancelled() => {}
                _ = conn => {}
            }
        });
    }
    drop(listener);
    conns.shutdown().await;
}

fn resource_id<K: k8s_openapi::Resource>() -> Result<&'static resources::Def, Error> {
    let id = if K::GROUP.is_empty() {
        K::URL_PATH_SEGMENT.to_owned()
    } else {
        format!("{}/{}", K::GROUP, K::URL_PATH_SEGMENT)
    };
    resources::by_id(&[], &id).ok_or_else(|| Error::UnknownResource {
        kind: K::KIND.to_owned(),
    })
}

impl TestApiServer {
    /// Start on a free loopback port. State saved in `state_dir` by an earlier `stop` is loaded;
    /// the bearer token and the kubeconfig for clients are written there too.
    pub async fn start(state_dir: &Path) -> Result<Self, Error> {
        Self::start_on(state_dir, 0).await
    }

    /// [`Self::start`] on loopback port `port` (0: a free one), so a server started by
    /// hand can be restarted where its clients' kubeconfig points.
    pub async fn start_on(state_dir: &Path, port: u16) -> Result<Self, Error> {
        std::fs::create_dir_all(state_dir).map_err(io(state_dir))?;
        let state_file = state_dir.join("state.json");
        let state = match std::fs::read(&state_file) {
            Ok(bytes) => Some(
                serde_json::from_slice::<Persisted>(&bytes).map_err(|source| Error::State {
                    path: state_file.clone(),
                    source,
                })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&state_file)(e)),
        };
        let token_file = state_dir.join("token");
        let token = match std::fs::read_to_string(&token_file) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            _ => {
                let t = format!(
                    "testapi-{:016x}{:016x}",
                    fastrand::u64(..),
                    fastrand::u64(..)
                );
                std::fs::write(&token_file, &t).map_err(io(&token_file))?;
                t
            }
        };
        let any: SocketAddr = ([127, 0, 0, 1], port).into();
        let listener = TcpListener::bind(any)
            .await
            .map_err(|source| Error::Bind { addr: any, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr: any, source })?;
        let shared = Arc::new(Shared {
            store: Store::new(state),
            token,
            anonymous: AtomicBool::new(true),
            server_address: addr.to_string(),
            watchers: AtomicUsize::new(0),
            bookmark_every: Mutex::new(Duration::from_secs(60)),
            token_max: Mutex::new(None),
            issued: AtomicU64::new(0),
            log: Mutex::new(std::collections::VecDeque::new()),
            reviews: Mutex::new(reviews::Rules::default()),
            kubelet_client: Mutex::new(None),
            custom: custom::Custom::default(),
            node_tokens: Mutex::new(Vec::new()),
        });
        let kubeconfig = state_dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            kubeconfig_yaml(&format!("http://{addr}"), &shared.token),
        )
        .map_err(io(&kubeconfig))?;
        let mut server = Self {
            shared,
            addr,
            state_dir: state_dir.to_owned(),
            kubeconfig,
            running: None,
        };
        server.listen(listener);
        Ok(server)
    }

    fn listen(&mut self, listener: TcpListener) {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve(listener, self.shared.clone(), cancel.clone()));
        self.running = Some(Running { cancel, task });
    }

    /// `http://127.0.0.1:<port>`, the same across restarts.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig naming this server and its bearer token, for kube-rs, kubectl or oxlet.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Whether requests without a token are served (default yes: client-go, hence kubectl,
    /// sends no bearer token over plain http). A wrong token is always refused.
    pub fn set_anonymous(&self, allowed: bool) {
        self.shared.anonymous.store(allowed, Ordering::SeqCst);
    }

    /// The client certificate the proxy subresources (`pods/log`, `pods/exec`,
    /// `pods/attach`, `pods/portforward`, `nodes/proxy`) present to kubelets, as the
    /// real apiserver's `--kubelet-client-certificate`. Without one they answer 503.
    pub fn set_kubelet_client_cert(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
        let config = proxy::client_config(cert_pem, key_pem)?;
        *self
            .shared
            .kubelet_client
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(config);
        Ok(())
    }

    /// TokenReviews of `token` authenticate it as `user` in `groups`.
    pub fn add_token_user(&self, token: &str, user: &str, groups: &[&str]) {
        let mut r = self
            .shared
            .reviews
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        r.tokens.push((
            token.to_owned(),
            user.to_owned(),
            groups.iter().map(|g| (*g).to_owned()).collect(),
        ));
    }

    /// SubjectAccessReviews allow `subject` (a user name or a group) `verb` on the
    /// `nodes` subresource `subresource` (`*` for any verb or subresource).
    pub fn allow_node_access(&self, subject: &str, verb: &str, subresource: &str) {
        let mut r = self
            .shared
            .reviews
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        r.allowed.push(reviews::AccessRule {
            subject: subject.to_owned(),
            verb: verb.to_owned(),
            subresource: subresource.to_owned(),
        });
    }

    /// RBAC's `request-serviceaccounts-token-audience` verb on `audience` for `subject`
    /// (`system:node:<name>` or `system:nodes`), for `service_account` alone when named:
    /// without it a node's token request for an audience its pod's volumes do not name
    /// is refused, as NodeRestriction refuses it.
    pub fn allow_token_audience(
        &self,
        subject: &str,
        audience: &str,
        service_account: Option<&str>,
    ) {
        let mut r = self
            .shared
            .reviews
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        r.audiences.push(reviews::AudienceRule {
            subject: subject.to_owned(),
            audience: audience.to_owned(),
            service_account: service_account.map(str::to_owned),
        });
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Stop serving: the port is closed and every open connection and watch is cut, as in an
    /// outage. The state stays in memory and is saved to `state_dir/state.json`.
    pub async fn stop(&mut self) -> Result<(), Error> {
        if let Some(r) = self.running.take() {
            r.cancel.cancel();
            // A panicked serve task has nothing left to close.
            let _ = r.task.await;
        }
        let file = self.state_dir.join("state.json");
        let bytes =
            serde_json::to_vec(&self.shared.store.persisted()).map_err(|source| Error::Json {
                kind: "state".into(),
                source,
            })?;
        std::fs::write(&file, bytes).map_err(io(&file))
    }

    /// Serve again on the same port with the same state (watch history included, so clients
    /// can resume their watches).
    pub async fn restart(&mut self) -> Result<(), Error> {
        if self.running.is_some() {
            self.stop().await?;
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: self.addr,
                source,
            })?;
        self.listen(listener);
        Ok(())
    }

    /// The newest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Forget the change history: watches and consistent lists from any older
    /// resourceVersion now get 410, as after etcd compaction.
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// How often watches that allow bookmarks get one (default 60 s, like the real watch cache).
    pub fn set_bookmark_interval(&self, every: Duration) {
        *self
            .shared
            .bookmark_every
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = every;
    }

    /// The longest token lifetime TokenRequest grants (`--service-account-max-token-expiration`).
    pub fn set_token_max_expiration(&self, max: Option<Duration>) {
        *self
            .shared
            .token_max
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = max;
    }

    /// The requests served so far (the newest 10 000).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Read an object directly; `ns` is "" for cluster-scoped kinds.
    pub fn get<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<K>, Error> {
        self.handle().get(ns, name)
    }

    /// Every object of a kind, in `ns` or (None) everywhere.
    pub fn list<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: Option<&str>,
    ) -> Result<Vec<K>, Error> {
        let def = resource_id::<K>()?;
        let (items, _) = self.shared.store.list(&def.id(), ns, None)?;
        items
            .into_iter()
            .map(|(_, v)| {
                serde_json::from_value(v).map_err(|source| Error::Json {
                    kind: K::KIND.into(),
                    source,
                })
            })
            .collect()
    }

    /// Create or replace an object directly, status included, as a controller would leave it
    /// (uid and creationTimestamp kept if it existed; a new resourceVersion). Returns it as stored.
    pub fn put<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        obj: &K,
    ) -> Result<K, Error> {
        self.handle().put(obj)
    }

    /// A handle on the stored objects that outlives borrows of the server (a test DRA
    /// driver's, a controller's).
    pub fn handle(&self) -> ApiHandle {
        ApiHandle {
            shared: self.shared.clone(),
        }
    }

    /// Requests with bearer `token` are the node `node` (`system:node:<node>`), which the
    /// node authorizer's rules bind on resource.k8s.io and RBAC on slo.koordinator.sh
    /// (other groups serve it as the kubeconfig's user). Returns a kubeconfig with that token.
    pub fn add_node_token(&self, token: &str, node: &str) -> Result<PathBuf, Error> {
        self.shared
            .node_tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((token.to_owned(), node.to_owned()));
        let file = self.state_dir.join(format!("kubeconfig-{node}"));
        std::fs::write(&file, kubeconfig_yaml(&self.url(), token)).map_err(io(&file))?;
        Ok(file)
    }

    /// Remove an object at once (no grace, no finalizers), as a force delete would.
    pub fn remove<K: k8s_openapi::Resource>(&self, ns: &str, name: &str) -> Result<bool, Error> {
        let def = resource_id::<K>()?;
        let (gone, existed) = self
            .shared
            .store
            .mutate(&(def.id(), ns.to_owned(), name.to_owned()), |old, _| {
                Ok((None, old.is_some()))
            })?;
        drop(gone);
        Ok(existed)
    }

    /// Approve a CSR as an approver would, and issue `certificate` (PEM) if given, as a signer.
    pub fn approve_csr(&self, name: &str, certificate_pem: Option<&[u8]>) -> Result<(), Error> {
        let key = (
            "certificates.k8s.io/certificatesigningrequests".to_owned(),
            String::new(),
            name.to_owned(),
        );
        self.shared.store.mutate(&key, |old, _| {
            let mut csr = old.cloned().ok_or_else(|| ApiError::not_found("certificatesigningrequests", name))?;
            let now = http::timestamp(jiff::Timestamp::now());
            csr["status"]["conditions"] = json!([{
                "type": "Approved", "status": "True", "reason": "TestApiApprove",
                "message": "approved by the test apiserver", "lastUpdateTime": now, "lastTransitionTime": now,
            }]);
            if let Some(pem) = certificate_pem {
                csr["status"]["certificate"] = json!(base64(pem));
            }
            Ok((Some(csr), ()))
        })?;
        Ok(())
    }
}

/// The stored objects of a [`TestApiServer`], read and written directly.
#[derive(Clone)]
pub struct ApiHandle {
    shared: Arc<Shared>,
}

impl ApiHandle {
    /// [`TestApiServer::get`].
    pub fn get<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<K>, Error> {
        let def = resource_id::<K>()?;
        self.shared
            .store
            .get(&(def.id(), ns.to_owned(), name.to_owned()))
            .map(|v| {
                serde_json::from_value(v).map_err(|source| Error::Json {
                    kind: K::KIND.into(),
                    source,
                })
            })
            .transpose()
    }

    /// [`TestApiServer::put`].
    pub fn put<K: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        obj: &K,
    ) -> Result<K, Error> {
        let def = resource_id::<K>()?;
        let mut v = serde_json::to_value(obj).map_err(|source| Error::Json {
            kind: K::KIND.into(),
            source,
        })?;
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ns = if def.namespaced {
            v.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        if name.is_empty() {
            return Err(ApiError::invalid(def.name, "", "metadata.name: Required value").into());
        }
        v["kind"] = json!(def.kind);
        v["apiVersion"] = json!(def.api_version());
        if def.namespaced {
            v["metadata"]["namespace"] = json!(ns);
        }
        if def.name == "pods" {
            crate::validate::default_pod(&mut v);
        }
        let is_pod = def.name == "pods";
        let (stored, ()) = self.shared.store.mutate(&(def.id(), ns, name), |old, _| {
            if is_pod {
                // As a create or an update through the API would leave them.
                let generation = old.map_or(1, |o| pod_rules::generation_after(o, &v));
                v["metadata"]["generation"] = json!(generation);
                if v.pointer("/status/qosClass").is_none() {
                    let qos = pod_rules::qos_class(v.get("spec").unwrap_or(&Value::Null));
                    if !v.get("status").is_some_and(Value::is_object) {
                        v["status"] = json!({});
                    }
                    v["status"]["qosClass"] = json!(qos);
                }
            }
            for owned in ["uid", "creationTimestamp"] {
                let keep = old.and_then(|o| o["metadata"].get(owned).cloned());
                v["metadata"][owned] = keep.unwrap_or_else(|| {
                    json!(if owned == "uid" {
                        http::new_uid()
                    } else {
                        http::timestamp(jiff::Timestamp::now())
                    })
                });
            }
            v["metadata"]["resourceVersion"] =
                old.map_or(json!("0"), |o| o["metadata"]["resourceVersion"].clone());
            Ok((Some(v), ()))
        })?;
        serde_json::from_value(stored.unwrap_or(Value::Null)).map_err(|source| Error::Json {
            kind: K::KIND.into(),
            source,
        })
    }
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The kubeconfig clients use: one cluster, one user with a bearer token, namespace `default`.
fn kubeconfig_yaml(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testapi\n  cluster:\n    server: {server}\n\
         users:\n- name: testapi\n  user:\n    token: {token}\n\
         contexts:\n- name: testapi\n  context:\n    cluster: testapi\n    user: testapi\n    namespace: default\n\
         current-context: testapi\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(b"-----BEGIN"), "LS0tLS1CRUdJTg==");
    }
}
