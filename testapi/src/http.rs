//! The HTTP side: authentication, routing of `/api` and `/apis` paths to the verbs, discovery,
//! and the reads (get, list with selectors, paging and resourceVersions); writes are in
//! `verbs.rs`, watches in `watch.rs`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::resources::{self, Def};
use crate::selectors::Selector;
use crate::status::ApiError;
use crate::store::{Key, Store};
use crate::verbs;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// The largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// A larger body is read and dropped up to this, so the client gets its 413 rather than a reset.
const MAX_DRAIN: usize = 16 * 1024 * 1024;
/// Requests remembered for tests to inspect.
const MAX_LOG: usize = 10_000;
/// The groups of a node identity, as the node's client certificate gives them.
const NODE_GROUPS: &[&str] = &["system:nodes", "system:authenticated"];
/// A watch without `timeoutSeconds` ends after this (the real one picks 30–60 min).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// One request as the server saw it, for tests that count what a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    /// Whether the request carried the kubeconfig's bearer token.
    pub authenticated: bool,
    pub status: u16,
    /// The request body as text (lossy UTF-8, at most `MAX_LOGGED_BODY` bytes): what a
    /// test asserts of, e.g., a DELETE's grace period and preconditions.
    pub body: String,
    /// When the request arrived: what a test of a client's pacing measures.
    pub at: std::time::Instant,
}

/// How much of each request body the log keeps.
const MAX_LOGGED_BODY: usize = 4096;

pub(crate) struct Shared {
    pub store: Store,
    pub token: String,
    pub anonymous: AtomicBool,
    pub server_address: String,
    pub watchers: AtomicUsize,
    pub bookmark_every: Mutex<Duration>,
    pub token_max: Mutex<Option<Duration>>,
    pub issued: AtomicU64,
    pub log: Mutex<VecDeque<RequestRecord>>,
    /// What TokenReviews and SubjectAccessReviews answer.
    pub reviews: Mutex<crate::reviews::Rules>,
    /// The TLS set-up the proxy subresources reach kubelets with.
    pub kubelet_client: Mutex<Option<Arc<tokio_rustls::rustls::ClientConfig>>>,
    /// The resources the stored CustomResourceDefinitions define.
    pub custom: crate::custom::Custom,
    /// Bearer tokens of node identities (`system:node:<name>`): token, node name.
    pub node_tokens: Mutex<Vec<(String, String)>>,
}

impl Shared {
    /// The custom resources served now.
    pub(crate) fn custom_defs(&self) -> Vec<&'static Def> {
        self.custom.defs(&self.store)
    }
}

fn body(v: &Value) -> Body {
    Full::new(Bytes::from(v.to_string())).boxed()
}

pub(crate) fn respond(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(body(v));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(e: &ApiError) -> Response<Body> {
    respond(e.code, &e.status())
}

pub(crate) fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

pub(crate) fn timestamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn new_uid() -> String {
    let (a, b) = (fastrand::u64(..), fastrand::u64(..));
    let h = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Self(
            q.unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("1" | "true"))
    }

    fn number(&self, k: &str) -> Result<Option<u64>, ApiError> {
        self.get(k)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid {k}: {v:?}")))
            })
            .transpose()
    }
}

/// Everything about one request except its body.
pub(crate) struct Target {
    pub def: &'static Def,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Target {
    pub(crate) fn key(&self) -> Key {
        (
            self.def.id(),
            self.ns.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }
}

pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let at = std::time::Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let authenticated = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.strip_prefix("Bearer ") == Some(shared.token.as_str()));
    let mut seen = Bytes::new();
    let resp = match serve(&shared, req, &mut seen).await {
        Ok(r) => r,
        Err(e) => error(&e),
    };
    let mut log = shared
        .log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if log.len() >= MAX_LOG {
        log.pop_front();
    }
    log.push_back(RequestRecord {
        method: method.to_string(),
        path,
        query,
        content_type,
        authenticated,
        status: resp.status().as_u16(),
        body: String::from_utf8_lossy(&seen[..seen.len().min(MAX_LOGGED_BODY)]).into_owned(),
        at,
    });
    resp
}

/// The review resources (created, never stored): `tokenreviews` or `subjectaccessreviews`.
fn review_kind(group: &str, version: &str, rest: &[&str]) -> Option<&'static str> {
    match (group, version, rest) {
        ("authentication.k8s.io", "v1", ["tokenreviews"]) => Some("tokenreviews"),
        ("authorization.k8s.io", "v1", ["subjectaccessreviews"]) => Some("subjectaccessreviews"),
        _ => None,
    }
}

fn found(v: Option<Value>) -> Result<Response<Body>, ApiError> {
    v.map(|v| respond(200, &v)).ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    })
}

async fn serve(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    seen: &mut Bytes,
) -> Result<Response<Body>, ApiError> {
    // As the real server with anonymous auth on: a wrong token is refused, no token is
    // anonymous (client-go sends no bearer token over plain http), unless anonymous is off.
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")));
    let node = presented.flatten().and_then(|token| {
        let nodes = shared
            .node_tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes
            .iter()
            .find(|(t, _)| t == token)
            .map(|(_, n)| n.clone())
    });
    let ok = match presented {
        Some(token) => token == Some(shared.token.as_str()) || node.is_some(),
        None => shared.anonymous.load(Ordering::SeqCst),
    };
    if !ok {
        return Err(ApiError::new(401, "Unauthorized", "Unauthorized"));
    }
    let path = req.uri().path().to_owned();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return found(Some(resources::version())),
        ["healthz" | "readyz" | "livez"] => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"ok")).boxed());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain"),
            );
            return Ok(r);
        }
        ["api"] => return found(Some(resources::api_versions(&shared.server_address))),
        ["apis"] => return found(Some(resources::api_group_list(&shared.custom_defs()))),
        ["api", "v1"] => return found(resources::resource_list(&[], "", "v1")),
        ["apis", g] => return found(resources::api_group(&shared.custom_defs(), g)),
        ["apis", g, v] => return found(resources::resource_list(&shared.custom_defs(), g, v)),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return found(None),
    };
    if let Some(target) = crate::proxy::route(group, version, rest) {
        return crate::proxy::forward(shared, target, req).await;
    }
    if let (Some(kind), &Method::POST) = (review_kind(group, version, rest), req.method()) {
        let ct = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let raw = read_body(req).await?;
        seen.clone_from(&raw);
        let body = json_body(ct.as_deref(), &raw)?;
        let rules = shared
            .reviews
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = match kind {
            "tokenreviews" => crate::reviews::token_review(&rules, &body)?,
            _ => crate::reviews::access_review(&rules, &body)?,
        };
        return Ok(respond(201, &answer));
    }
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (resource, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some((*n).to_owned()), None),
        [r, n, s] => (*r, Some((*n).to_owned()), Some((*s).to_owned())),
        _ => return found(None),
    };
    let query = Query::parse(req.uri().query());
    // The real server authorizes before it routes: a node refused by RBAC gets its
    // 403 whether or not the resource is served.
    if let Some(node) = &node
        && crate::rbac::GROUPS.contains(&group)
    {
        let user = format!("system:node:{node}");
        let named = name.as_deref();
        let attributes = crate::rbac::Attributes {
            user: &user,
            groups: NODE_GROUPS,
            verb: crate::rbac::verb(req.method(), named.is_some(), query.flag("watch")),
            api_group: group,
            resource,
            sub: sub.as_deref(),
            name: named.or_else(|| crate::rbac::selected_name(query.get("fieldSelector"))),
            namespace: ns.as_deref(),
        };
        crate::rbac::authorize(&shared.store, &attributes)?;
    }
    let Some(def) = resources::find(&shared.custom_defs(), group, version, resource) else {
        return found(None);
    };
    // A namespaced resource by name needs its namespace; a cluster-scoped one has none.
    if (def.namespaced && ns.is_none() && name.is_some()) || (!def.namespaced && ns.is_some()) {
        return found(None);
    }
    let sub_ok = match sub.as_deref() {
        None => true,
        Some("status") => def.status,
        Some("approval") => def.name == "certificatesigningrequests",
        Some("token") => def.name == "serviceaccounts",
        Some("ephemeralcontainers" | "resize") => def.name == "pods" && def.group.is_empty(),
        Some(_) => false,
    };
    if !sub_ok {
        return found(None);
    }
    let t = Target { def, ns, name, sub };
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let raw = read_body(req).await?;
    seen.clone_from(&raw);
    if let Some(node) = &node
        && t.def.group == "resource.k8s.io"
    {
        let body: Option<Value> = serde_json::from_slice(&raw).ok();
        crate::dra_rules::authorize(
            shared,
            node,
            &method,
            &t,
            body.as_ref(),
            query.get("fieldSelector"),
            query.flag("watch"),
        )?;
    }
    match (method, t.name.is_some(), t.sub.as_deref()) {
        (Method::GET, false, _) if query.flag("watch") => {
            let (labels, fields) = selectors(&t, &query)?;
            let params = crate::watch::Params {
                from: query.number("resourceVersion")?.filter(|rv| *rv > 0),
                timeout: query
                    .number("timeoutSeconds")?
                    .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs),
                bookmarks: query.flag("allowWatchBookmarks"),
                initial_events: query.flag("sendInitialEvents"),
                labels,
                fields,
            };
            crate::watch::watch(shared, t.def, t.ns.as_deref(), params)
        }
        (Method::GET, false, _) => list(shared, &t, &query),
        (Method::GET, true, Some("token")) => found(None),
        (Method::GET, true, _) => get(shared, &t),
        (Method::POST, true, Some("token")) => {
            verbs::token_request(shared, &t, &json_body(content_type.as_deref(), &raw)?)
        }
        (Method::POST, false, _) if t.ns.is_some() || !t.def.namespaced => {
            verbs::create(shared, &t, json_body(content_type.as_deref(), &raw)?)
        }
        (Method::PUT, true, sub) if sub != Some("token") => {
            verbs::update(shared, &t, json_body(content_type.as_deref(), &raw)?)
        }
        (Method::PATCH, true, sub) if sub != Some("token") => {
            verbs::patch_object(shared, &t, content_type.as_deref(), &raw)
        }
        (Method::DELETE, true, None) => {
            verbs::delete(shared, &t, content_type.as_deref(), &raw, &query)
        }
        (Method::DELETE, false, None) if t.def.name != "pods" => {
            let (labels, fields) = selectors(&t, &query)?;
            verbs::delete_collection(shared, &t, &labels, &fields)
        }
        (m, _, _) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {m}"),
        )),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let mut body = req.into_body();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= MAX_BODY {
            kept.extend_from_slice(&data);
        } else if seen > MAX_DRAIN {
            // Past this the connection is just closed, and the client may not see the 413.
            break;
        }
    }
    if seen > MAX_BODY {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {MAX_BODY} bytes"),
        ));
    }
    Ok(Bytes::from(kept))
}

pub(crate) fn unsupported_media(ct: Option<&str>) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format ({}) - accepted media types include: application/json",
            ct.unwrap_or("none")
        ),
    )
}

pub(crate) fn json_body(ct: Option<&str>, raw: &[u8]) -> Result<Value, ApiError> {
    if ct != Some("application/json") {
        return Err(unsupported_media(ct));
    }
    let v: Value = serde_json::from_slice(raw).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    Ok(v)
}

fn get(shared: &Shared, t: &Target) -> Result<Response<Body>, ApiError> {
    let name = t.name.as_deref().unwrap_or_default();
    let obj = shared
        .store
        .get(&t.key())
        .ok_or_else(|| ApiError::not_found(t.def.name, name))?;
    Ok(respond(200, &obj))
}

fn selectors(t: &Target, q: &Query) -> Result<(Selector, Selector), ApiError> {
    let labels = Selector::labels(q.get("labelSelector").unwrap_or(""))?;
    let mut allowed = vec!["metadata.name", "metadata.namespace"];
    allowed.extend_from_slice(t.def.fields);
    let fields = Selector::fields(q.get("fieldSelector").unwrap_or(""), &allowed)?;
    Ok((labels, fields))
}

fn strip_type_meta(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("kind");
        o.remove("apiVersion");
    }
    v
}

/// Continue tokens name the version the list is consistent at and the last key sent.
fn continue_token(rv: u64, key: &Key) -> String {
    format!("{rv}.{}.{}", key.1, key.2)
}

fn parse_continue(s: &str) -> Result<(u64, String, String), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {s}"));
    let (rv, rest) = s.split_once('.').ok_or_else(bad)?;
    // Namespaces hold no dots; names may.
    let (ns, name) = rest.split_once('.').ok_or_else(bad)?;
    Ok((
        rv.parse().map_err(|_| bad())?,
        ns.to_owned(),
        name.to_owned(),
    ))
}

fn list(shared: &Shared, t: &Target, q: &Query) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(t, q)?;
    if q.flag("sendInitialEvents") {
        return Err(ApiError::bad_request(
            "sendInitialEvents is only supported on watch requests",
        ));
    }
    let cont = q
        .get("continue")
        .filter(|c| !c.is_empty())
        .map(parse_continue)
        .transpose()?;
    let rv = q.number("resourceVersion")?;
    let exact = q.get("resourceVersionMatch") == Some("Exact");
    let current = shared.store.current_rv();
    if let Some(rv) = rv.filter(|rv| *rv > current) {
        return Err(ApiError::too_large(rv, current));
    }
    let at = match (&cont, rv) {
        (Some((crv, _, _)), _) => Some(*crv),
        (None, Some(rv)) if exact && rv > 0 => Some(rv),
        _ => None,
    };
    let (objects, at) = shared.store.list(&t.def.id(), t.ns.as_deref(), at).map_err(|e| {
        if cont.is_some() {
            ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results.")
        } else {
            e
        }
    })?;
    let limit = q
        .number("limit")?
        .filter(|l| *l > 0)
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
    let matching: Vec<(Key, Value)> = objects
        .into_iter()
        .filter(|(k, _)| {
            cont.as_ref()
                .is_none_or(|(_, ns, name)| (&k.1, &k.2) > (ns, name))
        })
        .filter(|(_, v)| labels.matches_labels(v) && fields.matches_fields(v))
        .collect();
    let total = matching.len();
    let page = limit.unwrap_or(total).min(total);
    let mut meta = json!({ "resourceVersion": at.to_string() });
    if page < total {
        meta["continue"] = Value::String(continue_token(at, &matching[page - 1].0));
        meta["remainingItemCount"] = json!(total - page);
    }
    let items: Vec<Value> = matching
        .into_iter()
        .take(page)
        .map(|(_, v)| strip_type_meta(v))
        .collect();
    Ok(respond(
        200,
        &json!({
            "kind": format!("{}List", t.def.kind),
            "apiVersion": t.def.api_version(),
            "metadata": meta,
            "items": items,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let q = Query::parse(Some(
            "fieldSelector=spec.nodeName%3Dn1&labelSelector=a+in+%28x%2Cy%29&watch=1&bad=%zz",
        ));
        assert_eq!(q.get("fieldSelector"), Some("spec.nodeName=n1"));
        assert_eq!(q.get("labelSelector"), Some("a in (x,y)"));
        assert!(q.flag("watch"));
        assert_eq!(q.get("bad"), Some("%zz"));
        assert_eq!(q.number("watch").unwrap(), Some(1));
        assert_eq!(
            Query::parse(Some("limit=x"))
                .number("limit")
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn continue_tokens_round_trip_names_with_dots() {
        let key = (
            "events".to_owned(),
            "default".to_owned(),
            "pod.17a2b".to_owned(),
        );
        let (rv, ns, name) = parse_continue(&continue_token(42, &key)).unwrap();
        assert_eq!(
            (rv, ns.as_str(), name.as_str()),
            (42, "default", "pod.17a2b")
        );
        assert_eq!(parse_continue("garbage").unwrap_err().code, 400);
    }
}
