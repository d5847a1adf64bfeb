//! Node-level disk reclaim, the step the eviction manager takes before it evicts a
//! pod for disk pressure (kubelet's `nodeReclaimFunc`s). The eviction manager calls
//! these; the runtime's container GC and image GC implement them.

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
