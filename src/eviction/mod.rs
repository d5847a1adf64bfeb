//! The eviction manager (kubelet's `pkg/kubelet/eviction`), being built in issue 12.
//!
//! - [`threshold`]: `memory.available<100Mi`: signals, quantities and percentages.
//! - [`reclaim`]: the seams to node-level reclaim (dead containers, unused images) and
//!   to the kernel's memory threshold notification.
//! - [`memcg`]: that notification on cgroup v1 (an eventfd on `cgroup.event_control`).
//! - [`local_storage`]: emptyDir `sizeLimit` and ephemeral-storage limit violations.

#[allow(
    dead_code,
    reason = "issue 12: the manager and the reclaimers are being built"
)]
pub(crate) mod reclaim;
pub(crate) mod threshold;

#[allow(dead_code, reason = "issue 12: the eviction manager (P1) calls these")]
pub(crate) mod local_storage;
#[allow(dead_code, reason = "issue 12: the eviction manager (P1) calls these")]
pub(crate) mod memcg;
