//! `/containerLogs/{namespace}/{pod}/{container}`: what `kubectl logs` reads through
//! the apiserver, with kubelet's query (`follow`, `previous`, `tailLines`,
//! `sinceSeconds`, `sinceTime`, `timestamps`, `limitBytes`) and its refusals.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use k8s_openapi::api::core::v1::Pod;

use crate::kuberuntime::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::logs::LogOptions;
use crate::pod::{PodManager, pod_uid};

/// What the handler reads.
#[derive(Clone)]
pub(crate) struct ContainerLogs {
    pub pods: Arc<PodManager>,
    pub pod_cache: Arc<crate::pleg::PodCache>,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
}

fn refuse(code: StatusCode, msg: String) -> Response {
    (code, msg).into_response()
}

/// kubelet's `PodLogOptions` from the query, validated as kubelet validates it.
fn options(q: &[(String, String)]) -> Result<(LogOptions, bool), String> {
    let get = |k: &str| {
        q.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let boolean = |k: &str| match get(k) {
        None | Some("") => Ok(false),
        Some(v) => crate::options::parse_go_bool(v)
            .ok_or_else(|| format!("{k}: invalid value {v:?}: must be true or false")),
    };
    let int = |k: &str| -> Result<Option<i64>, String> {
        get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("{k}: invalid value {v:?}: must be an integer"))
            })
            .transpose()
    };
    let tail = int("tailLines")?;
    let limit = int("limitBytes")?;
    let since_seconds = int("sinceSeconds")?;
    let since_time = get("sinceTime").filter(|v| !v.is_empty());
    if tail.is_some_and(|n| n < 0) {
        return Err("tailLines: Invalid value: must be greater than or equal to 0".into());
    }
    if limit.is_some_and(|n| n < 1) {
        return Err("limitBytes: Invalid value: must be greater than 0".into());
    }
    if since_seconds.is_some_and(|n| n < 1) {
        return Err("sinceSeconds: Invalid value: must be greater than 0".into());
    }
    if since_seconds.is_some() && since_time.is_some() {
        return Err("at most one of sinceTime or sinceSeconds may be specified".into());
    }
    let since_nanos = match (since_seconds, since_time) {
        (Some(s), _) => {
            Some(jiff::Timestamp::now().as_nanosecond() - i128::from(s) * 1_000_000_000)
        }
        (_, Some(t)) => Some(
            t.parse::<jiff::Timestamp>()
                .map_err(|e| format!("sinceTime: invalid value {t:?}: {e}"))?
                .as_nanosecond(),
        ),
        _ => None,
    };
    let opts = LogOptions {
        tail: tail.map(|n| n as u64),
        since_nanos,
        limit_bytes: limit.map(|n| n as u64),
        timestamps: boolean("timestamps")?,
        follow: boolean("follow")?,
    };
    Ok((opts, boolean("previous")?))
}

/// Whether the pod's spec has a container (of any kind) named `name`.
pub(super) fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || (spec.init_containers.iter().flatten()).any(|c| c.name == name)
        || (spec.ephemeral_containers.iter().flatten()).any(|c| c.name == name)
}

/// `GET /containerLogs/{namespace}/{pod}/{container}`.
pub(crate) async fn container_logs(
    State(s): State<ContainerLogs>,
    Path((ns, name, container)): Path<(String, String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let (opts, previous) = match options(&q) {
        Ok(o) => o,
        Err(e) => return refuse(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let Some(pod) = s.pods.get_by_name(&ns, &name) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("pod {name:?} does not exist"),
        );
    };
    if !has_container(&pod, &container) {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {name:?}"),
        );
    }
    let uid = pod_uid(&pod).to_string();
    let status = s.pod_cache.get(&uid);
    let instance = status.as_ref().and_then(|st| match previous {
        true => st.previous(&container).cloned(),
        false => current_instance(st, &container).cloned(),
    });
    let Some(instance) = instance else {
        let msg = match previous {
            true => {
                format!("previous terminated container {container:?} in pod {name:?} not found")
            }
            false => format!(
                "container {container:?} in pod {name:?} is waiting to start: ContainerCreating"
            ),
        };
        return refuse(StatusCode::BAD_REQUEST, msg);
    };
    let file = crate::pod::pod_log_dir(&s.pod_logs_dir, &ns, &name, &uid)
        .and_then(|dir| crate::logs::container_log_file(&dir, &container, instance.restart_count));
    let file = match file {
        Ok(f) => f,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e.to_string()),
    };
    stream_file(s, file, opts, uid, instance.id).await
}

/// The instance whose log a request without `previous` reads, as kubelet's
/// `validateContainerLogStatus` picks it: the newest one once it has started; while the
/// newest is only created (a restart under way), the last one that ran; none while the
/// first has not started.
fn current_instance<'a>(st: &'a PodRuntimeStatus, container: &str) -> Option<&'a ContainerStatus> {
    let latest = st.latest(container)?;
    let started = matches!(
        latest.state,
        ContainerState::Running | ContainerState::Exited
    );
    if started {
        return Some(latest);
    }
    st.previous(container)
}

/// Streams the file from a blocking thread; a followed one until its container stops.
async fn stream_file(
    s: ContainerLogs,
    file: PathBuf,
    opts: LogOptions,
    uid: String,
    container_id: String,
) -> Response {
    if let Err(e) = std::fs::metadata(&file) {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "failed to open log file {:?}: {e}",
                file.display().to_string()
            ),
        );
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let cache = s.pod_cache.clone();
    tokio::task::spawn_blocking(move || {
        let running = || {
            cache.get(&uid).is_some_and(|st| {
                st.containers
                    .iter()
                    .any(|c| c.id == container_id && c.state == ContainerState::Running)
            })
        };
        if let Err(e) = crate::logs::read_logs(&file, &opts, &tx, &running) {
            tracing::debug!(file = %file.display(), error = %e, "reading a container log ended");
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    });
    (
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_under_way_serves_the_instance_that_ran() {
        let c = |id: &str, state| ContainerStatus::for_test(id, "main", state);
        let status = |cs: Vec<ContainerStatus>| PodRuntimeStatus {
            containers: cs,
            ..Default::default()
        };
        let id = |st: &PodRuntimeStatus| current_instance(st, "main").map(|c| c.id.clone());
        let restarting = status(vec![
            c("two", ContainerState::Created),
            c("one", ContainerState::Exited),
        ]);
        assert_eq!(id(&restarting).as_deref(), Some("one"));
        let restarted = status(vec![
            c("two", ContainerState::Running),
            c("one", ContainerState::Exited),
        ]);
        assert_eq!(id(&restarted).as_deref(), Some("two"));
        let exited = status(vec![c("one", ContainerState::Exited)]);
        assert_eq!(id(&exited).as_deref(), Some("one"));
        assert_eq!(id(&status(vec![c("one", ContainerState::Created)])), None);
    }

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn the_query_is_validated_as_kubelet_validates_it() {
        let (o, prev) = options(&q(&[
            ("tailLines", "5"),
            ("timestamps", "true"),
            ("previous", "1"),
        ]))
        .unwrap();
        assert_eq!((o.tail, o.timestamps, prev), (Some(5), true, true));
        assert!(
            options(&q(&[("tailLines", "-1")]))
                .unwrap_err()
                .contains("tailLines")
        );
        assert!(
            options(&q(&[("limitBytes", "0")]))
                .unwrap_err()
                .contains("limitBytes")
        );
        assert!(
            options(&q(&[
                ("sinceSeconds", "5"),
                ("sinceTime", "2026-01-01T00:00:00Z")
            ]))
            .unwrap_err()
            .contains("at most one")
        );
        assert!(
            options(&q(&[("follow", "yes")]))
                .unwrap_err()
                .contains("follow")
        );
        let (o, _) = options(&q(&[("sinceTime", "2026-01-01T00:00:00Z")])).unwrap();
        assert!(o.since_nanos.is_some());
    }
}
