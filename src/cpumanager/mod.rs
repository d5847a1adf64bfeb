//! The CPU manager (kubelet's `pkg/kubelet/cm/cpumanager`): under the `static`
//! policy, Guaranteed containers with whole-CPU requests get CPUs of their own and
//! everyone else shares the rest; the choice follows the machine's topology and the
//! NUMA affinity the topology manager picked, and survives restarts in
//! `cpu_manager_state`. Pure: the caller writes `cpuset.cpus` through the runtime.
//!
//! - [`cpuset`]: a set of CPUs in the kernel's list form.
//! - [`topology`]: sockets, NUMA nodes, cores and L3 caches, read from sysfs.
//! - [`assign`]: kubelet's `takeByTopology` (packed and NUMA-distributed).
//! - [`options`]: the policies and the static policy's options.
//! - [`state`]: the checkpoint file and kubelet's checksum.
//! - [`manager`]: the manager's face; [`static_policy`]: hints and allocation.

mod assign;
mod cpuset;
mod manager;
mod options;
mod state;
mod static_policy;
mod topology;

#[cfg(test)]
mod tests;

pub(crate) use cpuset::CpuSet;
pub(crate) use manager::{CpuManager, CpuManagerSettings};
pub(crate) use options::CpuManagerPolicy;
pub(crate) use topology::CpuTopology;

/// Why the CPU manager cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CpuManagerError {
    /// The machine's layout could not be read.
    #[error("CPU topology: {0}")]
    Topology(String),
    /// A policy or option kubelet would refuse.
    #[error("{0}")]
    Options(String),
    /// The CPU reservation cannot be made.
    #[error("{0}")]
    Reservation(String),
    /// The state file cannot be restored (kubelet's wording).
    #[error(
        "could not restore state from checkpoint: {why}, please drain this node and delete the CPU manager checkpoint file {file:?} before restarting Kubelet"
    )]
    State { file: String, why: String },
    /// The state file does not fit this machine or its reservation.
    #[error("invalid state in {file:?}: {why}, please drain node and remove policy state file")]
    InvalidState { file: String, why: String },
}
