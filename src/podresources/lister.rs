//! The three answers (kubelet's `v1PodResourcesServer`): every active pod with its
//! regular containers and sidecars (restartable init containers) and what each holds;
//! one pod by namespace and name; and what the node has to give.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::metrics::PodResourcesCall;

use super::api::{
    AllocatableResourcesResponse, ContainerDevices, ContainerMemory, ContainerResources,
    DynamicResource, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesResponse,
    PodResources,
};

/// What one container holds, as the managers record it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ContainerAllocations {
    pub devices: Vec<ContainerDevices>,
    pub cpu_ids: Vec<i64>,
    pub memory: Vec<ContainerMemory>,
    pub dynamic_resources: Vec<DynamicResource>,
}

/// Where the answers come from: the pod manager's active pods and the resource
/// managers' records (kubelet's `PodResourcesProviders`).
pub(crate) trait PodResourcesSource: Send + Sync {
    /// The pods admitted and not finished (kubelet's `GetActivePods`).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// What `container` of `pod` holds.
    fn container(&self, pod: &Pod, container: &Container) -> ContainerAllocations;
    /// Every device, CPU and NUMA node's memory the node has to give.
    fn allocatable(&self) -> AllocatableResourcesResponse;
}

/// `Get` for a pod that is not active here, in kubelet's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {name} in namespace {namespace} not found")]
pub(super) struct NotFound {
    name: String,
    namespace: String,
}

/// kubelet's `List`.
pub(super) fn list(source: &dyn PodResourcesSource) -> ListPodResourcesResponse {
    crate::metrics::pod_resources_request(PodResourcesCall::List, true);
    ListPodResourcesResponse {
        pod_resources: (source.active_pods().iter())
            .map(|p| pod_resources(source, p))
            .collect(),
    }
}

/// kubelet's `Get`: the pod by namespace and name among the active pods, or its error.
pub(super) fn get(
    source: &dyn PodResourcesSource,
    req: &GetPodResourcesRequest,
) -> Result<GetPodResourcesResponse, NotFound> {
    let pods = source.active_pods();
    let pod = pods.iter().find(|p| {
        p.metadata.name.as_deref() == Some(req.pod_name.as_str())
            && p.metadata.namespace.as_deref().unwrap_or("default") == req.pod_namespace
    });
    crate::metrics::pod_resources_request(PodResourcesCall::Get, pod.is_some());
    match pod {
        Some(p) => Ok(GetPodResourcesResponse {
            pod_resources: Some(pod_resources(source, p)),
        }),
        None => Err(NotFound {
            name: req.pod_name.clone(),
            namespace: req.pod_namespace.clone(),
        }),
    }
}

/// kubelet's `GetAllocatableResources`.
pub(super) fn allocatable(source: &dyn PodResourcesSource) -> AllocatableResourcesResponse {
    crate::metrics::pod_resources_request(PodResourcesCall::GetAllocatable, true);
    source.allocatable()
}

/// One pod: its sidecars first, then its regular containers (kubelet's order).
fn pod_resources(source: &dyn PodResourcesSource, pod: &Pod) -> PodResources {
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let containers = sidecars
        .chain(regular)
        .map(|c| {
            let a = source.container(pod, c);
            ContainerResources {
                name: c.name.clone(),
                devices: a.devices,
                cpu_ids: a.cpu_ids,
                memory: a.memory,
                dynamic_resources: a.dynamic_resources,
            }
        })
        .collect();
    PodResources {
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        containers,
        ..Default::default()
    }
}

#[cfg(test)]
#[path = "lister_tests.rs"]
mod tests;
