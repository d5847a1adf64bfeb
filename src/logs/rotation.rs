//! Container log rotation: kubelet's container log manager
//! (`pkg/kubelet/logs/container_log_manager.go`).
//!
//! containerd appends a container's output to one file for as long as it runs; without
//! rotation a chatty container fills the node's disk. Every `containerLogMonitorInterval`
//! this task lists the running containers and, for each whose current log has reached
//! `containerLogMaxSize`, does what kubelet does, in its order:
//! 1. removes leftovers of an earlier failed rotation (`*.tmp`, and an uncompressed file
//!    whose `.gz` exists);
//! 2. removes the oldest rotated files so that at most `maxFiles - 2` remain (the
//!    file about to be rotated and the new current one make `maxFiles`);
//! 3. gzips every remaining rotated file that is not compressed yet;
//! 4. renames the current log to `<log>.<YYYYMMDD-hhmmss>` (left uncompressed, so a
//!    reader following it can finish) and asks the runtime to reopen the log
//!    (`ReopenContainerLog`); if that fails the file is renamed back, to be tried again
//!    next round.
//!
//! The log path of each running container is asked once (`ContainerStatus`) and kept
//! while the container runs: the runtime fixes it at `CreateContainer` and never moves
//! it. kubelet asks again every pass; at 110 pods that is 11 status calls a second
//! for answers that cannot change.
//!
//! A log path comes from the runtime, not from oxlet's own state: every file touched
//! must lie in a directory strictly below `--pod-logs-dir` once its symlinks are
//! resolved, files are opened without following a final symlink, and removals go
//! through [`crate::safe_path::remove_beneath`]. One container's failure is logged and
//! never stops the others or the task.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_cri::v1 as cri;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cri::Cri;
use crate::cri::CriError;

/// Suffix of a compressed rotated log (kubelet's `compressSuffix`).
const COMPRESS_SUFFIX: &str = ".gz";
/// Suffix of a file being compressed (kubelet's `tmpSuffix`).
const TMP_SUFFIX: &str = ".tmp";
/// The rotated log's timestamp suffix, kubelet's `20060102-150405` (local time).
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";
/// Directory entries looked at per container log directory: oxlet writes a handful
/// there, so a directory with more is not walked further (every input bounded).
const MAX_DIR_ENTRIES: usize = 4096;

/// Why a container's log could not be rotated or removed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogError {
    #[error("container log {path} is not in a directory below the pod logs dir {root}")]
    Outside { path: PathBuf, root: PathBuf },
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot get the status of container {id}: {source}")]
    Status {
        id: String,
        #[source]
        source: CriError,
    },
    #[error("failed to reopen the log of container {id}: {source}")]
    Reopen {
        id: String,
        #[source]
        source: CriError,
    },
    #[error("compression task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |source| LogError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// kubelet's `LogRotatePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RotatePolicy {
    /// Bytes the current log may reach before it is rotated.
    pub max_size: u64,
    /// Files kept per container, the current log included (at least 2).
    pub max_files: usize,
}

impl RotatePolicy {
    /// The policy from the settings; None when `max_size` is negative (kubelet's stub
    /// manager: no rotation).
    pub(crate) fn new(max_size: i64, max_files: usize) -> Option<Self> {
        Some(RotatePolicy {
            max_size: u64::try_from(max_size).ok()?,
            max_files: max_files.max(2),
        })
    }
}

/// A container log path from the runtime, checked to be a plain file name in a
/// directory strictly below the pod logs dir. The directory is the resolved one, so
/// later operations do not go through a symlink that pointed elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogPath {
    dir: PathBuf,
    name: OsString,
}

impl LogPath {
    pub(crate) fn check(root: &Path, log: &Path) -> Result<LogPath, LogError> {
        let outside = || LogError::Outside {
            path: log.to_path_buf(),
            root: root.to_path_buf(),
        };
        let (Some(parent), Some(name)) = (log.parent(), log.file_name()) else {
            return Err(outside());
        };
        if !log.is_absolute() || crate::safe_path::component(&name.to_string_lossy()).is_err() {
            return Err(outside());
        }
        let root = std::fs::canonicalize(root).map_err(io_err("resolve", root))?;
        let dir = std::fs::canonicalize(parent).map_err(io_err("resolve", parent))?;
        if dir == root || !dir.starts_with(&root) {
            return Err(outside());
        }
        Ok(LogPath {
            dir,
            name: name.to_os_string(),
        })
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// Names in the directory that start with `<name><sep>` (kubelet globs `<log>.*` for
    /// rotated files and `<log>*` when cleaning), sorted.
    fn siblings(&self, sep: &str) -> Result<Vec<String>, LogError> {
        let prefix = format!("{}{sep}", self.name.to_string_lossy());
        let entries = std::fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))?;
        let mut names: Vec<String> = entries
            .take(MAX_DIR_ENTRIES)
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Removes one file of this directory (as a link if it is one).
    fn remove(&self, root: &Path, name: &str) -> Result<(), LogError> {
        let path = self.dir.join(name);
        crate::safe_path::remove_beneath(root, &path)
            .map(drop)
            .map_err(io_err("remove", &path))
    }
}

/// Rotated files that are still in use and those left over from a failed rotation
/// (kubelet's `filterUnusedLogs`): temporary files are unused, compressed files are in
/// use, and an uncompressed file whose `.gz` exists was already compressed.
pub(crate) fn split_unused(names: &[String]) -> (Vec<String>, Vec<String>) {
    names.iter().cloned().partition(|n| {
        if n.ends_with(TMP_SUFFIX) {
            return false;
        }
        n.ends_with(COMPRESS_SUFFIX) || !names.contains(&format!("{n}{COMPRESS_SUFFIX}"))
    })
}

/// Of the rotated files (sorted oldest first), those beyond the newest
/// `max_files - 2` (kubelet's `removeExcessLogs`).
pub(crate) fn excess(sorted: &[String], max_files: usize) -> &[String] {
    let keep = max_files.saturating_sub(2);
    &sorted[..sorted.len().saturating_sub(keep)]
}

/// Steps 1–3 of a rotation (blocking file I/O): cleanup, excess removal, compression.
fn prepare(root: &Path, log: &LogPath, policy: RotatePolicy) -> Result<(), LogError> {
    let names = log.siblings(".")?;
    let (in_use, unused) = split_unused(&names);
    for n in &unused {
        log.remove(root, n)?;
    }
    let excess = excess(&in_use, policy.max_files);
    for n in excess {
        log.remove(root, n)?;
    }
    for n in &in_use[excess.len()..] {
        if !n.ends_with(COMPRESS_SUFFIX) {
            compress(root, log, n)?;
        }
    }
    Ok(())
}

/// Gzips `name` as kubelet does: into `name.tmp`, renamed to `name.gz`, then `name`
/// removed. Only a regular file is read (never through a
/// symlink); the temporary file is removed whatever happens.
fn compress(root: &Path, log: &LogPath, name: &str) -> Result<(), LogError> {
    let src = log.dir.join(name);
    let tmp = log.dir.join(format!("{name}{TMP_SUFFIX}"));
    let res = (|| {
        let mut r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&src)
            .map_err(io_err("open", &src))?;
        let meta = r.metadata().map_err(io_err("stat", &src))?;
        if !meta.is_file() {
            return Err(io_err("compress", &src)(io::Error::other(
                "not a regular file",
            )));
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .mode(meta.permissions().mode() & 0o777)
            .open(&tmp)
            .map_err(io_err("create", &tmp))?;
        let mut w = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        io::copy(&mut r, &mut w).map_err(io_err("compress", &src))?;
        w.finish().map_err(io_err("write", &tmp))?;
        let gz = log.dir.join(format!("{name}{COMPRESS_SUFFIX}"));
        std::fs::rename(&tmp, &gz).map_err(io_err("rename", &tmp))?;
        log.remove(root, name)
    })();
    if res.is_err() {
        let _ = crate::safe_path::remove_beneath(root, &tmp);
    }
    res
}

/// Removes a container's log and every rotated file of it (kubelet's `Clean`, which
/// globs `<log>*`), when the container is removed. Returns how many were removed.
pub(crate) fn remove_container_logs(root: &Path, log: &Path) -> Result<usize, LogError> {
    let log = match LogPath::check(root, log) {
        Ok(l) => l,
        // The pod's log directory is gone already: nothing left to remove.
        Err(LogError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    let names = log.siblings("")?;
    for n in &names {
        log.remove(root, n)?;
    }
    Ok(names.len())
}

/// The periodic rotation task (kubelet's `containerLogManager`).
pub(crate) struct LogManager {
    cri: Arc<dyn Cri>,
    /// `--pod-logs-dir`: nothing outside it is touched.
    root: PathBuf,
    policy: RotatePolicy,
    workers: usize,
    interval: Duration,
    /// Each running container's log path, as its runtime reported it.
    log_paths: Mutex<HashMap<String, String>>,
}

impl LogManager {
    /// Running containers whose log path is kept (the census).
    pub(crate) fn kept_paths(&self) -> usize {
        self.log_paths.locked().len()
    }

    pub(crate) fn new(
        cri: Arc<dyn Cri>,
        root: PathBuf,
        policy: RotatePolicy,
        workers: usize,
        interval: Duration,
    ) -> Self {
        LogManager {
            cri,
            root,
            policy,
            workers: workers.max(1),
            interval,
            log_paths: Mutex::default(),
        }
    }

    /// Checks every interval until cancelled; a failed pass is logged and the next
    /// one comes at the next tick.
    pub(crate) async fn run(&self, cancel: CancellationToken) {
        info!(workers = self.workers, monitorPeriod = %crate::duration::format_go_duration(self.interval), maxSize = self.policy.max_size, maxFiles = self.policy.max_files, "initializing container log rotate workers");
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.rotate_logs().await {
                warn!(error = %e, "failed to rotate container logs");
            }
        }
    }

    /// One pass over the running containers (kubelet's `rotateLogs`; non-running
    /// containers write nothing more, so an empty newest log would only waste a file).
    pub(crate) async fn rotate_logs(&self) -> Result<(), CriError> {
        let running = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                state: Some(cri::ContainerStateValue {
                    state: cri::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }))
            .await?;
        self.paths()
            .retain(|id, _| running.iter().any(|c| c.id == *id));
        futures::stream::iter(running)
            .for_each_concurrent(self.workers, |c| async move {
                if let Err(e) = self.process_container(&c.id).await {
                    warn!(containerID = %c.id, error = %e, "failed to rotate log for container");
                }
            })
            .await;
        Ok(())
    }

    /// kubelet's `processContainer`: stat the current log (reopening it when it is
    /// missing), and rotate it once it has reached the maximum size.
    async fn process_container(&self, id: &str) -> Result<(), LogError> {
        let log_path = self.log_path(id).await?;
        if log_path.is_empty() {
            return Ok(());
        }
        let log = LogPath::check(&self.root, Path::new(&log_path))?;
        let path = log.path();
        let size = match std::fs::symlink_metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.reopen(id).await?;
                std::fs::symlink_metadata(&path)
                    .map_err(io_err("stat after reopen", &path))?
                    .len()
            }
            Err(e) => return Err(io_err("stat", &path)(e)),
        };
        if size < self.policy.max_size {
            return Ok(());
        }
        debug!(containerID = %id, path = %path.display(), size, maxSize = self.policy.max_size, "rotating container log");
        let (root, l, policy) = (self.root.clone(), log.clone(), self.policy);
        tokio::task::spawn_blocking(move || prepare(&root, &l, policy)).await??;
        self.rotate_latest(id, &log).await
    }

    fn paths(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.log_paths.locked()
    }

    /// The container's log path: kept from an earlier pass, or asked of the runtime.
    async fn log_path(&self, id: &str) -> Result<String, LogError> {
        if let Some(p) = self.paths().get(id) {
            return Ok(p.clone());
        }
        let status = self
            .cri
            .container_status(id)
            .await
            .map_err(|source| LogError::Status {
                id: id.to_string(),
                source,
            })?;
        self.paths().insert(id.to_string(), status.log_path.clone());
        Ok(status.log_path)
    }

    /// kubelet's `rotateLatestLog`: rename, reopen, and rename back if the reopen fails.
    async fn rotate_latest(&self, id: &str, log: &LogPath) -> Result<(), LogError> {
        let path = log.path();
        let stamp = jiff::Zoned::now().strftime(TIMESTAMP_FORMAT).to_string();
        let rotated = log
            .dir
            .join(format!("{}.{stamp}", log.name.to_string_lossy()));
        std::fs::rename(&path, &rotated).map_err(io_err("rotate", &path))?;
        if let Err(e) = self.reopen(id).await {
            // If oxlet stops right here the log is kept under its rotated name only.
            if let Err(re) = std::fs::rename(&rotated, &path) {
                warn!(containerID = %id, rotated = %rotated.display(), log = %path.display(), error = %re, "failed to rename rotated log back");
            }
            return Err(e);
        }
        Ok(())
    }

    async fn reopen(&self, id: &str) -> Result<(), LogError> {
        self.cri
            .reopen_container_log(id)
            .await
            .map_err(|source| LogError::Reopen {
                id: id.to_string(),
                source,
            })
    }
}

#[cfg(test)]
#[path = "rotation_tests.rs"]
mod tests;
