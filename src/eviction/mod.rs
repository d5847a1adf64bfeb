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

mod admission;
mod config;
mod local_storage;
mod manager;
mod memcg;
mod messages;
mod rank;
mod reclaim;
mod signals;

// The manager and what the agent wires into it; its view for the server.
pub(crate) use config::EvictionConfig;
pub(crate) use manager::{Manager, ManagerDeps, RECLAIM_SETTLE, StatusView};
pub(crate) use memcg::MemcgNotifier;
pub(crate) use reclaim::ThresholdNotifier;
// Admission under node pressure.
pub(crate) use admission::PressureAdmission;
// The flag-value parsers and checks the settings use.
pub(crate) use config::{check_soft, parse_grace_periods, parse_min_reclaim};
