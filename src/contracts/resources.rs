//! What the resource managers (CPU, memory, devices, DRA) give a pod's containers,
//! asked by the runtime as kubelet's kuberuntime asks its `RuntimeHelper` and internal
//! container lifecycle: the claims a pod needs prepared before its sandbox, what a
//! container gets at creation (its cpuset, device nodes, mounts, environment,
//! annotations, CDI devices), the container's ID once it exists, and the release when
//! the pod is done. The managers implement it; the runtime never imports them.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, Pod};

/// A device node a container gets (CRI `Device`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceGrant {
    pub container_path: String,
    pub host_path: String,
    /// cgroup permissions: `r`, `w`, `m` in any combination.
    pub permissions: String,
}

/// A host path a container gets mounted (CRI `Mount`), from a device plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountGrant {
    pub container_path: String,
    pub host_path: String,
    pub read_only: bool,
}

/// Everything the resource managers add to one container's CRI config (kubelet's
/// `RunContainerOptions` from `GetResources`, and `PreCreateContainer`'s cpuset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ContainerGrants {
    /// `cpuset.cpus`: exclusive CPUs, or the shared pool (None: the runtime's default).
    pub cpuset_cpus: Option<String>,
    /// `cpuset.mems`: the memory manager's NUMA nodes.
    pub cpuset_mems: Option<String>,
    pub devices: Vec<DeviceGrant>,
    pub mounts: Vec<MountGrant>,
    pub envs: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    /// Fully qualified CDI device names (`vendor/class=name`), for runtimes with CDI.
    pub cdi_devices: Vec<String>,
}

impl ContainerGrants {
    /// True when nothing is added: the container runs as it would without the managers.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Why the managers could not give a pod or container what it was admitted with. The
/// message is kubelet's, shown in the pod's events and its container's waiting message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct GrantError {
    pub message: String,
}

/// The runtime's questions to the resource managers (see the module doc).
pub(crate) trait ResourceGrants: Send + Sync {
    /// kubelet's `PrepareDynamicResources`: before the pod's sandbox is made, each of
    /// its ResourceClaims prepared by its driver.
    fn prepare_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<(), GrantError>>;
    /// kubelet's `GetResources` and `PreCreateContainer`: what `container` gets.
    fn container_grants<'a>(
        &'a self,
        pod: &'a Pod,
        container: &'a Container,
    ) -> BoxFuture<'a, Result<ContainerGrants, GrantError>>;
    /// kubelet's `PreStartContainer`: the container exists, with this ID (the CPU
    /// manager's reconcile loop keeps its cpuset from then on).
    fn container_created(&self, pod: &Pod, container: &str, container_id: &str);
    /// kubelet's `UnprepareDynamicResources` and the managers' release: the pod's
    /// containers are gone, its claims are unprepared and its CPUs, memory and devices
    /// go back to the pool.
    fn release_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<(), GrantError>>;
}
