//! The eviction manager (kubelet's `pkg/kubelet/eviction`). Today only its
//! thresholds, which the options and node allocatable need; the manager itself
//! (signals, ranking, evicting) comes with issue 12.
//!
//! - [`threshold`]: `memory.available<100Mi`: signals, quantities and percentages.

pub(crate) mod threshold;
