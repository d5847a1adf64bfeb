//! kubelet's server metrics: every request to the read-only server is counted,
//! timed and tracked in flight, labelled with kubelet's coarse method and path
//! buckets so a client cannot grow the series.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The first path segment kubelet keeps as a label (`/metrics/<x>` keeps two).
const PATHS: &[&str] = &[
    "healthz",
    "pods",
    "stats",
    "metrics",
    "run",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "configz",
    "runningpods",
    "checkpoint",
    "logs",
    "debug",
    "pprof",
    "flagz",
    "statusz",
];
const METRICS_SUBPATHS: &[&str] = &["cadvisor", "probes", "resource"];

/// kubelet's `path` label for a request path; anything else is `other`.
pub(crate) fn path_bucket(path: &str) -> String {
    let mut segs = path.trim_start_matches('/').split('/');
    let first = segs.next().unwrap_or_default();
    if !PATHS.contains(&first) {
        return "other".into();
    }
    if first == "metrics"
        && let Some(sub) = segs.next()
        && METRICS_SUBPATHS.contains(&sub)
    {
        return format!("metrics/{sub}");
    }
    first.into()
}

/// kubelet's `method` label: the standard methods, else `other`.
pub(crate) fn method_bucket(m: &str) -> &'static str {
    match m {
        "OPTIONS" => "OPTIONS",
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "TRACE" => "TRACE",
        "CONNECT" => "CONNECT",
        _ => "other",
    }
}

/// kubelet's `long_running`: only these buckets (the real port-forward bucket is
/// `portForward`, so it reports `false`, as kubelet's does).
pub(crate) fn long_running(path_bucket: &str) -> &'static str {
    match path_bucket {
        "exec" | "attach" | "portforward" | "debug" => "true",
        _ => "false",
    }
}

/// Counts a request in flight until dropped, so a client that hangs up mid-request
/// does not leave it counted.
struct InFlight(prometheus::Gauge);

impl InFlight {
    fn new(g: prometheus::Gauge) -> InFlight {
        g.inc();
        InFlight(g)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The read-only server's middleware (`server_type="readonly"`).
pub(crate) async fn track_readonly(req: Request, next: Next) -> Response {
    let path = path_bucket(req.uri().path());
    let labels = [
        method_bucket(req.method().as_str()),
        path.as_str(),
        "readonly",
        long_running(&path),
    ];
    let k = super::kubelet();
    k.http_requests.with_label_values(&labels).inc();
    let _inflight = InFlight::new(k.http_inflight.with_label_values(&labels));
    let start = Instant::now();
    let resp = next.run(req).await;
    k.http_requests_duration
        .with_label_values(&labels)
        .observe(start.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_fall_in_kubelets_buckets() {
        assert_eq!(path_bucket("/metrics"), "metrics");
        assert_eq!(path_bucket("/metrics/probes"), "metrics/probes");
        assert_eq!(path_bucket("/metrics/resource"), "metrics/resource");
        assert_eq!(path_bucket("/metrics/other"), "metrics");
        assert_eq!(path_bucket("/stats/summary"), "stats");
        assert_eq!(path_bucket("/pods/"), "pods");
        assert_eq!(path_bucket("/healthz/ping"), "healthz");
        assert_eq!(path_bucket("/runningpods/"), "runningpods");
        assert_eq!(path_bucket("/portForward/ns/p"), "portForward");
        assert_eq!(path_bucket("/"), "other");
        assert_eq!(path_bucket("/etc/passwd"), "other");
        assert_eq!(path_bucket("/Metrics"), "other");
    }

    #[test]
    fn methods_and_long_running_as_kubelet() {
        assert_eq!(method_bucket("GET"), "GET");
        assert_eq!(method_bucket("PATCH"), "other");
        assert_eq!(method_bucket("BREW"), "other");
        assert_eq!(long_running("exec"), "true");
        assert_eq!(long_running("attach"), "true");
        assert_eq!(long_running("debug"), "true");
        assert_eq!(long_running("portForward"), "false");
        assert_eq!(long_running("metrics"), "false");
    }
}
