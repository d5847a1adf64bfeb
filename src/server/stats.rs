//! The read-only server's stats and debugging endpoints: `/stats/summary`,
//! `/metrics/resource`, `/metrics/cadvisor`, `/runningpods/` and `/configz`, answered as kubelet answers
//! them. kubelet serves the last two only on its authenticated port (its read-only
//! port answers 405 `Debug endpoints are disabled.`); oxlet has only the read-only
//! port, so it serves them here.

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::Views;
use crate::stats::{
    TEXT_CONTENT_TYPE, build_summary, render_resource_metrics, scrape_cadvisor_metrics,
};

/// go-restful's pretty JSON: one-space indent, no trailing newline.
fn pretty<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    // Serializing plain data into a Vec cannot fail.
    let _ = v.serialize(&mut ser);
    out
}

/// `only_cpu_and_memory` is on when its first value is exactly `true` (go-restful's
/// `QueryParameter` reads the first; later repeats are ignored).
fn only_cpu_and_memory(query: Option<&str>) -> bool {
    query.unwrap_or_default().split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == "only_cpu_and_memory").then_some(v)
    }) == Some("true")
}

pub(super) async fn summary(State(v): State<Views>, RawQuery(q): RawQuery) -> Response {
    let Some(snap) = v.readings.get() else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal Error: failed to get node info: the metric advisor has not finished its first round",
        )
            .into_response();
    };
    let s = build_summary(&snap, &v.volumes, only_cpu_and_memory(q.as_deref()));
    ([(header::CONTENT_TYPE, "application/json")], pretty(&s)).into_response()
}

pub(super) async fn resource(State(v): State<Views>, headers: header::HeaderMap) -> Response {
    let summary = v
        .readings
        .get()
        .map(|snap| build_summary(&snap, &v.volumes, true));
    crate::metrics::exposition(
        &headers,
        TEXT_CONTENT_TYPE,
        render_resource_metrics(summary.as_ref()),
    )
}

/// kubelet's embedded cAdvisor's container metrics, from the same readings.
pub(super) async fn cadvisor(State(v): State<Views>, headers: header::HeaderMap) -> Response {
    let snap = v.readings.get();
    let (cgroups, machine) = (v.cgroups.clone(), v.machine.clone());
    // The scrape reads cgroup and proc files: off the async workers.
    let text = tokio::task::spawn_blocking(move || {
        scrape_cadvisor_metrics(snap.as_deref(), &cgroups, &machine)
    })
    .await;
    match text {
        Ok(text) => crate::metrics::exposition(&headers, TEXT_CONTENT_TYPE, text),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A v1 PodList of the running pods with only names, UIDs and containers' names and
/// images (kubelet's `ToAPIPod`), as the legacy codec writes it.
pub(super) async fn running_pods(State(v): State<Views>) -> Response {
    let items: Vec<serde_json::Value> = v
        .pod_cache
        .running()
        .iter()
        .map(|p| {
            let containers: Vec<serde_json::Value> = p
                .running_containers()
                .map(|c| serde_json::json!({"name": c.name, "image": c.image, "resources": {}}))
                .collect();
            serde_json::json!({
                "metadata": {"name": p.name, "namespace": p.namespace, "uid": p.uid, "creationTimestamp": null},
                "spec": {"containers": containers},
                "status": {},
            })
        })
        .collect();
    let items = if items.is_empty() {
        serde_json::Value::Null
    } else {
        items.into()
    };
    let body =
        serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

pub(super) async fn configz(State(v): State<Views>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        v.configz.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_value_exactly_true_selects_cpu_and_memory() {
        for q in [
            "only_cpu_and_memory=true",
            "a=b&only_cpu_and_memory=true",
            "only_cpu_and_memory=true&only_cpu_and_memory=false",
            "only_cpu_and_memory=true&only_cpu_and_memory=true",
        ] {
            assert!(only_cpu_and_memory(Some(q)), "{q}");
        }
        for q in [
            None,
            Some("only_cpu_and_memory=True"),
            Some("only_cpu_and_memory=1"),
            Some("only_cpu_and_memory=false&only_cpu_and_memory=true"),
            Some("only_cpu_and_memory"),
        ] {
            assert!(!only_cpu_and_memory(q), "{q:?}");
        }
    }

    #[test]
    fn json_is_pretty_with_one_space() {
        assert_eq!(
            String::from_utf8(pretty(&serde_json::json!({"a": [1]}))).unwrap(),
            "{\n \"a\": [\n  1\n ]\n}"
        );
    }
}
