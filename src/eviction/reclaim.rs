//! The seams between the eviction manager and what it calls to act before evicting
//! (issue 12): node-level disk reclaim (dead containers, unused images) and the
//! kernel's memory threshold notification. The manager holds trait objects, so its
//! unit tests run on fakes and the real implementations live with what they drive
//! (the runtime's GC, the cgroup filesystem).

use futures::future::BoxFuture;

/// What one reclaim step freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    /// Bytes freed on the filesystem the step works on, as far as it can tell.
    pub bytes: u64,
    /// Objects removed (containers or images).
    pub removed: usize,
}

/// Why a reclaim step failed (the manager logs it and goes on to the next step).
#[derive(Debug, thiserror::Error)]
#[error("{step}: {message}")]
pub(crate) struct ReclaimError {
    pub step: &'static str,
    pub message: String,
}

/// Which filesystem a disk reclaim step frees space on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskTarget {
    /// The filesystem of `--root-dir` (`nodefs`).
    NodeFs,
    /// The runtime's image filesystem (`imagefs`).
    ImageFs,
}

/// One node-level disk reclaim step, as kubelet's `deleteTerminatedContainers` and
/// `deleteUnusedImages` (its `nodeReclaimFunc`s).
pub(crate) trait DiskReclaimer: Send + Sync {
    /// The step's name for the log (`deleteTerminatedContainers`, `deleteUnusedImages`).
    fn name(&self) -> &'static str;
    /// The filesystems it frees space on.
    fn targets(&self) -> &'static [DiskTarget];
    /// Runs the step now: removes everything it may (kubelet frees all it can here,
    /// not a number of bytes).
    fn reclaim(&self) -> BoxFuture<'_, Result<Reclaimed, ReclaimError>>;
}

/// The kernel's notification that memory usage crossed a threshold (kubelet's
/// `kernelMemcgNotification`), so memory pressure is seen between the manager's ticks.
pub(crate) trait ThresholdNotifier: Send + Sync {
    /// Arms the notification at `usage_bytes` of the watched cgroup (replacing the last).
    fn set_threshold(&self, usage_bytes: u64) -> Result<(), ReclaimError>;
    /// Resolves when the threshold was crossed since the last call.
    fn crossed(&self) -> BoxFuture<'_, ()>;
}
