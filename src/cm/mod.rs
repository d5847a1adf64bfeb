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
//! - [`resources`]: the limits kubelet gives a pod cgroup, and the formulas behind them.

pub(crate) mod allocatable;
pub(crate) mod driver;
pub(crate) mod fit;
pub(crate) mod fs;
pub(crate) mod name;
pub(crate) mod qos;
pub(crate) mod resources;
pub(crate) mod version;
