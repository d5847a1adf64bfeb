//! The contracts between rooms: traits and small shared types that one room defines
//! the shape of and another implements, kept below both so neither imports the other.
//!
//! - pod admission: the handler trait and the ordered chain the sync loop asks
//!   (`admission.rs`); eviction, the container manager and the sync loop add handlers;
//! - node-level disk reclaim: the steps the eviction manager runs before it evicts,
//!   implemented by the runtime's container GC and image GC (`reclaim.rs`);
//! - evicting a pod: the eviction manager and the QoS manager decide, the pod
//!   workers kill (`evictor.rs`); the node shutdown manager stops pods the same way,
//!   with its own status (`PodTerminator`);
//! - whether the node is shutting down: the node shutdown manager sets it, admission
//!   and the node status's Ready condition read it (`node_shutdown.rs`);
//! - a sandbox's cgroup parent: the runtime asks, the container manager answers
//!   (`cgroup_parent.rs`);
//! - the runtime's health as the sync loop last saw it, for the node status
//!   (`runtime_health.rs`);
//! - the node's and the pods' readings (kubelet's stats API types): the cgroup stat
//!   reader fills them, the metric advisor publishes them, the summary, the eviction
//!   manager and the QoS side read them (`readings.rs`);
//! - the node's device plugin resources: the device manager counts them, the node
//!   status and resource-fit admission read them (`extended.rs`);
//! - what the resource managers give a pod's containers (cpusets, devices, CDI
//!   devices, prepared claims): the runtime asks, the managers answer (`resources.rs`);
//! - kubelet's eviction thresholds (its `eviction/api`): the eviction manager acts on
//!   them, node allocatable subtracts the hard ones (`thresholds.rs`).

mod admission;
mod cgroup_parent;
mod evictor;
mod extended;
mod node_shutdown;
mod readings;
mod reclaim;
mod resources;
mod runtime_health;
mod thresholds;

pub(crate) use admission::{AdmissionChain, PodAdmitAttributes, PodAdmitHandler, Rejection};
pub(crate) use cgroup_parent::PodCgroupParent;
#[cfg(test)]
pub(crate) use cgroup_parent::RuntimeDefaultCgroups;
pub(crate) use evictor::{Eviction, Evictor, PodTerminator, Termination};
pub(crate) use extended::{ExtendedResourceSource, ExtendedResources};
pub(crate) use node_shutdown::{NODE_SHUTTING_DOWN, NodeShutdownState};
pub(crate) use readings::{
    CgroupReading, ContainerReading, CpuReading, FsReading, InterfaceReading, LatestReadings,
    MemoryReading, NetworkReading, NodeReading, PodReading, Pressure, Psi, PsiLine, Snapshot,
    SystemContainerReading, Throttling,
};
pub(crate) use reclaim::{DiskReclaimer, DiskTarget, ReclaimError, Reclaimed};
pub(crate) use resources::{ContainerGrants, DeviceGrant, GrantError, MountGrant, ResourceGrants};
pub(crate) use runtime_health::{RuntimeHandlerFeatures, RuntimeHealth};
pub(crate) use thresholds::{
    DEFAULT_EVICTION_HARD, Signal, ThresholdError, ThresholdValue, Thresholds,
};
