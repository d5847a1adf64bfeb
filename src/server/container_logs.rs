//! `/containerLogs/{namespace}/{pod}/{container}`: what `kubectl logs` reads through
//! the apiserver, with kubelet's query (`follow`, `previous`, `tailLines`,
//! `sinceSeconds`, `sinceTime`, `timestamps`, `limitBytes`) and its refusals.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::conn::{ConnInfo, IdleGuard};
use crate::kuberuntime::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::logs::{Follow, LogOptions, LogReader, LogWatch};
use crate::pod::{PodManager, pod_uid};

/// The most followed logs served at once. Each costs no thread, one descriptor, a
/// read buffer while it reads and its connection's TLS buffers (at most 256 KiB for a
/// client that stops reading): about 300 MiB at worst for all of them, where a few
/// hundred threads held the blocking pool before. kubelet has no such cap.
pub(crate) const MAX_FOLLOWED_LOGS: usize = 1024;

/// What the handler reads.
#[derive(Clone)]
pub(crate) struct ContainerLogs {
    pub pods: Arc<PodManager>,
    pub pod_cache: Arc<crate::pleg::PodCache>,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// What followed logs share: the inotify watcher and the cap.
    pub follows: Arc<Follows>,
}

/// What followed logs share.
pub(crate) struct Follows {
    watch: Arc<LogWatch>,
    slots: Arc<Semaphore>,
    max: usize,
    /// `streamingConnectionIdleTimeout`: a followed log that sent nothing for this
    /// long is closed (kubelet keeps such a response for its 4 h write timeout).
    idle_timeout: Duration,
}

impl Follows {
    pub(crate) fn new(max: usize, idle_timeout: Duration) -> Arc<Follows> {
        let f = Arc::new(Follows {
            watch: LogWatch::new(),
            slots: Arc::new(Semaphore::new(max)),
            max,
            idle_timeout,
        });
        crate::census::watch("server.followedLogs", &f, |f| {
            f.max - f.slots.available_permits()
        });
        f
    }

    /// A slot for one more followed log, or kube-apiserver's answer to too many
    /// requests in flight (429, `Retry-After: 1`, which client-go waits on).
    fn admit(&self) -> Result<OwnedSemaphorePermit, TooMany> {
        (self.slots.clone().try_acquire_owned()).map_err(|_| TooMany(self.max))
    }
}

/// The refusal past [`MAX_FOLLOWED_LOGS`].
#[derive(Debug)]
struct TooMany(usize);

impl IntoResponse for TooMany {
    fn into_response(self) -> Response {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            format!(
                "too many followed log streams on this node (at most {}); try again later",
                self.0
            ),
        )
            .into_response()
    }
}

fn refuse(code: StatusCode, msg: String) -> Response {
    (code, msg).into_response()
}

/// Why a log request's options are refused (a 422), worded as before.
#[derive(Debug, thiserror::Error)]
enum LogOptionsError {
    #[error("{0}: invalid value {1:?}: must be true or false")]
    NotBool(String, String),
    #[error("{0}: invalid value {1:?}: must be an integer")]
    NotInt(String, String),
    #[error("tailLines: Invalid value: must be greater than or equal to 0")]
    NegativeTail,
    #[error("limitBytes: Invalid value: must be greater than 0")]
    LimitBytes,
    #[error("sinceSeconds: Invalid value: must be greater than 0")]
    SinceSeconds,
    #[error("at most one of sinceTime or sinceSeconds may be specified")]
    BothSince,
    #[error("sinceTime: invalid value {0:?}: {1}")]
    SinceTime(String, jiff::Error),
}

/// kubelet's `PodLogOptions` from the query, validated as kubelet validates it.
fn options(q: &[(String, String)]) -> Result<(LogOptions, bool), LogOptionsError> {
    let get = |k: &str| {
        q.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let boolean = |k: &str| match get(k) {
        None | Some("") => Ok(false),
        Some(v) => crate::options::parse_go_bool(v)
            .ok_or_else(|| LogOptionsError::NotBool(k.into(), v.into())),
    };
    let int = |k: &str| -> Result<Option<i64>, LogOptionsError> {
        get(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| LogOptionsError::NotInt(k.into(), v.into()))
            })
            .transpose()
    };
    let tail = int("tailLines")?;
    let limit = int("limitBytes")?;
    let since_seconds = int("sinceSeconds")?;
    let since_time = get("sinceTime").filter(|v| !v.is_empty());
    if tail.is_some_and(|n| n < 0) {
        return Err(LogOptionsError::NegativeTail);
    }
    if limit.is_some_and(|n| n < 1) {
        return Err(LogOptionsError::LimitBytes);
    }
    if since_seconds.is_some_and(|n| n < 1) {
        return Err(LogOptionsError::SinceSeconds);
    }
    if since_seconds.is_some() && since_time.is_some() {
        return Err(LogOptionsError::BothSince);
    }
    let since_nanos = match (since_seconds, since_time) {
        (Some(s), _) => {
            Some(jiff::Timestamp::now().as_nanosecond() - i128::from(s) * 1_000_000_000)
        }
        (_, Some(t)) => Some(
            t.parse::<jiff::Timestamp>()
                .map_err(|e| LogOptionsError::SinceTime(t.into(), e))?
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
    conn: Option<axum::Extension<ConnInfo>>,
) -> Response {
    let (opts, previous) = match options(&q) {
        Ok(o) => o,
        Err(e) => return refuse(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
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
    let target = Target {
        ns,
        name,
        container,
        uid,
        container_id: instance.id,
    };
    stream_file(s, file, opts, target, conn.map(|c| c.0)).await
}

/// Whose log a request reads, for the followed log's checks and log lines.
struct Target {
    ns: String,
    name: String,
    container: String,
    uid: String,
    container_id: String,
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

/// Streams the file; a followed one until its container stops, holding a slot under
/// [`MAX_FOLLOWED_LOGS`] and its connection under the streaming idle timeout.
async fn stream_file(
    s: ContainerLogs,
    file: PathBuf,
    opts: LogOptions,
    t: Target,
    conn: Option<ConnInfo>,
) -> Response {
    let mut held = None;
    if opts.follow {
        let slot = match s.follows.admit() {
            Ok(slot) => slot,
            Err(answer) => {
                tracing::info!(namespace = %t.ns, pod = %t.name, container = %t.container, max = s.follows.max, "refusing a followed log: too many followed at once");
                return answer.into_response();
            }
        };
        let idle = conn.map(|c| c.idle.stream(s.follows.idle_timeout, "followed log"));
        held = Some((slot, idle));
    }
    let follow = opts.follow.then(|| {
        let (cache, uid, id) = (s.pod_cache.clone(), t.uid.clone(), t.container_id.clone());
        Follow {
            running: Box::new(move || {
                cache.get(&uid).is_some_and(|st| {
                    (st.containers.iter()).any(|c| c.id == id && c.state == ContainerState::Running)
                })
            }),
            watch: s.follows.watch.clone(),
            root: s.pod_logs_dir.clone(),
        }
    });
    // The open reads the file's end backwards for tailLines: a brief blocking call
    // that ends on its own (it waits on the disk, never on the client).
    let root = s.pod_logs_dir.clone();
    let opened =
        tokio::task::spawn_blocking(move || LogReader::open(&root, &file, opts, follow)).await;
    let reader = match opened {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return refuse(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let body = LogBody { reader, t, held };
    let stream = futures::stream::unfold(body, |mut b| async move {
        let chunk = b.reader.next().await?;
        Some((Ok::<_, std::io::Error>(chunk), b))
    });
    (
        [(header::CONTENT_TYPE, "text/plain")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

/// A log response's state; a followed one says at `-v=2` why it ended.
struct LogBody {
    reader: LogReader,
    t: Target,
    held: Option<(OwnedSemaphorePermit, Option<IdleGuard>)>,
}

impl Drop for LogBody {
    fn drop(&mut self) {
        if self.held.is_none() {
            return;
        }
        let t = &self.t;
        let why = match self.reader.ended() {
            Some(e) => e.to_string(),
            None => "the client went away or the connection was closed".to_string(),
        };
        tracing::info!(namespace = %t.ns, pod = %t.name, container = %t.container, reason = %why, "a followed container log ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followed_logs_past_the_cap_get_429_until_one_ends() {
        let f = Follows::new(2, Duration::from_secs(1));
        let a = f.admit().unwrap();
        let _b = f.admit().unwrap();
        let refused = f.admit().unwrap_err().into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        drop(a);
        assert!(f.admit().is_ok(), "an ended follow gives its slot back");
    }

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
                .to_string()
                .contains("tailLines")
        );
        assert!(
            options(&q(&[("limitBytes", "0")]))
                .unwrap_err()
                .to_string()
                .contains("limitBytes")
        );
        assert!(
            options(&q(&[
                ("sinceSeconds", "5"),
                ("sinceTime", "2026-01-01T00:00:00Z")
            ]))
            .unwrap_err()
            .to_string()
            .contains("at most one")
        );
        assert!(
            options(&q(&[("follow", "yes")]))
                .unwrap_err()
                .to_string()
                .contains("follow")
        );
        let (o, _) = options(&q(&[("sinceTime", "2026-01-01T00:00:00Z")])).unwrap();
        assert!(o.since_nanos.is_some());
    }
}
