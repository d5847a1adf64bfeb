//! kubelet's device manager (`pkg/kubelet/cm/devicemanager`): device plugins register
//! on `<root-dir>/device-plugins/kubelet.sock` (or through the plugin watcher), report
//! their devices and health over `ListAndWatch`, and are asked to `Allocate` the
//! devices a container is given. The node's capacity and allocatable of each plugin's
//! resource follow the reports; what each container holds is checkpointed in kubelet's
//! `kubelet_internal_checkpoint` so pods keep their devices across restarts.
//!
//! - [`api`]: the device plugin API (v1beta1), written by hand.
//! - [`manager`]: the state, the plugins' connections, capacity, the checkpoint.
//! - [`server`]: `Register`, the plugin watcher's handler, the run loop.
//! - [`allocate`]: topology hints, the choice of devices, `Allocate`, `PreStartContainer`.

mod allocate;
mod api;
mod checkpoint;
mod endpoint;
mod manager;
mod pod_devices;
mod server;

pub(crate) use manager::DeviceManager;

use std::collections::BTreeMap;

/// kubelet's registration socket, in the device plugin directory.
pub(crate) const KUBELET_SOCKET: &str = "kubelet.sock";
/// The device plugin directory below kubelet's root directory.
pub(crate) const DEVICE_PLUGINS_DIR: &str = "device-plugins";

/// The node's device plugin resources (kubelet's `GetCapacity`): capacity counts every
/// device, allocatable the healthy ones; `removed` names resources gone for good,
/// which the node status must drop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeviceResources {
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    pub removed: Vec<String>,
}

/// Devices of one resource, with their NUMA nodes (the pod resources API's shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerDevices {
    pub resource: String,
    pub device_ids: Vec<String>,
    pub numa_nodes: Vec<i64>,
}

/// A device manager failure outside admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DeviceError {
    /// The device plugin directory or socket.
    #[error("{0}")]
    Io(String),
    /// A plugin did not answer, or answered with an error.
    #[error("{0}")]
    Plugin(String),
}

/// What a container is run with because of its devices, merged over its resources
/// (kubelet's `DeviceRunContainerOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeviceRunOptions {
    pub devices: Vec<DeviceSpec>,
    pub mounts: Vec<MountSpec>,
    pub envs: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<String>,
}

/// A host device node given to the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceSpec {
    pub container_path: String,
    pub host_path: String,
    /// cgroup permissions: `r`, `w`, `m`.
    pub permissions: String,
}

/// A host path mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountSpec {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

#[cfg(test)]
mod tests;
