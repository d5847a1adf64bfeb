//! The resource managers as one (kubelet's container manager's half that hands out
//! CPUs, memory, devices and ResourceClaims): built from their settings at start, the
//! admission handler that runs the topology manager over its hint providers, the
//! answers the runtime asks for each container (`contracts::ResourceGrants`), the CPU
//! manager's reconcile loop, and the sources the node status, resource-fit admission
//! and the pod resources API read.
//!
//! - `managers.rs`: [`ResourceManagers`], their start and the admission handler;
//! - `grants.rs`: what a container gets, and the release when its pod is done;
//! - `reconcile.rs`: every container's cpuset kept as the CPU manager says;
//! - `sources.rs`: the pod resources API's answers, the device counts, the DRA
//!   drivers' registration through the plugin watcher.

mod grants;
mod managers;
mod reconcile;
mod sources;

pub(crate) use managers::{
    ActivePods, ResourceAdmission, ResourceManagerSettings, ResourceManagers,
};
pub(crate) use reconcile::reconcile_cpusets;
pub(crate) use sources::DraPlugins;
