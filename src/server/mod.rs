//! kubelet's HTTP API on its three ports:
//!
//! - the secure port (`port`, 10250): TLS ([`serving`]), kubelet's authentication and
//!   authorization ([`auth`]), and every endpoint: the read-only ones, `/debug/*`, `/configz`,
//!   `/runningpods/`, `/containerLogs` ([`container_logs`]), the node's `/logs/`
//!   ([`node_logs`]) and the streams (`/exec`,
//!   `/attach`, `/portForward`, `/run`; [`streaming`]);
//! - the read-only port (`readOnlyPort`): `/pods` (a v1 PodList of every pod the agent
//!   manages, spec and status), the stats, `/metrics` and `/healthz`, without
//!   authentication and without what kubelet keeps to the secure port (oxlet's
//!   `/debug/*` views are the secure port's alone, behind `nodes/proxy`);
//! - the healthz port: `/healthz`.
//!
//! It holds no state of its own: it reads the pod and status managers and the runtime.
//! Connections are bounded (see [`conn`]); `/healthz` runs kubelet's checks ([`healthz`]);
//! kubelet's switches for the debugging endpoints are honoured on both API ports
//! ([`switches`]).

mod admission;
mod auth;
mod checkpoint;
mod conn;
mod container_logs;
mod healthz;
mod node_log_query;
mod node_logs;
mod paced;
mod pprof;
mod serving;
mod stats;
mod streaming;
mod switches;
mod zpages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

pub(crate) use auth::Auth;
pub(crate) use checkpoint::Checkpoints;
pub(crate) use conn::{Limits, serve_io};
pub(crate) use container_logs::{ContainerLogs, Follows, MAX_FOLLOWED_LOGS};
pub(crate) use healthz::Health;
pub(crate) use node_log_query::{Journalctl, System as SystemJournal};
pub(crate) use node_logs::NodeLogs;
pub(crate) use serving::{ServingSlot, Tls, acceptor, reload_client_cas, reload_pair, user_of};
pub(crate) use streaming::{MAX_STREAMS, Streaming, stream_slots};
pub(crate) use zpages::Zpages;

use crate::pod::PodManager;
use crate::pod::pod_uid;
use crate::status::StatusManager;

/// Read-only views the server serves.
#[derive(Clone)]
pub(crate) struct Views {
    pub pods: Arc<PodManager>,
    pub statuses: Arc<StatusManager>,
    pub health: Health,
    /// The metric advisor's series (prediction and the QoS manager read them too).
    pub cache: Arc<crate::metriccache::MetricCache>,
    /// The metric advisor's latest round.
    pub readings: Arc<crate::contracts::LatestReadings>,
    // Summary API, /runningpods/, /configz: what those read.
    /// The runtime's view of each pod (`/runningpods/`).
    pub pod_cache: Arc<crate::pleg::PodCache>,
    /// Each pod's measured volume and log usage.
    pub volumes: Arc<crate::stats::VolumeUsage>,
    /// The effective configuration as `/configz` serves it.
    pub configz: Arc<serde_json::Value>,
    /// The prediction models (None: prediction is off).
    pub prediction: Option<crate::koord::Served>,
    /// The eviction manager's conditions and last observations.
    pub eviction: Arc<crate::eviction::StatusView>,
    /// What this node's NodeMetric status is made of (`/debug/koord/nodemetric`).
    pub node_metric: Arc<crate::koord::NodeMetricSource>,
    /// The host's cgroup files `/metrics/cadvisor` reads for itself, kept for a
    /// housekeeping interval.
    pub cgroups: Arc<crate::stats::ExtrasCache>,
    /// The machine facts of `/metrics/cadvisor`'s `machine_*` families.
    pub machine: Arc<crate::stats::MachineReader>,
}

impl Views {
    /// Every managed pod with its latest status, oldest first.
    pub(crate) fn pod_list(&self) -> serde_json::Value {
        let items: Vec<Pod> = self
            .pods
            .all()
            .iter()
            .map(|p| {
                let mut pod = (**p).clone();
                if let Some(s) = self.statuses.get(pod_uid(p)) {
                    pod.status = Some(s);
                }
                pod
            })
            .collect();
        serde_json::json!({
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": items,
        })
    }
}

async fn pods(State(v): State<Views>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        v.pod_list().to_string(),
    )
}

/// `/stats/predictions`: the prediction models and the reclaimable resources.
async fn predictions(State(v): State<Views>) -> axum::response::Response {
    match &v.prediction {
        Some(p) => (
            [(header::CONTENT_TYPE, "application/json")],
            p.document(&v.pods, &v.statuses).to_string(),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "prediction is off (--enable-prediction=false)\n",
        )
            .into_response(),
    }
}

async fn metrics(headers: header::HeaderMap) -> axum::response::Response {
    crate::metrics::exposition(
        &headers,
        crate::metrics::CONTENT_TYPE,
        crate::metrics::render_kubelet(),
    )
}

async fn probe_metrics(headers: header::HeaderMap) -> axum::response::Response {
    crate::metrics::exposition(
        &headers,
        crate::metrics::CONTENT_TYPE,
        crate::metrics::render_probes(),
    )
}

/// `/debug/koord/metrics`: one aggregation of the metric cache (see
/// [`crate::advisor::debug_query`]); a bad or unknown parameter is a 400
/// naming it, a query while another runs a 429.
async fn koord_metrics(
    State(v): State<Views>,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> axum::response::Response {
    let answer = crate::advisor::DebugQuery::from_pairs(&pairs)
        .and_then(|q| crate::advisor::debug_query(&v.cache, &q));
    match answer {
        Ok(json) => (
            [(header::CONTENT_TYPE, "application/json")],
            json.to_string(),
        )
            .into_response(),
        Err(e @ crate::advisor::DebugQueryError::Busy) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            format!("{e}\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}

/// `/debug/koord/nodemetric`: the NodeMetric status koordlet would report now (in
/// cluster mode it is also written to this node's NodeMetric).
async fn koord_nodemetric(State(v): State<Views>) -> axum::response::Response {
    let status = v.node_metric.status();
    match serde_json::to_string(&status) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Any method but GET (and HEAD) on a GET-only endpoint, as kubelet answers it.
async fn get_only() -> impl IntoResponse {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET")],
        "Method Not Allowed",
    )
}

/// `/debug/eviction`: the pressure conditions, the last observation of each signal
/// and the thresholds met, as JSON.
/// CPU time per task (`--task-cpu-accounting`); 404 while accounting is off.
async fn task_cpu() -> axum::response::Response {
    if !crate::tasks::cpu_accounting_enabled() {
        return not_found().await.into_response();
    }
    axum::Json(crate::tasks::cpu_snapshot()).into_response()
}

/// `/debug/census`: the runtime's live tasks and every registered map's size
/// (`crate::census`), so a soak can see what grows.
async fn census() -> axum::response::Response {
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    axum::Json(serde_json::json!({
        "tokioTasks": tasks,
        "counts": crate::census::snapshot(),
    }))
    .into_response()
}

async fn eviction_status(State(v): State<Views>) -> impl IntoResponse {
    axum::Json(v.eviction.get())
}

/// A plain-text answer, as kubelet's handlers write their messages.
fn plain_text(code: StatusCode, msg: String) -> axum::response::Response {
    (code, [(header::CONTENT_TYPE, "text/plain")], msg).into_response()
}

/// `/debug/flags/v`: kubelet's verbosity setter. `PUT` with the level as the body
/// changes `-v` from the next log line on; any other method is 406, as kubelet's
/// `StringFlagPutHandler` answers.
async fn debug_flags_v(
    method: axum::http::Method,
    body: axum::body::Bytes,
) -> axum::response::Response {
    if method != axum::http::Method::PUT {
        return plain_text(StatusCode::NOT_ACCEPTABLE, "unsupported http method".into());
    }
    let text = String::from_utf8_lossy(&body);
    // klog's Level.Set: an unsigned 32-bit decimal; oxlet's levels end at 6.
    let Ok(level) = text.parse::<u32>() else {
        let msg = format!(
            "failed set klog.logging.verbosity {text}: strconv.ParseUint: parsing {:?}: invalid syntax",
            text.as_ref()
        );
        return plain_text(StatusCode::BAD_REQUEST, msg);
    };
    let v = u8::try_from(level).unwrap_or(u8::MAX);
    if let Err(e) = crate::logging::set_verbosity(v) {
        return plain_text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    }
    tracing::warn!(
        verbosity = level,
        "log verbosity changed through /debug/flags/v"
    );
    plain_text(
        StatusCode::OK,
        format!("successfully set klog.logging.verbosity to {text}"),
    )
}

/// `/debug/pods/{namespace}/{name}/timeline`: the pod's story as JSON, or as the text
/// `oxlet timeline` prints with `?format=text`; 404 when nothing was said of the pod.
async fn timeline(
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
    query: axum::extract::RawQuery,
) -> axum::response::Response {
    let pod = format!("{namespace}/{name}");
    let Some(story) = crate::timeline::global().story(&pod) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no timeline for pod {pod}: this node has not seen it, or it is gone for longer than {}\n",
                crate::duration::format_go_duration(crate::timeline::GONE_KEPT_FOR)),
        )
            .into_response();
    };
    if query.0.as_deref() == Some("format=text") {
        return crate::timeline::render_text(&story).into_response();
    }
    match serde_json::to_string(&story) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "404 page not found\n")
}

/// The endpoints both API ports serve: kubelet's read-only API.
fn shared_routes(views: Views) -> Router {
    Router::new()
        .route("/pods", get(pods).fallback(get_only))
        .route("/pods/", get(pods).fallback(get_only))
        // kubelet's stats.
        .route("/stats/summary", get(stats::summary).post(stats::summary))
        .route("/metrics/resource", get(stats::resource))
        .route("/metrics/cadvisor", get(stats::cadvisor))
        // Prediction.
        .route("/stats/predictions", get(predictions))
        // kubelet's Prometheus registries.
        .route("/metrics", get(metrics))
        .route("/metrics/probes", get(probe_metrics))
        .merge(healthz_routes(views.health.clone()))
        .with_state(views)
}

/// oxlet's `/debug/*` views: the secure port's alone, behind `nodes/proxy` as
/// kubelet's own debug paths are (they show pod UIDs, container IDs and each pod's
/// story, and a query costs the node work).
fn debug_views(views: Views) -> Router {
    Router::new()
        // The metric advisor: a read-only look into the metric cache.
        .route("/debug/koord/metrics", get(koord_metrics))
        .route("/debug/koord/nodemetric", get(koord_nodemetric))
        // The eviction manager's state (oxlet only; kubelet has no such endpoint).
        .route("/debug/eviction", get(eviction_status))
        .route("/debug/tasks", get(task_cpu))
        // How many entries each per-pod map holds (oxlet only; for leak checks).
        .route("/debug/census", get(census))
        // Each pod's story (oxlet only).
        .route("/debug/pods/{namespace}/{name}/timeline", get(timeline))
        .with_state(views)
}

/// The read-only API router: no `/configz`, `/runningpods/`, logs or streams, which
/// kubelet serves on the secure port alone.
pub(crate) fn read_only_router(views: Views) -> Router {
    shared_routes(views)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            switches::READ_ONLY,
            switches::gate,
        ))
        .layer(axum::middleware::from_fn(crate::metrics::track_readonly))
}

/// What the secure port serves beyond the read-only views.
#[derive(Clone)]
pub(crate) struct Secure {
    pub views: Views,
    pub streaming: Streaming,
    pub logs: ContainerLogs,
    pub node_logs: NodeLogs,
    pub checkpoints: Checkpoints,
    pub auth: Arc<Auth>,
    /// kubelet's switches for the debugging endpoints ([`switches`]).
    pub handlers: crate::options::DebugHandlers,
    /// What `/statusz` and `/flagz` show.
    pub zpages: Arc<Zpages>,
}

/// The secure API router: every endpoint, behind kubelet's authentication and
/// authorization.
pub(crate) fn secure_router(s: Secure) -> Router {
    let debugging = Router::new()
        .route("/runningpods/", get(stats::running_pods).fallback(get_only))
        .route("/configz", get(stats::configz))
        .route("/debug/flags/v", axum::routing::any(debug_flags_v))
        .with_state(s.views.clone())
        .merge(
            Router::new()
                .route("/statusz", get(zpages::statusz).fallback(get_only))
                .route("/flagz", get(zpages::flagz).fallback(get_only))
                .with_state(s.zpages),
        )
        .route(
            "/debug/pprof/profile",
            get(pprof::profile).fallback(get_only),
        )
        .route(
            "/debug/pprof/cmdline",
            get(pprof::cmdline).fallback(get_only),
        )
        .route("/debug/pprof/", get(pprof::index))
        .route("/debug/pprof/{*name}", get(pprof::index));
    let logs = Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs::container_logs),
        )
        .with_state(s.logs)
        .merge(
            Router::new()
                .route("/logs/", get(node_logs::node_logs))
                .route("/logs/{*path}", get(node_logs::node_logs))
                .with_state(s.node_logs),
        );
    let streams = Router::new()
        .route(
            "/exec/{ns}/{pod}/{container}",
            get(streaming::exec).post(streaming::exec),
        )
        .route(
            "/exec/{ns}/{pod}/{uid}/{container}",
            get(streaming::exec).post(streaming::exec),
        )
        .route(
            "/attach/{ns}/{pod}/{container}",
            get(streaming::attach).post(streaming::attach),
        )
        .route(
            "/attach/{ns}/{pod}/{uid}/{container}",
            get(streaming::attach).post(streaming::attach),
        )
        .route(
            "/portForward/{ns}/{pod}",
            get(streaming::port_forward).post(streaming::port_forward),
        )
        .route(
            "/portForward/{ns}/{pod}/{uid}",
            get(streaming::port_forward).post(streaming::port_forward),
        )
        .route(
            "/run/{ns}/{pod}/{container}",
            axum::routing::post(streaming::run),
        )
        .route(
            "/run/{ns}/{pod}/{uid}/{container}",
            axum::routing::post(streaming::run),
        )
        .with_state(s.streaming);
    let checkpoints = Router::new()
        .route(
            "/checkpoint/{ns}/{pod}/{container}",
            axum::routing::post(checkpoint::checkpoint),
        )
        .with_state(s.checkpoints);
    shared_routes(s.views.clone())
        .merge(debug_views(s.views))
        .merge(debugging)
        .merge(logs)
        .merge(streams)
        .merge(checkpoints)
        .fallback(not_found)
        // Inside authentication and authorization, as kubelet's disabled handlers are.
        .layer(axum::middleware::from_fn_with_state(
            s.handlers,
            switches::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(s.auth, auth::check))
        .layer(axum::middleware::from_fn(crate::metrics::track_readwrite))
}

fn healthz_routes<S: Clone + Send + Sync + 'static>(health: Health) -> Router<S> {
    Router::new()
        .route("/healthz", get(healthz::root))
        .route("/healthz/{check}", get(healthz::single))
        .with_state(health)
}

/// The healthz-only router.
pub(crate) fn healthz_router(health: Health) -> Router {
    healthz_routes(health).fallback(not_found)
}

/// Binds `addr`. Binding errors are returned before serving starts, so the caller
/// can report them.
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves `router` on `listener` within `limits` until cancelled; over TLS with `tls`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Tls>,
    cancel: CancellationToken,
) {
    conn::serve(listener, router, limits, tls, cancel).await;
}
