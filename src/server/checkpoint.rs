//! `POST /checkpoint/{namespace}/{pod}/{container}`: kubelet's container checkpoint
//! (the `ContainerCheckpoint` feature, on by default since 1.30). The runtime writes
//! the running container's checkpoint to
//! `<root-dir>/checkpoints/checkpoint-<pod>_<namespace>-<container>-<RFC 3339 time>.tar`
//! (the directory root's alone), and the answer names that file. A runtime without
//! checkpointing (containerd 1.6 and 1.7 answer Unimplemented; 2.x needs CRIU)
//! answers with its error, relayed as kubelet relays it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::cri::Cri;
use crate::pod::PodManager;

/// What the checkpoint handler needs.
#[derive(Clone)]
pub(crate) struct Checkpoints {
    pub pods: Arc<PodManager>,
    pub pod_cache: Arc<crate::pleg::PodCache>,
    pub cri: Arc<dyn Cri>,
    /// `<root-dir>/checkpoints`.
    pub dir: PathBuf,
}

/// kubelet's archive name: the pod's full name (`name_namespace`), the container,
/// and the time as Go's RFC 3339 writes it in UTC.
fn archive_name(pod: &str, ns: &str, container: &str, now: jiff::Timestamp) -> String {
    let at = now.strftime("%Y-%m-%dT%H:%M:%SZ");
    format!("checkpoint-{pod}_{ns}-{container}-{at}.tar")
}

/// The `timeout` query parameter (seconds, the last one given); None without one.
fn timeout_of(pairs: &[(String, String)]) -> Result<Option<i64>, ()> {
    let last = pairs.iter().rfind(|(k, _)| k == "timeout");
    last.map(|(_, v)| v.parse::<i64>().map_err(|_| ()))
        .transpose()
}

/// The handler, with kubelet's answers: 404 for an unknown pod or container (and,
/// as kubelet has it, for a `timeout` that is not a number), 500 with the runtime's
/// reason when the checkpoint fails, 200 `{"items":["<archive>"]}` when it is written.
pub(crate) async fn checkpoint(
    State(s): State<Checkpoints>,
    Path((ns, name, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let Some(pod) = s.pods.get_by_name(&ns, &name) else {
        return super::plain_text(StatusCode::NOT_FOUND, "pod does not exist".into());
    };
    if !super::container_logs::has_container(&pod, &container) {
        let msg = format!("container {container} does not exist");
        return super::plain_text(StatusCode::NOT_FOUND, msg);
    }
    let Ok(timeout) = timeout_of(&query) else {
        let msg = "cannot parse value of timeout parameter".to_string();
        return super::plain_text(StatusCode::NOT_FOUND, msg);
    };
    let failed = |why: String| {
        let msg = format!("checkpointing of {ns}/{name}/{container} failed ({why})");
        tracing::warn!(
            pod = format!("{ns}/{name}"),
            container,
            reason = why,
            "container checkpoint failed"
        );
        super::plain_text(StatusCode::INTERNAL_SERVER_ERROR, msg)
    };
    let timeout = match timeout {
        Some(t) if t < 0 => {
            return failed("CheckpointContainer requires the timeout value to be > 0".into());
        }
        Some(0) | None => None,
        Some(t) => Some(Duration::from_secs(t.unsigned_abs())),
    };
    let Some(id) = super::streaming::running_container_id(&s.pod_cache, &pod, &container) else {
        return failed(format!("container {container} not found"));
    };
    if let Err(e) = make_private_dir(&s.dir) {
        return failed(format!("cannot create {}: {e}", s.dir.display()));
    }
    let location = s
        .dir
        .join(archive_name(&name, &ns, &container, jiff::Timestamp::now()));
    let location = location.to_string_lossy().into_owned();
    if let Err(e) = s.cri.checkpoint_container(&id, &location, timeout).await {
        return failed(e.to_string());
    }
    tracing::info!(
        pod = format!("{ns}/{name}"),
        container,
        archive = location,
        "checkpointed a container"
    );
    let body = serde_json::json!({ "items": [location] }).to_string();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The checkpoints directory, root's alone (kubelet makes it 0700): an archive
/// holds the container's memory.
fn make_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_and_the_timeout_are_kubelets() {
        let at: jiff::Timestamp = "2026-11-27T10:04:05.5Z".parse().unwrap();
        assert_eq!(
            archive_name("web", "default", "app", at),
            "checkpoint-web_default-app-2026-11-27T10:04:05Z.tar"
        );
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            (pairs.iter())
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect()
        };
        assert_eq!(timeout_of(&[]), Ok(None));
        assert_eq!(timeout_of(&q(&[("timeout", "5")])), Ok(Some(5)));
        // The last value counts, as kubelet reads it.
        assert_eq!(
            timeout_of(&q(&[("timeout", "5"), ("timeout", "9")])),
            Ok(Some(9))
        );
        assert_eq!(timeout_of(&q(&[("timeout", "soon")])), Err(()));
        assert_eq!(timeout_of(&q(&[("other", "1")])), Ok(None));
    }

    #[test]
    fn the_directory_is_roots_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("checkpoints");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        make_private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
