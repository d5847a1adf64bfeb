//! `/healthz` with kubelet's checks (`ping`, `log`, `syncloop`) and the output format of
//! k8s.io/apiserver's healthz handler, so probes and humans read it as they read kubelet's:
//! `ok` when healthy, `[+]name ok` / `[-]name failed: reason withheld` lines and
//! `healthz check failed` with status 500 otherwise, `?verbose` for the lines on success,
//! `?exclude=name` to skip a check, and `/healthz/<name>` for a single check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::syncloop::{SyncLoopMonitor, SyncLoopUnhealthy};

/// kubelet's check names, in kubelet's order.
pub(crate) const CHECKS: [&str; 3] = ["ping", "log", "syncloop"];

/// What the checks read.
#[derive(Clone)]
pub(crate) struct Health {
    pub syncloop: Arc<SyncLoopMonitor>,
    /// When a silent loop counts as stalled (kubelet: max(2 × syncFrequency, 5 min)).
    pub stall_threshold: Duration,
}

impl Health {
    /// One check by name; `Err` carries the reason (for the log and `/healthz/<name>`).
    /// None for an unknown name.
    pub(crate) fn check(&self, name: &str) -> Option<Result<(), SyncLoopUnhealthy>> {
        match name {
            "ping" => Some(Ok(())),
            // kubelet's `log` check verifies klog's periodic flush ran; oxlet's logger
            // writes each line through unbuffered, so there is nothing that can fall behind.
            "log" => Some(Ok(())),
            "syncloop" => Some(self.syncloop.check(Instant::now(), self.stall_threshold)),
            _ => None,
        }
    }

    /// The root handler's status and body for a query string.
    pub(crate) fn report(&self, query: Option<&str>) -> (StatusCode, String) {
        let mut verbose = false;
        let mut excluded: Vec<&str> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "verbose" => verbose = true,
                "exclude" => excluded.push(value),
                _ => {}
            }
        }
        let mut lines = String::new();
        let mut failed = Vec::new();
        for name in CHECKS {
            if let Some(i) = excluded.iter().position(|e| *e == name) {
                excluded.remove(i);
                lines.push_str(&format!("[+]{name} excluded: ok\n"));
                continue;
            }
            match self.check(name).unwrap_or(Ok(())) {
                Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
                Err(reason) => {
                    // The endpoint is public: the reason goes to the log only.
                    lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
                    failed.push(format!("[-]{name} failed: {reason}"));
                }
            }
        }
        if !excluded.is_empty() {
            let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
            lines.push_str(&format!(
                "warn: some health checks cannot be excluded: no matches for {}\n",
                names.join(",")
            ));
        }
        if !failed.is_empty() {
            tracing::info!(failed = %failed.join("; "), "healthz check failed");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{lines}healthz check failed\n"),
            );
        }
        if verbose {
            (StatusCode::OK, format!("{lines}healthz check passed\n"))
        } else {
            (StatusCode::OK, "ok".to_string())
        }
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET /healthz`.
pub(crate) async fn root(State(h): State<Health>, RawQuery(q): RawQuery) -> Response {
    let (status, body) = h.report(q.as_deref());
    text(status, body)
}

/// `GET /healthz/<check>`: `ok`, or 500 `internal server error: <reason>`.
pub(crate) async fn single(State(h): State<Health>, Path(name): Path<String>) -> Response {
    match h.check(&name) {
        Some(Ok(())) => text(StatusCode::OK, "ok".into()),
        Some(Err(reason)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        Health {
            syncloop: Arc::default(),
            stall_threshold: Duration::from_secs(300),
        }
    }

    #[test]
    fn healthy_is_ok_and_verbose_lists_checks() {
        let h = health();
        h.syncloop.iterated();
        assert_eq!(h.report(None), (StatusCode::OK, "ok".into()));
        assert_eq!(
            h.report(Some("verbose")),
            (
                StatusCode::OK,
                "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n".into()
            )
        );
    }

    #[test]
    fn stale_loop_fails_with_kubelets_lines() {
        let h = health();
        h.syncloop
            .iterated_at(Instant::now() - Duration::from_secs(301));
        let want =
            "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n";
        assert_eq!(
            h.report(None),
            (StatusCode::INTERNAL_SERVER_ERROR, want.into())
        );
        assert_eq!(
            h.report(Some("verbose=1")),
            (StatusCode::INTERNAL_SERVER_ERROR, want.into())
        );
        let err = h.check("syncloop").unwrap().unwrap_err();
        assert!(err.to_string().contains("longer than expected"), "{err}");
    }

    #[test]
    fn runtime_down_fails_syncloop() {
        let h = health();
        h.syncloop.iterated();
        h.syncloop
            .skipping(&crate::syncloop::RuntimeUnhealthy::RuntimeDown);
        let (code, body) = h.report(None);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body.contains("[-]syncloop failed: reason withheld"),
            "{body}"
        );
        assert!(!body.contains("runtime"), "the reason is withheld: {body}");
    }

    #[test]
    fn exclude_skips_a_check_and_warns_on_unknown_names() {
        let h = health();
        h.syncloop
            .iterated_at(Instant::now() - Duration::from_secs(999));
        let (code, body) = h.report(Some("exclude=syncloop&exclude=nope&verbose"));
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            "[+]ping ok\n[+]log ok\n[+]syncloop excluded: ok\n\
             warn: some health checks cannot be excluded: no matches for \"nope\"\n\
             healthz check passed\n"
        );
    }
}
