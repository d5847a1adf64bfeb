//! The kernel's memory threshold notification, the eviction manager's seam to it (the
//! disk reclaim steps are `contracts::DiskReclaimer`). The manager holds trait
//! objects, so its unit tests run on fakes; the real notifier is `memcg.rs`.

use futures::future::BoxFuture;

use crate::contracts::ReclaimError;

/// The kernel's notification that memory usage crossed a threshold (kubelet's
/// `kernelMemcgNotification`), so memory pressure is seen between the manager's ticks.
pub(crate) trait ThresholdNotifier: Send + Sync {
    /// Arms the notification at `usage_bytes` of the watched cgroup (replacing the last).
    fn set_threshold(&self, usage_bytes: u64) -> Result<(), ReclaimError>;
    /// Resolves when the threshold was crossed since the last call.
    fn crossed(&self) -> BoxFuture<'_, ()>;
}
