//! The API objects pods read: ConfigMaps, Secrets, service-account tokens, the pod's
//! RuntimeClass, and its PersistentVolumeClaims with their volumes (kubelet's
//! `pkg/kubelet/configmap`, `secret`, `token` and `runtimeclass` managers, and the
//! claims half of the volume manager's populator, `claims`).
//!
//! A pod sync is synchronous below the point where mounts and env are built, so the
//! manager resolves everything a pod references up front ([`ObjectManager::resolve`]) into
//! a [`PodObjects`] snapshot that the volume and env code read. Objects are cached with a
//! short TTL (kubelet's `Cache` strategy, not its default `Watch`: a watch per object is
//! more machinery than a node of this size needs, and the TTL keeps updates within
//! seconds); entries no pod references any more are dropped, and the cache is bounded.

mod claims;
mod kube_source;
mod token;

#[cfg(test)]
mod tests;

use crate::locks::Locked as _;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, ServiceAccount,
};
use k8s_openapi::api::node::v1::RuntimeClass;

pub(crate) use claims::{BoundClaim, ClaimError};
pub(crate) use kube_source::KubeObjects;
use token::TokenCache;

/// The largest ConfigMap or Secret Kubernetes stores (etcd's 1 MiB object limit);
/// anything bigger did not come from a real apiserver and is refused.
pub(crate) const MAX_OBJECT_BYTES: usize = 1 << 20;
/// Most objects cached at once; beyond it the least recently fetched go first.
const MAX_CACHED: usize = 4096;
/// How long a fetched object is served from the cache before it is fetched again.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(5);

/// Why an object could not be had. The `Display` texts are kubelet's (the apiserver's
/// `NotFound` status message), since they end up as the container's waiting message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ObjectError {
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("couldn't get {kind} {namespace}/{name}, no kubeClient defined")]
    NoClient {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error(
        "{kind} {namespace}/{name} is {size} bytes, more than the {max} bytes Kubernetes allows"
    )]
    TooLarge {
        kind: &'static str,
        namespace: String,
        name: String,
        size: usize,
        max: usize,
    },
    #[error("cannot get {kind} {namespace}/{name}: {message}")]
    Api {
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
    #[error("cannot request a token for service account {namespace}/{name}: {message}")]
    Token {
        namespace: String,
        name: String,
        message: String,
    },
}

impl ObjectError {
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, ObjectError::NotFound { .. })
    }
}

pub(crate) type ObjectFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ObjectError>> + Send + 'a>>;

/// The apiserver as the object managers see it (the boundary trait; kube-rs in the
/// agent, a map in unit tests). Not found is `Ok(None)`.
pub(crate) trait ObjectSource: Send + Sync {
    fn config_map<'a>(&'a self, ns: &'a str, name: &'a str) -> ObjectFuture<'a, Option<ConfigMap>>;
    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> ObjectFuture<'a, Option<Secret>>;
    /// `GET persistentvolumeclaims/<name>` in `ns`.
    fn claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ObjectFuture<'a, Option<PersistentVolumeClaim>>;
    /// `GET persistentvolumes/<name>`.
    fn volume<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<PersistentVolume>>;
    /// `GET nodes/<name>` (a volume's `nodeAffinity` is checked against its labels).
    fn node<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<Node>>;
    /// `GET runtimeclasses/<name>` (cluster-scoped, node.k8s.io/v1).
    fn runtime_class<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<RuntimeClass>>;
    /// `GET serviceaccounts/<name>` in `ns`.
    fn service_account<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ObjectFuture<'a, Option<ServiceAccount>>;
    /// `POST serviceaccounts/<sa>/token`.
    fn token<'a>(
        &'a self,
        ns: &'a str,
        sa: &'a str,
        request: &'a TokenRequest,
    ) -> ObjectFuture<'a, TokenRequest>;
}

/// A clock, so token rotation and the TTL can be tested without waiting.
pub(crate) type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// One service-account token a pod's projected volume asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TokenWant {
    pub audience: Option<String>,
    pub expiration_seconds: i64,
}

/// What a pod references, fetched once per sync. A name missing from a map was not
/// referenced by the pod (or there is no apiserver).
#[derive(Debug, Clone, Default)]
pub(crate) struct PodObjects {
    pub config_maps: HashMap<String, Result<Arc<ConfigMap>, ObjectError>>,
    pub secrets: HashMap<String, Result<Arc<Secret>, ObjectError>>,
    pub tokens: HashMap<TokenWant, Result<String, ObjectError>>,
    /// The class `spec.runtimeClassName` names (None when it names none).
    pub runtime_class: Option<Result<Arc<RuntimeClass>, ObjectError>>,
    /// Each claim a volume names, bound and checked, or kubelet's reason it is not
    /// (`error processing PVC <ns>/<name>: PVC is not bound`).
    pub claims: HashMap<String, Result<BoundClaim, ClaimError>>,
}

impl PodObjects {
    /// The checked claim `name`, or why the volume cannot be mounted (standalone:
    /// there are no claims).
    pub(crate) fn claim(this: Option<&Self>, name: &str) -> Result<BoundClaim, ClaimError> {
        match this.and_then(|o| o.claims.get(name)) {
            Some(got) => got.clone(),
            None => Err(ClaimError::NoClient(name.to_string())),
        }
    }
    /// The ConfigMap `name`, `Ok(None)` when it does not exist and `optional`.
    pub(crate) fn config_map(
        this: Option<&Self>,
        ns: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<Arc<ConfigMap>>, ObjectError> {
        let found = this.and_then(|o| o.config_maps.get(name)).cloned();
        lookup(found, "configmaps", "configMap", ns, name, optional)
    }

    /// The Secret `name`, `Ok(None)` when it does not exist and `optional`.
    pub(crate) fn secret(
        this: Option<&Self>,
        ns: &str,
        name: &str,
        optional: bool,
    ) -> Result<Option<Arc<Secret>>, ObjectError> {
        let found = this.and_then(|o| o.secrets.get(name)).cloned();
        lookup(found, "secrets", "secret", ns, name, optional)
    }
}

fn lookup<T>(
    found: Option<Result<Arc<T>, ObjectError>>,
    kind: &'static str,
    singular: &'static str,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<Arc<T>>, ObjectError> {
    match found {
        Some(Ok(o)) => Ok(Some(o)),
        Some(Err(e)) if e.is_not_found() && optional => Ok(None),
        Some(Err(e)) => Err(e),
        None => {
            // Not resolved: no apiserver (kubelet's message), or a name not referenced.
            let _ = kind;
            Err(ObjectError::NoClient {
                kind: singular,
                namespace: ns.to_string(),
                name: name.to_string(),
            })
        }
    }
}

/// The names of the ConfigMaps and Secrets a pod references (volumes, projected
/// sources, envFrom, valueFrom), and the tokens its projected volumes ask for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct References {
    pub config_maps: HashSet<String>,
    pub secrets: HashSet<String>,
    pub tokens: HashSet<TokenWant>,
}

/// kubelet's API default for `serviceAccountToken.expirationSeconds`.
pub(crate) const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// The token a projection asks for, with the API's default expiry.
pub(crate) fn token_want(
    p: &k8s_openapi::api::core::v1::ServiceAccountTokenProjection,
) -> TokenWant {
    TokenWant {
        audience: p.audience.clone().filter(|a| !a.is_empty()),
        expiration_seconds: p.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
    }
}

/// Everything `pod` references (kubelet's `podutil.VisitPodConfigmapNames` and
/// `VisitPodSecretNames`, image pull secrets included).
pub(crate) fn references(pod: &Pod) -> References {
    let mut r = References::default();
    let Some(spec) = &pod.spec else { return r };
    for s in spec.image_pull_secrets.iter().flatten() {
        if !s.name.is_empty() {
            r.secrets.insert(s.name.clone());
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(cm) = &v.config_map {
            r.config_maps.insert(cm.name.clone());
        }
        if let Some(s) = &v.secret {
            r.secrets.insert(s.secret_name.clone().unwrap_or_default());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                r.config_maps.insert(cm.name.clone());
            }
            if let Some(s) = &src.secret {
                r.secrets.insert(s.name.clone());
            }
            if let Some(t) = &src.service_account_token {
                r.tokens.insert(token_want(t));
            }
        }
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for c in containers {
        for ef in c.env_from.iter().flatten() {
            if let Some(cm) = &ef.config_map_ref {
                r.config_maps.insert(cm.name.clone());
            }
            if let Some(s) = &ef.secret_ref {
                r.secrets.insert(s.name.clone());
            }
        }
        for vf in c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()) {
            if let Some(k) = &vf.config_map_key_ref {
                r.config_maps.insert(k.name.clone());
            }
            if let Some(k) = &vf.secret_key_ref {
                r.secrets.insert(k.name.clone());
            }
        }
    }
    r
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    ConfigMap(String, String),
    Secret(String, String),
    RuntimeClass(String),
    Claim(String, String),
    Volume(String),
    Node(String),
}

/// An object kind the cache holds: how it goes into [`Cached`] and comes back out.
trait CacheKind: Sized {
    fn wrap(v: Result<Arc<Self>, ObjectError>) -> Cached;
    fn unwrap(c: Cached) -> Option<Result<Arc<Self>, ObjectError>>;
}

macro_rules! cache_kind {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl CacheKind for $ty {
            fn wrap(v: Result<Arc<Self>, ObjectError>) -> Cached {
                Cached::$variant(v)
            }
            fn unwrap(c: Cached) -> Option<Result<Arc<Self>, ObjectError>> {
                match c {
                    Cached::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

cache_kind!(
    ConfigMap => ConfigMap,
    Secret => Secret,
    RuntimeClass => RuntimeClass,
    PersistentVolumeClaim => Claim,
    PersistentVolume => Volume,
    Node => Node,
);

#[derive(Clone)]
enum Cached {
    ConfigMap(Result<Arc<ConfigMap>, ObjectError>),
    Secret(Result<Arc<Secret>, ObjectError>),
    RuntimeClass(Result<Arc<RuntimeClass>, ObjectError>),
    Claim(Result<Arc<PersistentVolumeClaim>, ObjectError>),
    Volume(Result<Arc<PersistentVolume>, ObjectError>),
    Node(Result<Arc<Node>, ObjectError>),
}

struct Entry {
    fetched: SystemTime,
    value: Cached,
}

#[derive(Default)]
struct State {
    objects: HashMap<Key, Entry>,
    /// Pod UID → the keys it referenced at its last sync.
    refs: HashMap<String, HashSet<Key>>,
}

/// kubelet's configmap, secret and token managers in one: fetches through an
/// [`ObjectSource`], caches for a TTL, and keeps tokens until they need rotating.
pub(crate) struct ObjectManager {
    source: Arc<dyn ObjectSource>,
    /// This node's name, whose labels a volume's `nodeAffinity` is checked against.
    node_name: String,
    clock: Clock,
    ttl: Duration,
    state: Mutex<State>,
    tokens: TokenCache,
}

impl ObjectManager {
    pub(crate) fn new(source: Arc<dyn ObjectSource>) -> Self {
        Self::with_clock(source, Arc::new(SystemTime::now), DEFAULT_TTL)
    }

    pub(crate) fn with_clock(source: Arc<dyn ObjectSource>, clock: Clock, ttl: Duration) -> Self {
        ObjectManager {
            source,
            node_name: String::new(),
            ttl,
            tokens: TokenCache::new(clock.clone()),
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Names the node, so volumes' `nodeAffinity` can be checked against its labels.
    pub(crate) fn with_node_name(mut self, name: &str) -> Self {
        self.node_name = name.to_string();
        self
    }

    /// Fetches (or takes from the cache) everything `pod` references. Never fails as a
    /// whole: each object carries its own error, which only the containers or volumes
    /// that need it see.
    pub(crate) async fn resolve(&self, pod: &Pod) -> PodObjects {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let refs = references(pod);
        let mut out = PodObjects::default();
        let mut keys = HashSet::new();
        for name in &refs.config_maps {
            let key = Key::ConfigMap(ns.to_string(), name.clone());
            let fetch = || self.source.config_map(ns, name);
            let got = (self.fetch_cached(key, &mut keys, "configmaps", name, fetch, |o| {
                check_size("configmaps", ns, name, config_map_size(o))
            }))
            .await;
            out.config_maps.insert(name.clone(), got);
        }
        for name in &refs.secrets {
            let key = Key::Secret(ns.to_string(), name.clone());
            let fetch = || self.source.secret(ns, name);
            let got = (self.fetch_cached(key, &mut keys, "secrets", name, fetch, |o| {
                check_size("secrets", ns, name, secret_size(o))
            }))
            .await;
            out.secrets.insert(name.clone(), got);
        }
        for claim in claim_names(pod) {
            let got = self.resolve_claim(ns, &claim, &mut keys).await;
            out.claims.insert(claim, got);
        }
        if let Some(name) = runtime_class_name(pod) {
            let key = Key::RuntimeClass(name.to_string());
            let fetch = || self.source.runtime_class(name);
            let got =
                (self.fetch_cached(key, &mut keys, RUNTIME_CLASSES, name, fetch, |_| Ok(()))).await;
            out.runtime_class = Some(got);
        }
        if !refs.tokens.is_empty() {
            let sa = service_account(pod);
            for want in refs.tokens {
                let token = self.tokens.get(self.source.as_ref(), pod, &sa, &want).await;
                out.tokens.insert(want, token);
            }
        }
        let mut state = self.state.locked();
        if keys.is_empty() {
            state.refs.remove(uid);
        } else {
            state.refs.insert(uid.to_string(), keys);
        }
        drop_unreferenced(&mut state);
        out
    }

    /// One claim and its volume, checked as kubelet's populator does; the error is
    /// kubelet's `error processing PVC <ns>/<name>: ...`.
    async fn resolve_claim(
        &self,
        ns: &str,
        name: &str,
        keys: &mut HashSet<Key>,
    ) -> Result<BoundClaim, ClaimError> {
        let processing = |why: ClaimError| ClaimError::Processing {
            namespace: ns.to_string(),
            name: name.to_string(),
            why: Box::new(why),
        };
        let key = Key::Claim(ns.to_string(), name.to_string());
        let fetch = || self.source.claim(ns, name);
        let claim = (self
            .fetch_cached(key, keys, "persistentvolumeclaims", name, fetch, |_| Ok(())))
        .await
        .map_err(|e| processing(ClaimError::FetchClaim(e)))?;
        let volume_name = claims::check_claim(&claim).map_err(processing)?.to_string();
        let key = Key::Volume(volume_name.clone());
        let fetch = || self.source.volume(&volume_name);
        let volume =
            (self.fetch_cached(key, keys, "persistentvolumes", &volume_name, fetch, |_| {
                Ok(())
            }))
            .await
            .map_err(|error| {
                processing(ClaimError::FetchVolume {
                    volume: volume_name.clone(),
                    error,
                })
            })?;
        let has_affinity = (volume.spec.as_ref()).is_some_and(|s| s.node_affinity.is_some());
        let node = if has_affinity && !self.node_name.is_empty() {
            let key = Key::Node(self.node_name.clone());
            let fetch = || self.source.node(&self.node_name);
            (self.fetch_cached(key, keys, "nodes", &self.node_name, fetch, |_| Ok(())))
                .await
                .ok()
        } else {
            None
        };
        claims::check_volume(&volume, &claim, node.as_deref())?;
        Ok(BoundClaim { volume })
    }

    /// Forgets a pod that is gone: its objects leave the cache unless another pod
    /// references them, and its tokens are dropped.
    pub(crate) fn forget_pod(&self, uid: &str) {
        let mut state = self.state.locked();
        state.refs.remove(uid);
        drop_unreferenced(&mut state);
        drop(state);
        self.tokens.forget_pod(uid);
    }

    /// The object under `key` (recorded in `keys` as referenced): from the cache while
    /// fresh, else fetched with what `fetch` makes (absent is the apiserver's `kind "name" not
    /// found`), passed through `check`, and cached, a failure included.
    async fn fetch_cached<'a, T: CacheKind>(
        &'a self,
        key: Key,
        keys: &mut HashSet<Key>,
        kind: &'static str,
        name: &str,
        fetch: impl FnOnce() -> ObjectFuture<'a, Option<T>>,
        check: impl FnOnce(&T) -> Result<(), ObjectError>,
    ) -> Result<Arc<T>, ObjectError> {
        keys.insert(key.clone());
        if let Some(v) = self.cached(&key).and_then(T::unwrap) {
            return v;
        }
        let v = fetch().await.and_then(|o| {
            let o = o.ok_or_else(|| not_found(kind, name))?;
            check(&o)?;
            Ok(Arc::new(o))
        });
        self.store(key, T::wrap(v.clone()));
        v
    }

    fn cached(&self, key: &Key) -> Option<Cached> {
        let state = self.state.locked();
        let e = state.objects.get(key)?;
        let age = (self.clock)().duration_since(e.fetched).unwrap_or_default();
        if age >= self.ttl {
            return None;
        }
        Some(e.value.clone())
    }

    /// The RuntimeClass `name` as the last sync that read it found it, without a
    /// fetch (for readers outside a sync, such as the status's mount features).
    pub(crate) fn cached_runtime_class(&self, name: &str) -> Option<Arc<RuntimeClass>> {
        match self.cached(&Key::RuntimeClass(name.to_string()))? {
            Cached::RuntimeClass(Ok(rc)) => Some(rc),
            _ => None,
        }
    }

    fn store(&self, key: Key, value: Cached) {
        let mut state = self.state.locked();
        if state.objects.len() >= MAX_CACHED && !state.objects.contains_key(&key) {
            let oldest = (state.objects.iter())
                .min_by_key(|(_, e)| e.fetched)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                state.objects.remove(&k);
            }
        }
        let fetched = (self.clock)();
        state.objects.insert(key, Entry { fetched, value });
    }

    #[cfg(test)]
    fn cached_len(&self) -> usize {
        self.state.locked().objects.len()
    }
}

fn drop_unreferenced(state: &mut State) {
    let live: HashSet<&Key> = state.refs.values().flatten().collect();
    let dead: Vec<Key> = (state.objects.keys())
        .filter(|k| !live.contains(k))
        .cloned()
        .collect();
    for k in dead {
        state.objects.remove(&k);
    }
}

/// The credential provider plugins' view of the apiserver: service accounts fetched
/// fresh (kubelet reads them through its informer, so a changed annotation counts at
/// once), tokens through the token manager, as kubelet's plugin tokens are.
impl crate::credentials::ServiceAccounts for ObjectManager {
    fn service_account<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> crate::credentials::AccountFuture<'a, Option<ServiceAccount>> {
        Box::pin(async move {
            (self.source.service_account(ns, name).await)
                .map_err(crate::credentials::AccountError::new)
        })
    }

    fn token<'a>(
        &'a self,
        pod: &'a Pod,
        account: &'a str,
        audience: &'a str,
    ) -> crate::credentials::AccountFuture<'a, String> {
        Box::pin(async move {
            let want = TokenWant {
                audience: Some(audience.to_string()),
                expiration_seconds: DEFAULT_TOKEN_SECONDS,
            };
            let got = self
                .tokens
                .get(self.source.as_ref(), pod, account, &want)
                .await;
            got.map_err(crate::credentials::AccountError::new)
        })
    }
}

/// The pod's service account (`default` when unset, as the API defaults it).
pub(crate) fn service_account(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    (spec.and_then(|s| s.service_account_name.clone()))
        .or_else(|| spec.and_then(|s| s.service_account.clone()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The apiserver's name for RuntimeClasses in its NotFound messages.
pub(crate) const RUNTIME_CLASSES: &str = "runtimeclasses.node.k8s.io";

/// The claims the pod's volumes name (kubelet reads each once per pod).
pub(crate) fn claim_names(pod: &Pod) -> Vec<String> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut names: Vec<String> = (volumes.unwrap_or_default().iter())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The pod's `spec.runtimeClassName`, when it names one.
pub(crate) fn runtime_class_name(pod: &Pod) -> Option<&str> {
    (pod.spec.as_ref())
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn not_found(kind: &'static str, name: &str) -> ObjectError {
    ObjectError::NotFound {
        kind,
        name: name.to_string(),
    }
}

fn check_size(kind: &'static str, ns: &str, name: &str, size: usize) -> Result<(), ObjectError> {
    if size > MAX_OBJECT_BYTES {
        return Err(ObjectError::TooLarge {
            kind,
            namespace: ns.to_string(),
            name: name.to_string(),
            size,
            max: MAX_OBJECT_BYTES,
        });
    }
    Ok(())
}

fn config_map_size(cm: &ConfigMap) -> usize {
    let data = cm.data.iter().flatten().map(|(k, v)| k.len() + v.len());
    let bin = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.0.len());
    data.chain(bin).sum()
}

fn secret_size(s: &Secret) -> usize {
    let data = s.data.iter().flatten().map(|(k, v)| k.len() + v.0.len());
    let string = s
        .string_data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len());
    data.chain(string).sum()
}
