//! `/exec`, `/attach`, `/portForward` and `/run`, as kubelet serves them: the pod
//! and container are looked up, the runtime is asked (CRI `Exec`, `Attach`,
//! `PortForward`) for the URL of its own streaming server, and the client's upgrade
//! request is proxied there. The runtime speaks the stream protocols itself (SPDY/3.1
//! and the WebSocket channel protocols), so whatever the client and the runtime agree
//! on passes through untouched. `/run` is a one-shot `ExecSync`.
//!
//! A proxied stream holds its connection's slot under the server's cap and one of the
//! [`MAX_STREAMS`] stream slots, and is closed when no byte has moved either way for
//! `streamingConnectionIdleTimeout`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use super::conn::{ConnInfo, Tracked};
use super::paced::Paced;
use crate::cri::{Cri, StreamRequest};
use crate::pod::{PodManager, pod_uid};

/// The most of a runtime's refusal (a non-101 answer) relayed to the client.
const MAX_REFUSAL_BYTES: usize = 64 * 1024;
/// Each direction's copy buffer: eight TLS records' worth, so a bulk stream
/// (port-forward, `cat` of a big file) moves in few, large writes.
const COPY_BUFFER: usize = 128 * 1024;
/// How long the runtime's streaming server has to answer the upgrade.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);
/// The most exec, attach and port-forward streams proxied at once. Each holds two
/// copy buffers and its connection's TLS send buffer (about 512 KiB for a bulk
/// stream to a slow client), so 256 of them bound that memory near 128 MiB; kubelet
/// has no cap (its streams run in the runtime's server). Past it the answer is
/// kube-apiserver's for too many requests in flight: 429 with `Retry-After: 1`.
pub(crate) const MAX_STREAMS: usize = 256;

/// What the streaming handlers need.
#[derive(Clone)]
pub(crate) struct Streaming {
    pub pods: Arc<PodManager>,
    pub pod_cache: Arc<crate::pleg::PodCache>,
    pub cri: Arc<dyn Cri>,
    /// `streamingConnectionIdleTimeout`.
    pub idle_timeout: Duration,
    /// `runtimeRequestTimeout`: `/run`'s ExecSync is bounded by it.
    pub run_timeout: Duration,
    /// The slots of [`MAX_STREAMS`] (see [`stream_slots`]).
    pub slots: Arc<tokio::sync::Semaphore>,
}

/// The slots that bound proxied streams, counted in `/debug/census`.
pub(crate) fn stream_slots(max: usize) -> Arc<tokio::sync::Semaphore> {
    let slots = Arc::new(tokio::sync::Semaphore::new(max));
    let weak = Arc::downgrade(&slots);
    crate::census::register("server.streams", move || {
        weak.upgrade().map(|s| max - s.available_permits())
    });
    slots
}

/// A kubelet-style refusal: the status and a one-line message.
type Refused = (StatusCode, String);

fn error(code: StatusCode, msg: impl Into<String>) -> Refused {
    (code, msg.into())
}

/// The pod `namespace/name`, and with `uid` given, that exact one.
fn find_pod(s: &Streaming, ns: &str, name: &str, uid: Option<&str>) -> Result<Arc<Pod>, Refused> {
    let pod = s.pods.get_by_name(ns, name);
    match pod {
        Some(p) if uid.is_none_or(|u| u == pod_uid(&p)) => Ok(p),
        _ => Err(error(StatusCode::NOT_FOUND, "pod does not exist")),
    }
}

/// The running container `container` of `pod`, by the runtime's latest view.
fn running_container(s: &Streaming, pod: &Pod, container: &str) -> Result<String, Refused> {
    running_container_id(&s.pod_cache, pod, container).ok_or_else(|| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("container not found ({container:?})"),
        )
    })
}

/// The runtime's ID of `pod`'s running container `container`, if it runs.
pub(super) fn running_container_id(
    cache: &crate::pleg::PodCache,
    pod: &Pod,
    container: &str,
) -> Option<String> {
    let status = cache.get(pod_uid(pod))?;
    (status.containers.iter())
        .find(|c| c.name == container && c.state == crate::kuberuntime::ContainerState::Running)
        .map(|c| c.id.clone())
}

/// kubelet's stream options (`remotecommand.NewOptions`): `input`, `output`,
/// `error`, `tty` as "1", the command as repeated `command`; a TTY merges stderr.
struct StreamOptions {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
    command: Vec<String>,
}

impl StreamOptions {
    fn from_query(pairs: &[(String, String)]) -> Result<StreamOptions, Refused> {
        let flag = |k: &str| pairs.iter().any(|(n, v)| n == k && v == "1");
        let tty = flag("tty");
        let o = StreamOptions {
            stdin: flag("input"),
            stdout: flag("output"),
            stderr: flag("error") && !tty,
            tty,
            command: (pairs.iter())
                .filter(|(n, _)| n == "command")
                .map(|(_, v)| v.clone())
                .collect(),
        };
        if !(o.stdin || o.stdout || o.stderr) {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        Ok(o)
    }
}

/// The path's parts: namespace, pod, then either the container or the pod UID
/// and the container.
type ContainerPath = Path<Vec<String>>;

fn split_container_path(parts: &[String]) -> Option<(&str, &str, Option<&str>, &str)> {
    match parts {
        [ns, pod, c] => Some((ns, pod, None, c)),
        [ns, pod, uid, c] => Some((ns, pod, Some(uid), c)),
        _ => None,
    }
}

/// `/exec/{namespace}/{pod}[/{uid}]/{container}`.
pub(crate) async fn exec(
    State(s): State<Streaming>,
    Path(parts): ContainerPath,
    Query(q): Query<Vec<(String, String)>>,
    req: Request,
) -> Response {
    container_stream(s, parts, q, req, false).await
}

/// `/attach/{namespace}/{pod}[/{uid}]/{container}`.
pub(crate) async fn attach(
    State(s): State<Streaming>,
    Path(parts): ContainerPath,
    Query(q): Query<Vec<(String, String)>>,
    req: Request,
) -> Response {
    container_stream(s, parts, q, req, true).await
}

async fn container_stream(
    s: Streaming,
    parts: Vec<String>,
    q: Vec<(String, String)>,
    req: Request,
    attach: bool,
) -> Response {
    match container_call(&s, &parts, &q, attach) {
        Ok(call) => stream_through(&s, call, req).await,
        Err(r) => r.into_response(),
    }
}

/// The CRI call an exec or attach request makes, or why it cannot be made.
fn container_call(
    s: &Streaming,
    parts: &[String],
    q: &[(String, String)],
    attach: bool,
) -> Result<StreamRequest, Refused> {
    let (ns, name, uid, container) = split_container_path(parts)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "404 page not found"))?;
    let opts = StreamOptions::from_query(q)?;
    let pod = find_pod(s, ns, name, uid)?;
    let id = running_container(s, &pod, container)?;
    tracing::debug!(
        namespace = ns,
        pod = name,
        container,
        attach,
        "streaming session requested"
    );
    Ok(if attach {
        StreamRequest::Attach(cri::AttachRequest {
            container_id: id,
            stdin: opts.stdin,
            tty: opts.tty,
            stdout: opts.stdout,
            stderr: opts.stderr,
        })
    } else {
        StreamRequest::Exec(cri::ExecRequest {
            container_id: id,
            cmd: opts.command,
            tty: opts.tty,
            stdin: opts.stdin,
            stdout: opts.stdout,
            stderr: opts.stderr,
        })
    })
}

/// `/portForward/{namespace}/{pod}[/{uid}]`: the ports travel inside the stream.
pub(crate) async fn port_forward(
    State(s): State<Streaming>,
    Path(parts): ContainerPath,
    Query(q): Query<Vec<(String, String)>>,
    req: Request,
) -> Response {
    match port_forward_call(&s, &parts, &q) {
        Ok(call) => stream_through(&s, call, req).await,
        Err(r) => r.into_response(),
    }
}

/// The CRI call a port-forward request makes: the pod's ready sandbox, and kubelet's
/// V4 options (a WebSocket client names its ports in the query; SPDY clients name
/// them per stream, inside the connection).
fn port_forward_call(
    s: &Streaming,
    parts: &[String],
    q: &[(String, String)],
) -> Result<StreamRequest, Refused> {
    let (ns, name, uid) = match parts {
        [ns, pod] => (ns.as_str(), pod.as_str(), None),
        [ns, pod, uid] => (ns.as_str(), pod.as_str(), Some(uid.as_str())),
        _ => return Err(error(StatusCode::NOT_FOUND, "404 page not found")),
    };
    let pod = find_pod(s, ns, name, uid)?;
    let sandbox = (s.pod_cache.get(pod_uid(&pod)))
        .and_then(|st| {
            st.sandboxes
                .iter()
                .find(|sb| sb.ready)
                .map(|sb| sb.id.clone())
        })
        .ok_or_else(|| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pod not found ({:?})", format!("{name}_{ns}")),
            )
        })?;
    let mut ports = Vec::new();
    for (k, v) in q.iter().filter(|(k, _)| k == "port") {
        for p in v.split(',') {
            match p.trim().parse::<u16>() {
                Ok(n) if n > 0 => ports.push(i32::from(n)),
                _ => {
                    return Err(error(
                        StatusCode::BAD_REQUEST,
                        format!("invalid {k} {p:?}: must be a port number"),
                    ));
                }
            }
        }
    }
    Ok(StreamRequest::PortForward(cri::PortForwardRequest {
        pod_sandbox_id: sandbox,
        port: ports,
    }))
}

/// `/run/{namespace}/{pod}[/{uid}]/{container}?cmd=…`: runs the command, answers
/// with its stdout and stderr.
pub(crate) async fn run(
    State(s): State<Streaming>,
    Path(parts): ContainerPath,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    run_command(&s, &parts, &q)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run_command(
    s: &Streaming,
    parts: &[String],
    q: &[(String, String)],
) -> Result<Response, Refused> {
    let (ns, name, uid, container) = split_container_path(parts)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "404 page not found"))?;
    let cmd: Vec<String> = (q.iter().find(|(k, _)| k == "cmd"))
        .map(|(_, v)| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let pod = find_pod(s, ns, name, uid)?;
    let id = running_container(s, &pod, container)?;
    let out = (s.cri.exec_sync(&id, cmd, s.run_timeout).await)
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut body = out.stdout;
    body.extend_from_slice(&out.stderr);
    Ok(([(header::CONTENT_TYPE, "text/plain")], body).into_response())
}

/// Asks the runtime for the session's URL, then proxies `req` there.
async fn stream_through(s: &Streaming, call: StreamRequest, mut req: Request) -> Response {
    let required = || {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Upgrade request required",
        )
    };
    if !is_upgrade(req.headers()) {
        return required().into_response();
    }
    let Some(stream_slot) = admit(&s.slots) else {
        return too_many_streams();
    };
    let url = match s.cri.stream_url(call).await {
        Ok(u) => u,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let Some(client_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return required().into_response();
    };
    let Some(conn) = req.extensions().get::<ConnInfo>().cloned() else {
        return required().into_response();
    };
    match proxy_upgrade(&url, req, client_upgrade, s.idle_timeout, conn, stream_slot).await {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!(url, error = %e, "proxying a stream to the runtime failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
    }
}

/// A slot for one more stream, or kube-apiserver's answer to too many requests in
/// flight: 429 with `Retry-After: 1`.
fn admit(slots: &Arc<tokio::sync::Semaphore>) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let slot = slots.clone().try_acquire_owned().ok();
    if slot.is_none() {
        tracing::info!(
            max = MAX_STREAMS,
            "refusing a stream: too many streams at once"
        );
    }
    slot
}

/// The answer past [`MAX_STREAMS`].
fn too_many_streams() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        format!("too many streams on this node (at most {MAX_STREAMS}); try again later"),
    )
        .into_response()
}

/// Whether the request asks for a protocol upgrade (`Connection: upgrade` and `Upgrade`).
fn is_upgrade(h: &HeaderMap) -> bool {
    let connection_upgrade = h.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    connection_upgrade && h.contains_key(header::UPGRADE)
}

/// Why a stream could not be proxied to the runtime's streaming server (a 500 to the
/// client, with this text).
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    #[error("runtime URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the runtime's streaming server did not accept in time")]
    ConnectTimeout,
    #[error("connecting to the runtime's streaming server: {0}")]
    Connect(std::io::Error),
    #[error("the runtime's streaming server did not answer in time")]
    AnswerTimeout,
    #[error("the runtime's streaming server: {0}")]
    Http(hyper::Error),
    #[error("the request to the runtime: {0}")]
    Request(axum::http::Error),
}

/// Sends `req` to the streaming server at `url` as it came (its method, upgrade and
/// protocol headers; not its credentials), and on the runtime's 101 joins the two
/// upgraded connections. Any other answer is relayed as it is.
async fn proxy_upgrade(
    url: &str,
    req: Request,
    client_upgrade: OnUpgrade,
    idle_timeout: Duration,
    conn: ConnInfo,
    stream_slot: tokio::sync::OwnedSemaphorePermit,
) -> Result<Response, ProxyError> {
    let bad = |reason: String| ProxyError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let target: hyper::Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
    if target.scheme_str() != Some("http") {
        return Err(bad("only http:// streaming servers are supported".into()));
    }
    let authority = (target.authority())
        .ok_or_else(|| bad("it names no host".into()))?
        .clone();
    let port = authority.port_u16().unwrap_or(80);
    let tcp = tokio::time::timeout(
        BACKEND_TIMEOUT,
        tokio::net::TcpStream::connect((authority.host(), port)),
    )
    .await
    .map_err(|_| ProxyError::ConnectTimeout)?
    .map_err(ProxyError::Connect)?;
    // Stream frames are small and interactive: no Nagle delay on either leg.
    let _ = tcp.set_nodelay(true);
    let (mut sender, backend_conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(ProxyError::Http)?;
    conn.tasks.spawn(async move {
        let _ = backend_conn.with_upgrades().await;
    });
    // The client's query travels on (port-forward's `port` is read from it), as
    // the upgrade-aware proxy carries it; the runtime's URL names the session.
    let uri = match (target.query(), req.uri().query()) {
        (None, Some(q)) => format!("{}?{q}", target.path()),
        _ => target
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
    };
    let mut out = hyper::Request::builder().method(req.method()).uri(uri);
    for (k, v) in req.headers() {
        if k != header::AUTHORIZATION && k != header::HOST {
            out = out.header(k, v);
        }
    }
    let out = out
        .header(header::HOST, authority.as_str())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(ProxyError::Request)?;
    let mut resp = tokio::time::timeout(BACKEND_TIMEOUT, sender.send_request(out))
        .await
        .map_err(|_| ProxyError::AnswerTimeout)?
        .map_err(ProxyError::Http)?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(relay_refusal(resp).await);
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in resp.headers() {
        answer = answer.header(k, v);
    }
    let slots = (conn.slot.clone(), stream_slot);
    let join = join_streams(client_upgrade, backend_upgrade, idle_timeout, slots);
    conn.tasks.spawn(join);
    answer.body(Body::empty()).map_err(ProxyError::Request)
}

/// A runtime's non-101 answer, relayed with its status and at most
/// [`MAX_REFUSAL_BYTES`] of its body.
async fn relay_refusal(resp: hyper::Response<hyper::body::Incoming>) -> Response {
    let (parts, body) = resp.into_parts();
    let limited = http_body_util::Limited::new(body, MAX_REFUSAL_BYTES);
    let bytes = limited
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let mut r = Response::builder().status(parts.status);
    if let Some(ct) = parts.headers.get(header::CONTENT_TYPE) {
        r = r.header(header::CONTENT_TYPE, ct.clone());
    }
    r.body(Body::from(bytes))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// Copies bytes both ways until either side closes or the stream idles out.
async fn join_streams(
    client: OnUpgrade,
    backend: OnUpgrade,
    idle_timeout: Duration,
    _slots: (
        Arc<super::admission::Slot>,
        tokio::sync::OwnedSemaphorePermit,
    ),
) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(e) => {
            tracing::debug!(error = %e, "a stream upgrade did not complete");
            return;
        }
    };
    let mut client = Tracked::new(TokioIo::new(client));
    let last_activity = client.last_activity();
    // The runtime's leg, read in fewer, larger pieces while it runs in bulk.
    let mut backend = Paced::new(TokioIo::new(backend));
    // One copy for the stream's whole life: it holds bytes in flight in its buffers.
    let copy = tokio::io::copy_bidirectional_with_sizes(
        &mut client,
        &mut backend,
        COPY_BUFFER,
        COPY_BUFFER,
    );
    tokio::pin!(copy);
    loop {
        let deadline = last_activity() + idle_timeout;
        tokio::select! {
            r = &mut copy => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "stream ended");
                }
                return;
            }
            () = tokio::time::sleep_until(deadline) => {
                if last_activity() + idle_timeout <= tokio::time::Instant::now() {
                    tracing::info!(idle = %crate::duration::format_go_duration(idle_timeout), "closing a stream idle for streamingConnectionIdleTimeout");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn stream_options_are_kubelets() {
        let o = StreamOptions::from_query(&q(&[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo hi"),
            ("output", "1"),
            ("error", "1"),
        ]))
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdout && o.stderr && !o.stdin && !o.tty);
        let tty =
            StreamOptions::from_query(&q(&[("tty", "1"), ("error", "1"), ("input", "1")])).unwrap();
        assert!(tty.tty && tty.stdin && !tty.stderr, "a TTY merges stderr");
        assert!(StreamOptions::from_query(&q(&[("command", "ls")])).is_err());
    }

    #[test]
    fn streams_past_the_cap_get_429_until_one_ends() {
        let slots = stream_slots(1);
        let held = admit(&slots).unwrap();
        assert!(admit(&slots).is_none());
        let refused = too_many_streams();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        drop(held);
        assert!(admit(&slots).is_some());
    }

    #[test]
    fn upgrade_requests_are_recognised() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(is_upgrade(&h));
    }
}
