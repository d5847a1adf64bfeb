//! The legacy container log symlinks, kubelet's `legacyLogSymlink`:
//! `/var/log/containers/<pod>_<namespace>_<container>-<containerID>.log` pointing at
//! the container's log under `--pod-logs-dir`. Log shippers (fluentd, fluent-bit,
//! promtail) still read that directory, so the link is made when a container has
//! started and removed with the container; the container GC removes links left
//! dangling (kubelet's `evictPodLogsDirectories`). The directory is
//! `--container-log-symlink-dir` (oxlet only; kubelet hardcodes it).
//!
//! That directory is shared with whatever else runs on the node, so oxlet only ever
//! removes an entry of it that is a symlink, whose name has this shape and whose
//! target lies below the pod logs dir: a link oxlet could have made.

use std::io;
use std::path::{Component, Path, PathBuf};

use k8s_cri::v1 as cri;
use tracing::{debug, info, warn};

use crate::cri::CriRead;
use crate::safe_path::PathError;

/// The links' suffix (kubelet's `legacyLogSuffix`).
const SUFFIX: &str = ".log";
/// Longest file name ext4 allows; kubelet truncates the name before the suffix to fit.
const MAX_FILE_NAME: usize = 255;
/// kubelet finds a container by an ID prefix of at least this many characters.
const MIN_ID_LEN: usize = 6;
/// Entries of the symlink directory looked at per GC pass (every input bounded).
const MAX_DIR_ENTRIES: usize = 16384;

/// Why a link was not made or not removed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SymlinkError {
    #[error("invalid legacy log symlink name: {0}")]
    Name(#[from] PathError),
    #[error("{target} is not below the pod logs dir {root}; no symlink to it")]
    Outside { target: PathBuf, root: PathBuf },
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Who a link is for: the pod's name and namespace, the container's name and ID.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkOf<'a> {
    pub pod: &'a str,
    pub namespace: &'a str,
    pub container: &'a str,
    pub id: &'a str,
}

/// kubelet's `logSymlink` file name: `<pod>_<ns>_<container>-<id>`, cut to fit 255
/// bytes with `.log` (at a character boundary, where kubelet cuts bytes).
pub(crate) fn link_name(of: LinkOf) -> String {
    let mut name = format!("{}_{}_{}-{}", of.pod, of.namespace, of.container, of.id);
    let mut max = MAX_FILE_NAME - SUFFIX.len();
    if name.len() > max {
        while !name.is_char_boundary(max) {
            max -= 1;
        }
        name.truncate(max);
    }
    name.push_str(SUFFIX);
    name
}

/// The container ID in a link name (kubelet's `getContainerIDFromLegacyLogSymlink`):
/// after the last `-`, before `.log`, at least 6 characters.
pub(crate) fn container_id_of(name: &str) -> Option<&str> {
    let id = name.rsplit('-').next()?.strip_suffix(SUFFIX)?;
    (id.len() >= MIN_ID_LEN).then_some(id)
}

/// Whether `target` is lexically strictly below `root` with no `..` (a link oxlet made
/// points at `<pod-logs-dir>/<ns>_<pod>_<uid>/<container>/<n>.log`).
fn below(root: &Path, target: &Path) -> bool {
    target.strip_prefix(root).is_ok_and(|rest| {
        rest.components().next().is_some()
            && rest.components().all(|c| matches!(c, Component::Normal(_)))
    })
}

/// Makes the link to `log` (kubelet: only when the log exists, else it would dangle
/// from the start). An existing entry of that name is left alone, as kubelet's
/// `os.Symlink` fails then.
pub(crate) fn create_log_link(
    dir: &Path,
    logs_root: &Path,
    of: LinkOf,
    log: &Path,
) -> Result<Option<PathBuf>, SymlinkError> {
    if !below(logs_root, log) {
        return Err(SymlinkError::Outside {
            target: log.to_path_buf(),
            root: logs_root.to_path_buf(),
        });
    }
    if std::fs::symlink_metadata(log).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        return Ok(None);
    }
    let link = crate::safe_path::beneath(dir, &[&link_name(of)])?;
    std::fs::create_dir_all(dir).map_err(|source| SymlinkError::Io {
        op: "create",
        path: dir.to_path_buf(),
        source,
    })?;
    std::os::unix::fs::symlink(log, &link).map_err(|source| SymlinkError::Io {
        op: "create symlink",
        path: link.clone(),
        source,
    })?;
    Ok(Some(link))
}

/// Removes `link` if it is one oxlet could have made (a symlink into the pod logs
/// dir); anything else there is not oxlet's and stays. Ok(false): nothing removed.
fn remove_link(dir: &Path, logs_root: &Path, link: &Path) -> Result<bool, SymlinkError> {
    let io = |op, source| SymlinkError::Io {
        op,
        path: link.to_path_buf(),
        source,
    };
    let target = match std::fs::read_link(link) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        // Not a symlink (EINVAL): not ours.
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Ok(false),
        Err(e) => return Err(io("read", e)),
    };
    if !below(logs_root, &target) {
        debug!(link = %link.display(), target = %target.display(), "not removing a log symlink that does not point into the pod logs dir");
        return Ok(false);
    }
    crate::safe_path::remove_beneath(dir, link).map_err(|e| io("remove", e))
}

/// Removes the link of a container that is being removed (kubelet's
/// `removeContainerLog`).
pub(crate) fn remove_log_link(
    dir: &Path,
    logs_root: &Path,
    of: LinkOf,
) -> Result<bool, SymlinkError> {
    let link = crate::safe_path::beneath(dir, &[&link_name(of)])?;
    remove_link(dir, logs_root, &link)
}

/// The container GC's pass over the directory (kubelet's `evictPodLogsDirectories`):
/// a link whose log is gone is removed unless its container is still there and not
/// exited (a running container's log is missing for a moment during rotation).
pub(crate) async fn remove_dangling_log_links(dir: &Path, logs_root: &Path, cri: &dyn CriRead) {
    let names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .take(MAX_DIR_ENTRIES)
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(SUFFIX))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot list the container log symlinks");
            return;
        }
    };
    for name in names {
        let link = dir.join(&name);
        // Follows the link: only a link whose log is gone.
        if !std::fs::metadata(&link).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
            continue;
        }
        if let Some(id) = container_id_of(&name) {
            match cri.container_status(id).await {
                Ok(st) if st.state != cri::ContainerState::ContainerExited as i32 => {
                    debug!(containerID = id, path = %link.display(), "container is still running, not removing its log symlink");
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    debug!(containerID = id, error = %e, "no status for the container of a dangling log symlink");
                }
            }
        }
        match remove_link(dir, logs_root, &link) {
            Ok(true) => info!(path = %link.display(), "removed dangling container log symlink"),
            Ok(false) => {}
            Err(e) => warn!(error = %e, "cannot remove dangling container log symlink"),
        }
    }
}

#[cfg(test)]
#[path = "symlinks_tests.rs"]
mod tests;
