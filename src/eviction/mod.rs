//! The eviction manager (kubelet's `pkg/kubelet/eviction`).
//!
//! - the thresholds themselves (`memory.available<100Mi`) are `contracts::Thresholds`,
//!   which node allocatable reads too.
//! - [`config`]: soft thresholds, grace periods, minimum reclaim, transition period.
//! - [`signals`]: the signals observed from the metric advisor's latest round.
//! - [`manager`]: the synchronize loop: thresholds, conditions, reclaim, one eviction.
//! - [`rank`]: the order pods are evicted in, per signal.
//! - [`messages`]: kubelet's eviction and admission texts.
//! - [`admission`]: rejecting pods under node pressure.
//! - [`reclaim`]: the seams to node-level reclaim (dead containers, unused images) and
//!   to the kernel's memory threshold notification.
//! - [`memcg`]: that notification on cgroup v1 (an eventfd on `cgroup.event_control`).
//! - [`local_storage`]: emptyDir `sizeLimit` and ephemeral-storage limit violations.

pub(crate) mod admission;
pub(crate) mod config;
pub(crate) mod local_storage;
pub(crate) mod manager;
pub(crate) mod memcg;
pub(crate) mod messages;
pub(crate) mod rank;
pub(crate) mod reclaim;
pub(crate) mod signals;
