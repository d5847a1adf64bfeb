//! The read-only HTTP API: `/pods` (a v1 PodList of every pod the agent manages, spec
//! and status) and `/healthz` on `--read-only-port`; `/healthz` on `--healthz-port`.
//! It holds no state of its own: it reads the pod and status managers.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;

use crate::config::pod_uid;
use crate::status::StatusManager;
use crate::syncloop::pod_manager::PodManager;

/// Read-only views the server serves.
#[derive(Clone)]
pub struct Views {
    pub pods: Arc<PodManager>,
    pub statuses: Arc<StatusManager>,
}

impl Views {
    /// Every managed pod with its latest status, oldest first.
    pub fn pod_list(&self) -> serde_json::Value {
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

async fn healthz() -> &'static str {
    "ok"
}

async fn not_found() -> impl IntoResponse {
    (StatusCode::NOT_FOUND, "404 page not found\n")
}

/// The read-only API router.
pub fn read_only_router(views: Views) -> Router {
    Router::new()
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/healthz", get(healthz))
        .fallback(not_found)
        .with_state(views)
}

/// The healthz-only router.
pub fn healthz_router() -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .fallback(not_found)
}

/// Binds `addr` and serves `router` until cancelled. Binding errors are returned
/// before serving starts, so the caller can report them.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

pub async fn serve(listener: tokio::net::TcpListener, router: Router, cancel: CancellationToken) {
    let res = axum::serve(listener, router)
        .with_graceful_shutdown(async move { cancel.cancelled().await })
        .await;
    if let Err(e) = res {
        tracing::warn!(error = %e, "HTTP server stopped");
    }
}
