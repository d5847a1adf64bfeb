//! The container manager (kubelet's `pkg/kubelet/cm`): the cgroup version and driver,
//! the `kubepods` tree with its QoS cgroups, one cgroup per pod with kubelet's limits,
//! node capacity and allocatable, and the resource-fit admission check. It runs as a
//! task beside the sync loop and never kills a pod itself.
//!
//! - [`version`]: v1, hybrid or v2, from the statfs magic of the cgroup mount.
//! - [`driver`]: `cgroupfs` or `systemd`: configured, reported by the runtime, or guessed.
//! - [`name`]: a cgroup's name as components, and its spelling for each driver.
//! - [`fit`]: resource-fit admission against allocatable (`OutOfcpu`, …).
//! - [`fs`]: the one boundary to the cgroup filesystem (create, limit, read, remove);
//!   with the systemd driver, each slice a systemd unit over D-Bus
//!   (`fs/systemd.rs`, `fs/systemd_dbus.rs`).
//! - [`allocatable`]: capacity, reservations, allocatable and the `kubepods` limits.
//! - [`qos`]: the pod's QoS class and its containers' `oom_score_adj`.
//! - [`memory_policy`]: each container's `memory.oom.group` and swap (kubelet's
//!   `singleProcessOOMKill` and `memorySwap.swapBehavior`), from the host's cgroup
//!   version and swap.
//! - [`resources`]: the limits kubelet gives a pod cgroup, and the formulas behind them;
//!   `container_resources`: the same formulas for one container's CRI resources.
//! - [`tree`]: where `kubepods`, the QoS cgroups and each pod's cgroup live.
//! - [`manager`]: [`ContainerManager`], the tree as one value, with its periodic task;
//!   [`qos_cgroups`] and [`pod_cgroups`] are its node-level and per-pod halves.
//! - [`startup`]: detection, the driver decision, who makes the cgroups (oxlet's files
//!   or systemd's units; the systemd driver without systemd is refused), the start-up
//!   line, the tree made.
//! - [`host_checks`]: kubelet's checks before any cgroup is made: the cgroup root exists
//!   (with the controllers kubelet needs on v2), and the v1 controllers are mounted.
//! - [`kernel`]: kubelet's kernel tunables, checked (`protectKernelDefaults`) or written.
//! - [`hook_cgroups`]: limits read and written for koordlet's runtime hooks.
//! - [`koord_cgroups`]: the cpuset and memory QoS files koordlet's QoS manager writes.

mod allocatable;
mod container_resources;
mod driver;
mod fit;
mod fs;
mod hook_cgroups;
mod host_checks;
mod kernel;
mod koord_cgroups;
mod manager;
mod memory_policy;
mod name;
mod pod_cgroups;
mod qos;
mod qos_cgroups;
mod resources;
mod startup;
mod tree;
mod version;

// The manager: its start-up, the tree as one value, and its per-pod errors.
pub(crate) use manager::ContainerManager;
pub(crate) use pod_cgroups::PodCgroupError;
pub(crate) use startup::{CmSettings, node_allocatable, start};
// Settings: the driver, cgroup names, and the reservations behind allocatable.
pub(crate) use allocatable::{
    Enforced, NodeAllocatable, NodeAllocatableEnforcement, NodeResources, Reserved,
};
// CPU lists as the kernel writes them: sysfs reads them too, so they live there.
pub(crate) use crate::sysfs::{CpuListError, format_cpu_list, parse_cpu_list};
pub(crate) use driver::CgroupDriver;
pub(crate) use name::CgroupName;
// Admission against allocatable.
pub(crate) use fit::ResourceFit;
// The cgroup filesystem, for the readers beside the manager (eviction, the metric advisor).
pub(crate) use fs::{CgroupError, CgroupFs, CgroupTree, HOST_MOUNT, StatReader, parse_psi};
// The QoS control files koordlet's QoS manager writes (`koord_cgroups`).
pub(crate) use fs::QosFile;
pub(crate) use version::detect_cgroup_version;
// Each container's `memory.oom.group` and swap.
pub(crate) use memory_policy::{MemoryPolicy, MemorySettings, SwapBehavior, SwapDecision};
// QoS classes and `oom_score_adj`.
pub(crate) use qos::{
    KUBELET_OOM_SCORE_ADJ, QosClass, clamp_oom_score_adj, container_oom_score_adj,
    container_resource,
};
// The limits kubelet gives pods and containers, and the formulas behind them.
pub(crate) use container_resources::{ResourceError, apply_cfs_period, linux_resources};
pub(crate) use resources::{
    DEFAULT_CPU_PERIOD_US, ResourceConfig, milli_cpu_to_quota, milli_cpu_to_shares, pod_limits,
    pod_request_for_eviction, pod_requests, sandbox_amounts, shares_to_milli_cpu,
};

#[cfg(test)]
mod fake_fs;
#[cfg(test)]
mod kind_v2_tests;
#[cfg(test)]
pub(crate) use fake_fs::{FakeCgroupFs, fake_manager};
pub(crate) use version::CgroupVersion;
