//! The container manager (kubelet's `pkg/kubelet/cm`): the cgroup version and driver,
//! the `kubepods` tree with its QoS cgroups, one cgroup per pod with kubelet's limits,
//! node capacity and allocatable, and the resource-fit admission check. It runs as a
//! task beside the sync loop and never kills a pod itself.
//!
//! - [`version`]: v1, hybrid or v2, from the statfs magic of the cgroup mount.
//! - [`driver`]: `cgroupfs` or `systemd`: configured, reported by the runtime, or guessed.
//! - [`name`]: a cgroup's name as components, and its spelling for each driver.
//! - [`fit`]: resource-fit admission against allocatable (`OutOfcpu`, …).
//! - [`fs`]: the one boundary to the cgroup filesystem (create, limit, read, remove).
//! - [`allocatable`]: capacity, reservations, allocatable and the `kubepods` limits.
//! - [`qos`]: the pod's QoS class and its containers' `oom_score_adj`.
//! - [`resources`]: the limits kubelet gives a pod cgroup, and the formulas behind them;
//!   `container_resources`: the same formulas for one container's CRI resources.
//! - [`tree`]: where `kubepods`, the QoS cgroups and each pod's cgroup live.
//! - [`manager`]: [`ContainerManager`], the tree as one value, with its periodic task;
//!   [`qos_cgroups`] and [`pod_cgroups`] are its node-level and per-pod halves.
//! - [`startup`]: detection, the driver decision, the start-up line, the tree made.

pub(crate) mod allocatable;
mod container_resources;
pub(crate) mod driver;
pub(crate) mod fit;
pub(crate) mod fs;
pub(crate) mod manager;
pub(crate) mod name;
pub(crate) mod pod_cgroups;
pub(crate) mod qos;
pub(crate) mod qos_cgroups;
pub(crate) mod resources;
pub(crate) mod startup;
pub(crate) mod tree;
pub(crate) mod version;

pub(crate) use container_resources::{ResourceError, apply_cfs_period, linux_resources};
pub(crate) use manager::ContainerManager;

#[cfg(test)]
pub(crate) mod fake_fs;
