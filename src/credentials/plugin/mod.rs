//! kubelet's credential provider plugins (`pkg/credentialprovider/plugin`): each provider
//! of `--image-credential-provider-config` is a binary in `--image-credential-provider-bin-dir`
//! asked for the logins of the images its `matchImages` cover. Its answers are cached by
//! image, registry or globally as it says, for as long as it says; concurrent asks for
//! one key run it once. A provider with `tokenAttributes` is given a token of the pod's
//! service account for its audience, and the account's listed annotations.
//!
//! As in kubelet, a provider that fails adds no logins (the pull goes on with the
//! others, or without): its error is logged, not the pull's.

mod cache;
mod config;
mod exec;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::docker_config::{DockerConfig, LoginSource};
use super::keyring::{Keyring, urls_match};
use crate::locks::Locked as _;
use cache::{Cache, CacheKey, GLOBAL_KEY, registry_of};
pub(crate) use config::ConfigError;
use config::{ProviderConfig, TokenCacheType};
use exec::{CacheKeyType, ExecPlugin, PluginRunError, Request, Response};

/// A boxed future, as the boundary's methods return them.
pub(crate) type AccountFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, AccountError>> + Send + 'a>>;

/// Why the apiserver gave no service account or token: the implementer's own error,
/// boxed, as it lives in a room above this one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct AccountError(Box<dyn std::error::Error + Send + Sync>);

impl AccountError {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}

/// What token-mode providers need of the apiserver: the pod's service account, and a
/// token of it for an audience, bound to the pod (kubelet's service account and token
/// managers). The agent's object manager implements it.
pub(crate) trait ServiceAccounts: Send + Sync {
    /// `GET serviceaccounts/<name>` in `ns`; `Ok(None)` when there is none.
    fn service_account<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> AccountFuture<'a, Option<ServiceAccount>>;
    /// A token of `account` for `audience`, bound to `pod` (`POST serviceaccounts/<a>/token`).
    fn token<'a>(
        &'a self,
        pod: &'a Pod,
        account: &'a str,
        audience: &'a str,
    ) -> AccountFuture<'a, String>;
}

/// The plugins of one config, ready to be asked.
pub(crate) struct CredentialPlugins {
    providers: Vec<Provider>,
    accounts: Option<Arc<dyn ServiceAccounts>>,
}

impl std::fmt::Debug for CredentialPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .providers
            .iter()
            .map(|p| p.config.name.as_str())
            .collect();
        f.debug_struct("CredentialPlugins")
            .field("providers", &names)
            .finish()
    }
}

/// What a run gives, shared by the concurrent asks for one key.
type Flight = Arc<OnceCell<Result<Response, PluginRunError>>>;

struct Provider {
    config: ProviderConfig,
    plugin: ExecPlugin,
    cache: Cache,
    in_flight: Mutex<HashMap<String, Flight>>,
}

/// Why the plugins cannot be set up: kubelet refuses to start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PluginSetupError {
    #[error("plugin binary directory {0} did not exist")]
    NoBinDir(String),
    #[error("error inspecting binary directory {dir}: {source}")]
    BinDir { dir: String, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("plugin binary executable {0} did not exist")]
    NoBinary(String),
    #[error("plugin binary {0} is not an executable file")]
    NotExecutable(String),
}

/// The service account a token-mode run was made for.
#[derive(Debug, Clone)]
struct AccountInput {
    namespace: String,
    name: String,
    uid: String,
    token: String,
    annotations: BTreeMap<String, String>,
}

impl CredentialPlugins {
    /// kubelet's `RegisterCredentialProviderPlugins`: the bin dir exists, the config
    /// reads and validates, and each provider's binary is there and executable.
    pub(crate) fn load(
        config_path: &Path,
        bin_dir: &Path,
        accounts: Option<Arc<dyn ServiceAccounts>>,
    ) -> Result<CredentialPlugins, PluginSetupError> {
        let shown = bin_dir.display().to_string();
        match std::fs::metadata(bin_dir) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(PluginSetupError::NoBinDir(shown));
            }
            Err(source) => return Err(PluginSetupError::BinDir { dir: shown, source }),
        }
        let configs = config::read(config_path)?;
        let mut providers = Vec::with_capacity(configs.len());
        for config in configs {
            // The name is one path segment (checked above); this keeps it so.
            let binary = crate::safe_path::beneath(bin_dir, &[&config.name])
                .map_err(|_| PluginSetupError::NoBinary(config.name.clone()))?;
            check_executable(&binary)?;
            info!(provider = %config.name, binary = %binary.display(), matchImages = %config.match_images.join(","), tokenAudience = config.token_attributes.as_ref().map(|t| t.audience.as_str()).unwrap_or(""), "registered credential provider plugin");
            let plugin = ExecPlugin {
                name: config.name.clone(),
                binary,
                api_version: config.api_version.clone(),
                args: config.args.clone(),
                env: config.env.clone(),
                timeout: exec::EXEC_TIMEOUT,
            };
            providers.push(Provider {
                config,
                plugin,
                cache: Cache::new(Instant::now()),
                in_flight: Mutex::new(HashMap::new()),
            });
        }
        Ok(CredentialPlugins {
            providers,
            accounts,
        })
    }

    /// kubelet's external keyring for `pod`: every provider whose `matchImages` cover
    /// `repository` adds its logins (in config order); the keyring orders them by key.
    pub(crate) async fn keyring(&self, repository: &str, pod: &Pod) -> Keyring {
        let mut keyring = Keyring::default();
        for p in &self.providers {
            if !p
                .config
                .match_images
                .iter()
                .any(|m| urls_match(m, repository))
            {
                continue;
            }
            if let Some((logins, source)) = self.provide(p, repository, pod).await {
                keyring.add(&logins, &source);
            }
        }
        keyring
    }

    /// One provider's logins for the image, from its cache or a run; None when it is
    /// skipped for this pod or failed (logged with the cause).
    async fn provide(
        &self,
        p: &Provider,
        image: &str,
        pod: &Pod,
    ) -> Option<(DockerConfig, LoginSource)> {
        let pod_ref = crate::pod::pod_ref(pod);
        let name = &p.config.name;
        let account = match &p.config.token_attributes {
            None => None,
            Some(attrs) => match self.account_input(p, attrs, pod).await? {
                Some(a) => Some(a),
                None if attrs.require_service_account => {
                    info!(provider = %name, pod = %pod_ref, image, "credential provider skipped: it requires a service account and the pod names none");
                    return None;
                }
                None => None,
            },
        };
        let source = match &account {
            Some(a) => LoginSource::ServiceAccount {
                namespace: a.namespace.clone(),
                name: a.name.clone(),
                uid: a.uid.clone(),
            },
            None => LoginSource::Node,
        };
        let account_key = account
            .as_ref()
            .map(|a| account_key(a, p.config.token_attributes.as_ref()))
            .unwrap_or_default();
        if let Some(logins) = p.cache.get(image, &account_key, Instant::now()) {
            debug!(provider = %name, pod = %pod_ref, image, "credential provider cache hit");
            return Some((logins, source));
        }
        debug!(provider = %name, pod = %pod_ref, image, "credential provider cache miss: running the plugin");
        let response = run_once(p, image, account.as_ref()).await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                warn!(provider = %name, pod = %pod_ref, image, error = %e, "Failed getting credential from external registry credential provider");
                return None;
            }
        };
        if let Some(a) = &account
            && p.config.token_attributes.as_ref().map(|t| t.cache_type)
                != Some(TokenCacheType::Token)
            && response.auth.values().any(|c| c.password == a.token)
        {
            warn!(provider = %name, pod = %pod_ref, image, "credential provider returned the service account token as the password, which is not allowed unless its cacheType is Token");
            return None;
        }
        store(p, image, &account_key, &response);
        Some((response.auth, source))
    }

    /// The service account data and token for a token-mode provider: `Ok(None)` (as
    /// `Some(None)`) when the pod names no account; None when it is skipped.
    async fn account_input(
        &self,
        p: &Provider,
        attrs: &config::TokenAttributes,
        pod: &Pod,
    ) -> Option<Option<AccountInput>> {
        let pod_ref = crate::pod::pod_ref(pod);
        let name = &p.config.name;
        let account = (pod.spec.as_ref())
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty());
        let Some(account) = account else {
            return Some(None);
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let Some(accounts) = &self.accounts else {
            warn!(provider = %name, pod = %pod_ref, serviceAccount = %account, "credential provider skipped: it needs a service account token and there is no apiserver to ask (standalone mode)");
            return None;
        };
        let sa = match accounts.service_account(&ns, &account).await {
            Ok(Some(sa)) => sa,
            Ok(None) => {
                warn!(provider = %name, pod = %pod_ref, serviceAccount = %account, "credential provider skipped: service account not found");
                return None;
            }
            Err(e) => {
                warn!(provider = %name, pod = %pod_ref, serviceAccount = %account, error = %e, "credential provider skipped: cannot get the service account");
                return None;
            }
        };
        let have = sa.metadata.annotations.unwrap_or_default();
        let mut annotations = BTreeMap::new();
        for k in &attrs.required_annotations {
            let Some(v) = have.get(k) else {
                info!(provider = %name, pod = %pod_ref, serviceAccount = %account, annotation = %k, "credential provider skipped: the service account lacks a required annotation");
                return None;
            };
            annotations.insert(k.clone(), v.clone());
        }
        for k in &attrs.optional_annotations {
            if let Some(v) = have.get(k) {
                annotations.insert(k.clone(), v.clone());
            }
        }
        let token = match accounts.token(pod, &account, &attrs.audience).await {
            Ok(t) => t,
            Err(e) => {
                warn!(provider = %name, pod = %pod_ref, serviceAccount = %account, audience = %attrs.audience, error = %e, "credential provider skipped: cannot get a service account token");
                return None;
            }
        };
        Some(Some(AccountInput {
            namespace: ns,
            name: account,
            uid: sa.metadata.uid.unwrap_or_default(),
            token,
            annotations,
        }))
    }
}

/// Runs the plugin, once for all concurrent asks of one key (kubelet's singleflight:
/// the image, with the token's hash and the annotations in token mode).
async fn run_once(
    p: &Provider,
    image: &str,
    account: Option<&AccountInput>,
) -> Result<Response, PluginRunError> {
    let key = match account {
        None => image.to_string(),
        Some(a) => key_of(&[image, &token_hash(&a.token)], &a.annotations),
    };
    let flight: Flight = p.in_flight.locked().entry(key.clone()).or_default().clone();
    let no_annotations = BTreeMap::new();
    let result = flight
        .get_or_init(|| async {
            let request = Request {
                image,
                service_account_token: account.map(|a| a.token.as_str()),
                service_account_annotations: account.map_or(&no_annotations, |a| &a.annotations),
            };
            let started = Instant::now();
            let r = p.plugin.run(&request).await;
            info!(provider = %p.config.name, image, withToken = account.is_some(), ok = r.is_ok(), duration = %crate::duration::format_go_duration(started.elapsed()), "ran credential provider plugin");
            r
        })
        .await
        .clone();
    let mut in_flight = p.in_flight.locked();
    if in_flight.get(&key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
        in_flight.remove(&key);
    }
    result
}

/// Caches a response as kubelet does: its own duration, else the provider's default;
/// zero either way means not at all.
fn store(p: &Provider, image: &str, account_key: &str, r: &Response) {
    let lifetime = r.cache_duration.unwrap_or(p.config.default_cache_duration);
    if lifetime.is_zero() {
        debug!(provider = %p.config.name, image, "credential provider response not cached (cache duration 0)");
        return;
    }
    let base = match r.cache_key_type {
        CacheKeyType::Image => image,
        CacheKeyType::Registry => registry_of(image),
        CacheKeyType::Global => GLOBAL_KEY,
    };
    let now = Instant::now();
    let key = CacheKey {
        base: base.to_string(),
        account: account_key.to_string(),
    };
    debug!(provider = %p.config.name, image, cacheKey = %base, cacheDuration = %crate::duration::format_go_duration(lifetime), "credential provider response cached");
    p.cache.put(key, r.auth.clone(), now + lifetime, now);
}

/// kubelet's service account cache key: namespace, name, UID and annotations, and in
/// `Token` cache mode the token's hash as well.
fn account_key(a: &AccountInput, attrs: Option<&config::TokenAttributes>) -> String {
    let mut parts = vec![a.namespace.as_str(), a.name.as_str(), a.uid.as_str()];
    let hash;
    if attrs.map(|t| t.cache_type) == Some(TokenCacheType::Token) {
        hash = token_hash(&a.token);
        parts.extend(["token", hash.as_str()]);
    }
    key_of(&parts, &a.annotations)
}

/// Length-prefixed parts, so no two different inputs give one key.
fn key_of(parts: &[&str], annotations: &BTreeMap<String, String>) -> String {
    let mut key = String::new();
    let mut add = |s: &str| key.push_str(&format!("{}:{s};", s.len()));
    for p in parts {
        add(p);
    }
    add(&annotations.len().to_string());
    for (k, v) in annotations {
        add(k);
        add(v);
    }
    key
}

fn token_hash(token: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn check_executable(binary: &Path) -> Result<(), PluginSetupError> {
    use std::os::unix::fs::PermissionsExt as _;
    let shown = binary.display().to_string();
    match std::fs::metadata(binary) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(PluginSetupError::NotExecutable(shown)),
        Err(_) => Err(PluginSetupError::NoBinary(shown)),
    }
}

#[cfg(test)]
mod tests;
