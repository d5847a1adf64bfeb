//! kubelet's server metrics: every request to the read-only server is counted,
//! timed and tracked in flight, labelled with kubelet's coarse method and path
//! buckets so a client cannot grow the series.

use std::time::Instant;

use std::io::Write;

use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

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
    track(req, next, "readonly").await
}

/// The secure server's middleware (`server_type="readwrite"`, kubelet's name).
pub(crate) async fn track_readwrite(req: Request, next: Next) -> Response {
    track(req, next, "readwrite").await
}

async fn track(req: Request, next: Next, server_type: &'static str) -> Response {
    let path = path_bucket(req.uri().path());
    let labels = [
        method_bucket(req.method().as_str()),
        path.as_str(),
        server_type,
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

/// Whether `Accept-Encoding` offers gzip with a non-zero quality (promhttp's
/// negotiation: gzip is its only compression, and `*` does not count).
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            name.eq_ignore_ascii_case("gzip") && !q_zero
        })
}

/// A Prometheus text exposition, gzipped with `Content-Encoding: gzip` when the
/// client asks for it (component-base's handlers do).
pub(crate) fn exposition(
    headers: &HeaderMap,
    content_type: &'static str,
    body: String,
) -> Response {
    if accepts_gzip(headers) {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing into a Vec cannot fail.
        if gz.write_all(body.as_bytes()).is_ok()
            && let Ok(zipped) = gz.finish()
        {
            return (
                [
                    (header::CONTENT_TYPE, content_type),
                    (header::CONTENT_ENCODING, "gzip"),
                ],
                zipped,
            )
                .into_response();
        }
    }
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, v.parse().unwrap());
        h
    }

    #[test]
    fn gzip_is_chosen_only_when_offered() {
        assert!(accepts_gzip(&enc("gzip")));
        assert!(accepts_gzip(&enc("deflate, GZIP;q=0.5")));
        assert!(!accepts_gzip(&enc("gzip;q=0")));
        assert!(!accepts_gzip(&enc("identity, *")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn an_exposition_is_gzipped_on_request() {
        use std::io::Read;
        let body = "# TYPE a gauge\na 1\n".to_string();
        let r = exposition(&enc("gzip"), crate::metrics::CONTENT_TYPE, body.clone());
        assert_eq!(r.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            crate::metrics::CONTENT_TYPE
        );
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, body);
        let plain = exposition(
            &HeaderMap::new(),
            crate::metrics::CONTENT_TYPE,
            body.clone(),
        );
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
        let bytes = axum::body::to_bytes(plain.into_body(), 1 << 20)
            .await
            .unwrap();
        assert_eq!(&bytes[..], body.as_bytes());
    }

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
