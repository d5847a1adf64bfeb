//! kubelet's switches for its debugging endpoints, as its `NewServer` installs them:
//! with `enableDebuggingHandlers` off, exec, attach, port-forward, run,
//! `/containerLogs/`, `/runningpods/`, `/debug/pprof/` and `/logs/` answer 405
//! "Debug endpoints are disabled." (`InstallDebuggingDisabledHandlers`), and
//! `/configz`, `/checkpoint/` and `/debug/flags/v` are not served at all; with it on,
//! `enableSystemLogHandler`, `enableDebugFlagsHandler` and `enableProfilingHandler`
//! turn `/logs/`, `/debug/flags/v` and `/debug/pprof/` into their own 405s. kubelet's read-only port is built without
//! a configuration, so it always answers as if the debugging handlers were off.
//!
//! One middleware inside authentication and authorization (kubelet's filters run
//! before these handlers too), matching paths as Go's `ServeMux` does: a pattern
//! ending in `/` is the whole subtree below it. The raw path is matched, the one
//! the router itself matches, so no spelling reaches a handler past the switch.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::options::DebugHandlers;

/// The subtrees `InstallDebuggingDisabledHandlers` answers.
const DEBUGGING_PATHS: &[&str] = &[
    "/run/",
    "/exec/",
    "/attach/",
    "/portForward/",
    "/containerLogs/",
    "/runningpods/",
    "/debug/pprof/",
    "/logs/",
];

/// What kubelet installs only with the debugging handlers on (exact, or a subtree
/// when ending in `/`).
const DEBUGGING_ONLY: &[&str] = &[
    "/configz",
    "/checkpoint/",
    "/debug/flags/v",
    "/statusz",
    "/flagz",
];

/// The switches of kubelet's read-only port: none of the debugging handlers.
pub(crate) const READ_ONLY: DebugHandlers = DebugHandlers {
    debugging: false,
    system_log: false,
    debug_flags: false,
    profiling: false,
};

/// What a switched-off path answers instead of its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Off {
    /// kubelet's `http.Error(w, msg, 405)`.
    Disabled(&'static str),
    /// Not installed: the mux's 404.
    NotServed,
}

/// `ServeMux`'s match: a pattern ending in `/` takes its whole subtree.
fn matches(pattern: &str, path: &str) -> bool {
    if pattern.ends_with('/') {
        path.starts_with(pattern)
    } else {
        path == pattern
    }
}

/// What `path` answers under `h`, when a switch turns it off.
fn switched_off(h: DebugHandlers, path: &str) -> Option<Off> {
    let any = |patterns: &[&str]| patterns.iter().any(|p| matches(p, path));
    if !h.debugging {
        if any(DEBUGGING_PATHS) {
            return Some(Off::Disabled("Debug endpoints are disabled."));
        }
        return any(DEBUGGING_ONLY).then_some(Off::NotServed);
    }
    if !h.system_log && matches("/logs/", path) {
        return Some(Off::Disabled("logs endpoint is disabled."));
    }
    if !h.debug_flags && matches("/debug/flags/v", path) {
        return Some(Off::Disabled("flags endpoint is disabled."));
    }
    if !h.profiling && matches("/debug/pprof/", path) {
        return Some(Off::Disabled("profiling endpoint is disabled."));
    }
    None
}

/// Go's `http.Error`: the message and a newline as plain text, not sniffed.
pub(super) fn go_http_error(code: StatusCode, msg: &str) -> Response {
    let mut r = (code, format!("{msg}\n")).into_response();
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The middleware: a switched-off path gets kubelet's answer, any other goes on.
pub(crate) async fn gate(State(h): State<DebugHandlers>, req: Request, next: Next) -> Response {
    match switched_off(h, req.uri().path()) {
        None => next.run(req).await,
        Some(Off::Disabled(msg)) => {
            tracing::debug!(
                path = req.uri().path(),
                "{msg} (kubelet's switch for it is off)"
            );
            go_http_error(StatusCode::METHOD_NOT_ALLOWED, msg)
        }
        Some(Off::NotServed) => super::not_found().await.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::routing::{any, get};
    use tower::ServiceExt as _;

    /// The secure router's shape: each handler says its name; the gate as served.
    fn router(h: DebugHandlers) -> Router {
        Router::new()
            .route("/exec/{ns}/{pod}/{c}", any(|| async { "exec" }))
            .route("/run/{ns}/{pod}/{c}", any(|| async { "run" }))
            .route("/containerLogs/{ns}/{pod}/{c}", get(|| async { "logs" }))
            .route("/logs/", get(|| async { "node logs" }))
            .route("/logs/{*path}", get(|| async { "node log" }))
            .route("/runningpods/", get(|| async { "running" }))
            .route("/debug/flags/v", any(|| async { "flags" }))
            .route("/configz", get(|| async { "configz" }))
            .route("/pods", get(|| async { "pods" }))
            .fallback(super::super::not_found)
            .layer(axum::middleware::from_fn_with_state(h, gate))
    }

    /// (status, content type, nosniff, body) of one request.
    async fn call(h: DebugHandlers, method: &str, path: &str) -> (u16, String, bool, String) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = router(h).oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let header = |n: header::HeaderName| {
            (resp.headers().get(n)).map_or(String::new(), |v| v.to_str().unwrap().to_string())
        };
        let ctype = header(header::CONTENT_TYPE);
        let nosniff = header(header::X_CONTENT_TYPE_OPTIONS) == "nosniff";
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (
            status,
            ctype,
            nosniff,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    #[tokio::test]
    async fn the_router_answers_each_switch_as_kubelet() {
        let go_405 = |msg: &str| {
            (
                405,
                "text/plain; charset=utf-8".to_string(),
                true,
                format!("{msg}\n"),
            )
        };
        let off = DebugHandlers {
            debugging: false,
            ..ON
        };
        for (method, path) in [
            ("POST", "/exec/ns/p/c"),
            ("GET", "/exec/ns/p/c"),
            ("POST", "/run/ns/p/c"),
            ("GET", "/containerLogs/ns/p/c"),
            ("GET", "/logs/"),
            ("GET", "/logs/syslog"),
            ("GET", "/runningpods/"),
            // A path no handler has: still kubelet's answer for the subtree.
            ("GET", "/exec/ns"),
        ] {
            let want = go_405("Debug endpoints are disabled.");
            assert_eq!(call(off, method, path).await, want, "{method} {path}");
            assert_eq!(call(READ_ONLY, method, path).await, want, "{method} {path}");
        }
        for path in ["/configz", "/debug/flags/v"] {
            let (code, _, _, body) = call(off, "GET", path).await;
            assert_eq!(
                (code, body.as_str()),
                (404, "404 page not found\n"),
                "{path}"
            );
        }
        assert_eq!(call(off, "GET", "/pods").await.3, "pods");
        // Each handler answers with the switches on.
        assert_eq!(call(ON, "POST", "/exec/ns/p/c").await.3, "exec");
        assert_eq!(call(ON, "GET", "/logs/syslog").await.3, "node log");
        assert_eq!(call(ON, "PUT", "/debug/flags/v").await.3, "flags");
        assert_eq!(call(ON, "GET", "/configz").await.3, "configz");
        let no_logs = DebugHandlers {
            system_log: false,
            ..ON
        };
        assert_eq!(
            call(no_logs, "GET", "/logs/syslog").await,
            go_405("logs endpoint is disabled.")
        );
        assert_eq!(call(no_logs, "POST", "/exec/ns/p/c").await.3, "exec");
        let no_flags = DebugHandlers {
            debug_flags: false,
            ..ON
        };
        assert_eq!(
            call(no_flags, "PUT", "/debug/flags/v").await,
            go_405("flags endpoint is disabled.")
        );
        assert_eq!(call(no_flags, "GET", "/logs/").await.3, "node logs");
    }

    const ON: DebugHandlers = DebugHandlers {
        debugging: true,
        system_log: true,
        debug_flags: true,
        profiling: true,
    };

    #[test]
    fn debugging_off_answers_kubelets_paths_and_hides_the_rest() {
        let off = DebugHandlers {
            debugging: false,
            ..ON
        };
        let disabled = Some(Off::Disabled("Debug endpoints are disabled."));
        for path in [
            "/run/ns/p/c",
            "/exec/ns/p/uid/c",
            "/attach/ns/p/c",
            "/portForward/ns/p",
            "/containerLogs/ns/p/c",
            "/runningpods/",
            "/debug/pprof/heap",
            "/logs/",
            "/logs/syslog",
        ] {
            assert_eq!(switched_off(off, path), disabled, "{path}");
            // The read-only port answers them the same way.
            assert_eq!(switched_off(READ_ONLY, path), disabled, "{path}");
            assert_eq!(switched_off(ON, path), None, "{path}");
        }
        for path in ["/configz", "/checkpoint/ns/p/c", "/debug/flags/v"] {
            assert_eq!(switched_off(off, path), Some(Off::NotServed), "{path}");
            assert_eq!(switched_off(ON, path), None, "{path}");
        }
        // What is not a debugging endpoint stays, whatever the switches.
        for path in [
            "/pods",
            "/healthz",
            "/stats/summary",
            "/metrics",
            "/runningpods",
            "/running/x",
            "/configz/x",
            "/debug/koord/metrics",
        ] {
            assert_eq!(switched_off(off, path), None, "{path}");
        }
    }

    #[test]
    fn system_log_and_debug_flags_switch_only_under_debugging() {
        let no_logs = DebugHandlers {
            system_log: false,
            ..ON
        };
        let logs_off = Some(Off::Disabled("logs endpoint is disabled."));
        assert_eq!(switched_off(no_logs, "/logs/"), logs_off);
        assert_eq!(switched_off(no_logs, "/logs/a/b"), logs_off);
        assert_eq!(switched_off(no_logs, "/exec/ns/p/c"), None);
        assert_eq!(switched_off(no_logs, "/debug/flags/v"), None);
        let no_flags = DebugHandlers {
            debug_flags: false,
            ..ON
        };
        assert_eq!(
            switched_off(no_flags, "/debug/flags/v"),
            Some(Off::Disabled("flags endpoint is disabled."))
        );
        assert_eq!(switched_off(no_flags, "/logs/"), None);
        let no_pprof = DebugHandlers {
            profiling: false,
            ..ON
        };
        assert_eq!(
            switched_off(no_pprof, "/debug/pprof/heap"),
            Some(Off::Disabled("profiling endpoint is disabled."))
        );
        assert_eq!(switched_off(ON, "/debug/pprof/heap"), None);
        // With the debugging handlers off, kubelet installs neither switch's handler.
        let all_off = DebugHandlers {
            debugging: false,
            ..no_logs
        };
        assert_eq!(
            switched_off(all_off, "/logs/"),
            Some(Off::Disabled("Debug endpoints are disabled."))
        );
        assert_eq!(
            switched_off(all_off, "/debug/flags/v"),
            Some(Off::NotServed)
        );
    }
}
