//! Who may do what on the secure port, as kubelet decides it (`BuildAuth` and its
//! `InstallAuthFilter`):
//!
//! 1. **Authentication.** A client certificate that verifies against the current
//!    `clientCAFile` CAs names the user (CN) and groups (O). Else a bearer token is
//!    checked with a TokenReview when the token webhook is on. Else, with
//!    anonymous auth on, the request is `system:anonymous` in `system:unauthenticated`.
//!    Credentials that do not check out (an untrusted certificate, a token the
//!    apiserver did not answer for) are a 401 even with anonymous auth on (kubelet's
//!    fail-on-error union); no credentials with anonymous auth off are too.
//! 2. **Authorization.** The request becomes kubelet's attributes: the verb from the
//!    method, resource `nodes`, the node's name, and subresources from the path, as
//!    kubelet 1.36 lists them (KubeletFineGrainedAuthz, GA): `pods` for `/pods` and
//!    `/runningpods`, `healthz`, `configz` and `statusz` for theirs, each followed by
//!    the coarse one (`stats`, `metrics`, `log`, `spec`, `checkpoint`, else `proxy`).
//!    `AlwaysAllow` allows it; `Webhook` asks the apiserver with a SubjectAccessReview
//!    for each in turn until one is allowed, so an account allowed `nodes/pods` reads
//!    `/pods` without `nodes/proxy`. A refusal is kubelet's 403 `Forbidden (user=…,
//!    verb=…, resource=nodes, subresource(s)=[pods proxy])`.
//!
//! Webhook answers are cached as kubelet caches them (TokenReviews, authenticated or
//! not, for `cacheTTL`; allowed reviews for `cacheAuthorizedTTL`, denied ones for
//! `cacheUnauthorizedTTL`), in bounded maps. Tokens are kept only as SHA-256 digests.
//! Reviews go through a client of their own with its own rate limit (kubelet shares
//! its main client): a flood of random tokens waits on that bucket alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tokio_rustls::rustls::pki_types::CertificateDer;

use super::conn::ConnInfo;
use super::serving::{ClientCas, UntrustedCert, User};
use crate::locks::Locked as _;
use crate::options::{AuthorizationMode, Serving};

/// The most answers each cache keeps; past it, expired ones go, then all.
const CACHE_CAP: usize = 4096;

/// The group every authenticated user is in (kubelet's `AuthenticatedGroupAdder`).
const AUTHENTICATED: &str = "system:authenticated";

/// kubelet's authenticator and authorizer for one node.
pub(crate) struct Auth {
    node_name: String,
    anonymous: bool,
    /// The CAs client certificates are verified against (`clientCAFile`).
    client_cas: Option<Arc<ClientCas>>,
    /// The TokenReview client, when the token webhook is on.
    tokens: Option<Webhook<TokenKey, Option<User>>>,
    /// The SubjectAccessReview client, when authorization is `Webhook`.
    reviews: Option<Webhook<Attributes, bool>>,
}

/// Why the auth set-up cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("{setting} needs an apiserver (--kubeconfig) to send {kind}s to; there is none")]
pub(crate) struct NoApiserver {
    setting: &'static str,
    kind: &'static str,
}

impl Auth {
    /// The set-up `serving` asks for. The webhooks need `client`; without one they
    /// are refused, as kubelet refuses to start ("no client provided").
    pub(crate) fn new(
        node_name: &str,
        serving: &Serving,
        client: Option<kube::Client>,
        client_cas: Option<Arc<ClientCas>>,
    ) -> Result<Auth, NoApiserver> {
        let needs = |setting, kind| client.clone().ok_or(NoApiserver { setting, kind });
        let tokens = match serving.token_webhook {
            true => Some(Webhook::new(
                needs(
                    "authentication.webhook.enabled (--authentication-token-webhook)",
                    "TokenReview",
                )?,
                serving.token_webhook_cache_ttl,
                serving.token_webhook_cache_ttl,
            )),
            false => None,
        };
        let reviews = match serving.authorization_mode {
            AuthorizationMode::Webhook => Some(Webhook::new(
                needs(
                    "authorization.mode Webhook (--authorization-mode)",
                    "SubjectAccessReview",
                )?,
                serving.authorized_ttl,
                serving.unauthorized_ttl,
            )),
            AuthorizationMode::AlwaysAllow => None,
        };
        Ok(Auth {
            node_name: node_name.to_string(),
            anonymous: serving.anonymous,
            client_cas,
            tokens,
            reviews,
        })
    }

    /// Who sent a request with this client certificate chain and this bearer
    /// token, as kubelet's union of authenticators: the certificate first, then the
    /// token; a certificate that does not verify is an error unless the token
    /// authenticates, and an error is never anonymous. Ok(None) is a 401.
    async fn authenticate(
        &self,
        chain: Option<&[CertificateDer<'static>]>,
        token: Option<&str>,
    ) -> Result<Option<User>, AuthnError> {
        let mut untrusted = None;
        if let (Some(cas), Some(chain)) = (&self.client_cas, chain) {
            match cas.verify(chain) {
                Ok(Some(mut user)) => {
                    add_group(&mut user, AUTHENTICATED);
                    return Ok(Some(user));
                }
                Ok(None) => {}
                Err(e) => untrusted = Some(e),
            }
        }
        if let (Some(token), Some(tokens)) = (token, &self.tokens) {
            let key = TokenKey::of(token);
            let user = match tokens.cached(&key) {
                Some(user) => user,
                None => {
                    let user = token_review(&tokens.client, token).await?;
                    tokens.store(key, user.clone(), user.is_some());
                    user
                }
            };
            if user.is_some() {
                return Ok(user);
            }
            return untrusted.map_or(Ok(None), |e| Err(e.into()));
        }
        if let Some(e) = untrusted {
            return Err(e.into());
        }
        if token.is_some() {
            return Ok(None);
        }
        Ok(self.anonymous.then(|| User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..User::default()
        }))
    }

    /// Whether `user` may do what `attrs` say.
    async fn authorize(&self, attrs: &Attributes) -> Result<bool, ReviewError> {
        let Some(reviews) = &self.reviews else {
            return Ok(true);
        };
        if let Some(allowed) = reviews.cached(attrs) {
            return Ok(allowed);
        }
        let allowed = access_review(&reviews.client, attrs).await?;
        reviews.store(attrs.clone(), allowed, allowed);
        Ok(allowed)
    }
}

fn add_group(user: &mut User, group: &str) {
    if !user.groups.iter().any(|g| g == group) {
        user.groups.push(group.to_string());
    }
}

/// The token of an `Authorization: Bearer <token>` header (case-insensitive scheme,
/// as Go's bearer token authenticator reads it).
fn bearer_token(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A token's SHA-256: the cache never holds a token.
#[derive(Clone, PartialEq, Eq, Hash)]
struct TokenKey([u8; 32]);

impl TokenKey {
    fn of(token: &str) -> TokenKey {
        let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut k = [0; 32];
        k.copy_from_slice(d.as_ref());
        TokenKey(k)
    }
}

/// kubelet's authorization attributes for one request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Attributes {
    pub user: User,
    pub verb: &'static str,
    pub subresource: &'static str,
    pub node: String,
}

/// kubelet's verb for a method (`GetRequestAttributes`); HEAD and others have none.
pub(crate) fn verb_of(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// kubelet 1.36's subresources for a path, the fine-grained one (if any) first, then
/// the coarse one it falls back to (`GetRequestAttributes`).
pub(crate) fn subresources_of(path: &str) -> Vec<&'static str> {
    let under = |base: &str| {
        path.strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let fine = match () {
        () if under("/pods") || under("/runningpods") => Some("pods"),
        () if under("/healthz") => Some("healthz"),
        () if under("/configz") => Some("configz"),
        () if under("/statusz") => Some("statusz"),
        () => None,
    };
    fine.into_iter().chain([subresource_of(path)]).collect()
}

/// kubelet's coarse subresource for a path: the stats, metrics, logs, spec and
/// checkpoint trees have their own; everything else (exec, pods, containerLogs…) is
/// `proxy`.
pub(crate) fn subresource_of(path: &str) -> &'static str {
    let under = |base: &str| {
        path.strip_prefix(base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    match () {
        () if under("/stats") => "stats",
        () if under("/metrics") => "metrics",
        () if under("/logs") => "log",
        () if under("/spec") => "spec",
        () if under("/checkpoint") => "checkpoint",
        () => "proxy",
    }
}

/// The first cause under an error (what the apiserver or the transport said).
fn source_of(e: &dyn std::error::Error) -> String {
    std::error::Error::source(e)
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// The secure router's middleware: 401 for no or bad credentials, 403 with kubelet's
/// message for a refusal, 500 when the apiserver could not answer a review.
pub(crate) async fn check(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let conn = req.extensions().get::<ConnInfo>().cloned();
    let peer = conn
        .as_ref()
        .map(|c| c.peer.to_string())
        .unwrap_or_default();
    let chain = conn.as_ref().and_then(|c| c.client_cert.clone());
    let path = req.uri().path().to_string();
    let authenticated = auth
        .authenticate(chain.as_deref(), bearer_token(&req))
        .await;
    let user = match authenticated {
        Ok(Some(user)) => user,
        Ok(None) => {
            tracing::debug!(path, peer, "unauthorized: no valid credentials");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
        Err(AuthnError::Untrusted(e)) => {
            // At -v=4, as every 401: a client can send these as fast as it likes.
            tracing::debug!(path, peer, error = %e, "unauthorized: the client certificate does not verify against clientCAFile");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
        Err(e) => {
            tracing::warn!(error = %e, cause = %source_of(&e), "unable to authenticate the request");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
    if let Some(conn) = &conn
        && !user.groups.iter().any(|g| g == "system:unauthenticated")
    {
        conn.slot.authenticated(&user.name);
    }
    let subresources = subresources_of(&path);
    let mut attrs = Attributes {
        verb: verb_of(req.method()),
        subresource: subresources[0],
        node: auth.node_name.clone(),
        user,
    };
    for subresource in &subresources {
        attrs.subresource = subresource;
        match auth.authorize(&attrs).await {
            Ok(true) => return next.run(req).await,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, cause = %source_of(&e), user = attrs.user.name, subresource, "authorization error");
                let msg = format!(
                    "Authorization error (user={}, verb={}, resource=nodes, subresource={subresource})",
                    attrs.user.name, attrs.verb
                );
                return (StatusCode::INTERNAL_SERVER_ERROR, msg).into_response();
            }
        }
    }
    let listed = format!("[{}]", subresources.join(" "));
    tracing::info!(
        user = attrs.user.name,
        verb = attrs.verb,
        subresources = %listed,
        path,
        "refused a request to the kubelet API: the authorizer allowed none of its subresources"
    );
    let msg = format!(
        "Forbidden (user={}, verb={}, resource=nodes, subresource(s)={listed})\n",
        attrs.user.name, attrs.verb
    );
    (StatusCode::FORBIDDEN, msg).into_response()
}

/// A webhook client with its answer cache.
struct Webhook<K, V> {
    client: kube::Client,
    /// How long a positive and a negative answer are kept.
    positive_ttl: Duration,
    negative_ttl: Duration,
    cache: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + std::hash::Hash, V: Clone> Webhook<K, V> {
    fn new(client: kube::Client, positive_ttl: Duration, negative_ttl: Duration) -> Self {
        Webhook {
            client,
            positive_ttl,
            negative_ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &K) -> Option<V> {
        let cache = self.cache.locked();
        let (v, until) = cache.get(key)?;
        (Instant::now() < *until).then(|| v.clone())
    }

    fn store(&self, key: K, value: V, positive: bool) {
        let ttl = if positive {
            self.positive_ttl
        } else {
            self.negative_ttl
        };
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut cache = self.cache.locked();
        if cache.len() >= CACHE_CAP {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= CACHE_CAP {
                cache.clear();
            }
        }
        cache.insert(key, (value, now + ttl));
    }
}

/// Why a request could not be authenticated (a 401, never anonymous).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthnError {
    #[error(transparent)]
    Untrusted(#[from] UntrustedCert),
    #[error(transparent)]
    Review(#[from] ReviewError),
}

/// A review the apiserver did not answer (a 401 or a 500, never an answer).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    #[error("TokenReview failed")]
    Token(#[source] kube::Error),
    #[error("SubjectAccessReview failed")]
    Access(#[source] kube::Error),
}

/// A TokenReview of `token`: the user when the apiserver authenticated it.
async fn token_review(client: &kube::Client, token: &str) -> Result<Option<User>, ReviewError> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: None,
        },
        ..Default::default()
    };
    let api: Api<TokenReview> = Api::all(client.clone());
    let answer = (api.create(&PostParams::default(), &review).await).map_err(ReviewError::Token)?;
    let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(None);
    };
    let Some(info) = status
        .user
        .filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
    else {
        return Ok(None);
    };
    let mut user = User {
        name: info.username.unwrap_or_default(),
        uid: info.uid.unwrap_or_default(),
        groups: info.groups.unwrap_or_default(),
        extra: info.extra.unwrap_or_default().into_iter().collect(),
    };
    add_group(&mut user, AUTHENTICATED);
    Ok(Some(user))
}

/// A SubjectAccessReview of `attrs`: whether the apiserver allows it.
async fn access_review(client: &kube::Client, attrs: &Attributes) -> Result<bool, ReviewError> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(attrs.user.name.clone()),
            uid: Some(attrs.user.uid.clone()).filter(|u| !u.is_empty()),
            groups: Some(attrs.user.groups.clone()),
            extra: Some(attrs.user.extra.clone()).filter(|e| !e.is_empty()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(attrs.verb.to_string()),
                resource: Some("nodes".into()),
                subresource: Some(attrs.subresource.to_string()),
                name: Some(attrs.node.clone()),
                version: Some("v1".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer =
        (api.create(&PostParams::default(), &review).await).map_err(ReviewError::Access)?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_kubelets() {
        assert_eq!(verb_of(&Method::GET), "get");
        assert_eq!(verb_of(&Method::POST), "create");
        assert_eq!(verb_of(&Method::HEAD), "");
        for (path, sub) in [
            ("/stats/summary", "stats"),
            ("/stats", "stats"),
            ("/statsx", "proxy"),
            ("/metrics/cadvisor", "metrics"),
            ("/logs/syslog", "log"),
            ("/spec/", "spec"),
            ("/checkpoint/ns/pod/c", "checkpoint"),
            ("/containerLogs/ns/pod/c", "proxy"),
            ("/exec/ns/pod/c", "proxy"),
            ("/pods", "proxy"),
            ("/configz", "proxy"),
            ("/debug/pods/ns/pod/timeline", "proxy"),
            ("/debug/census", "proxy"),
        ] {
            assert_eq!(subresource_of(path), sub, "{path}");
        }
        // kubelet 1.36's fine-grained ones come first, the coarse one after.
        for (path, subs) in [
            ("/pods", &["pods", "proxy"][..]),
            ("/pods/", &["pods", "proxy"]),
            ("/runningpods/", &["pods", "proxy"]),
            ("/healthz", &["healthz", "proxy"]),
            ("/healthz/syncloop", &["healthz", "proxy"]),
            ("/configz", &["configz", "proxy"]),
            ("/statusz", &["statusz", "proxy"]),
            ("/podsx", &["proxy"]),
            ("/stats/summary", &["stats"]),
            ("/exec/ns/pod/c", &["proxy"]),
        ] {
            assert_eq!(subresources_of(path), subs, "{path}");
        }
    }

    #[test]
    fn bearer_tokens_are_read_as_go_reads_them() {
        let req = |v: &str| {
            Request::builder()
                .header(header::AUTHORIZATION, v)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(bearer_token(&req("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&req("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(&req("Basic abc")), None);
        assert_eq!(bearer_token(&req("Bearer ")), None);
    }

    #[test]
    fn token_keys_are_digests() {
        let k = TokenKey::of("secret-token");
        assert_ne!(&k.0[..12], b"secret-token");
        assert!(TokenKey::of("a") != TokenKey::of("b"));
    }
}
