//! What other rooms read from the managers: the pod resources API's answers, the
//! device plugin counts (for the node status and resource-fit admission), and the DRA
//! drivers' registration through the plugin watcher.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::managers::ResourceManagers;
use crate::contracts::{ExtendedResourceSource, ExtendedResources};
use crate::dra::DraManager;
use crate::pluginwatcher::{PluginError, PluginHandler};
use crate::pod::pod_uid;
use crate::podresources::{
    AllocatableResourcesResponse, ClaimResource, ContainerAllocations, ContainerDevices,
    ContainerMemory, DynamicResource, NumaNode, PodResourcesSource, TopologyInfo,
};

fn topology(nodes: impl IntoIterator<Item = i64>) -> Option<TopologyInfo> {
    let nodes: Vec<NumaNode> = nodes.into_iter().map(|id| NumaNode { id }).collect();
    (!nodes.is_empty()).then_some(TopologyInfo { nodes })
}

fn devices(list: Vec<crate::devicemanager::ContainerDevices>) -> Vec<ContainerDevices> {
    list.into_iter()
        .map(|d| ContainerDevices {
            resource_name: d.resource,
            device_ids: d.device_ids,
            topology: topology(d.numa_nodes),
        })
        .collect()
}

fn memory(blocks: Vec<crate::memorymanager::MemoryBlock>) -> Vec<ContainerMemory> {
    blocks
        .into_iter()
        .map(|b| ContainerMemory {
            memory_type: b.resource,
            size: b.bytes,
            topology: topology(b.numa_ids.into_iter().map(|n| n as i64)),
        })
        .collect()
}

fn cpu_ids(set: Option<crate::cpumanager::CpuSet>) -> Vec<i64> {
    set.map(|s| s.iter().map(|c| c as i64).collect())
        .unwrap_or_default()
}

impl PodResourcesSource for ResourceManagers {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.active_pods()
    }

    fn container(&self, pod: &Pod, container: &Container) -> ContainerAllocations {
        let (uid, name) = (pod_uid(pod), container.name.as_str());
        ContainerAllocations {
            devices: devices(self.devices.container_devices(uid, name)),
            cpu_ids: cpu_ids(self.cpu.exclusive_cpus(uid, name)),
            memory: memory(self.memory.memory_blocks(uid, name)),
            dynamic_resources: self.dynamic_resources(pod, container),
        }
    }

    fn allocatable(&self) -> AllocatableResourcesResponse {
        AllocatableResourcesResponse {
            devices: devices(self.devices.allocatable_devices()),
            cpu_ids: cpu_ids(Some(self.cpu.allocatable_cpus())),
            memory: memory(self.memory.allocatable_memory()),
        }
    }
}

impl ResourceManagers {
    /// The container's ResourceClaims (those its `resources.claims` name), one entry
    /// per claim with each prepared device (kubelet's `GetDynamicResources`).
    fn dynamic_resources(&self, pod: &Pod, container: &Container) -> Vec<DynamicResource> {
        let Some(dra) = &self.dra else {
            return Vec::new();
        };
        let names: Vec<&str> = (container.resources.as_ref())
            .and_then(|r| r.claims.as_ref())
            .into_iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        if names.is_empty() {
            return Vec::new();
        }
        let claims = dra.pod_claims(pod_uid(pod));
        let mut out: Vec<DynamicResource> = Vec::new();
        for c in claims {
            if !pod_claim_named(pod, &c.claim_name, &names) {
                continue;
            }
            let resource = ClaimResource {
                cdi_devices: (c.cdi_ids.iter())
                    .map(|n| crate::podresources::CdiDevice { name: n.clone() })
                    .collect(),
                driver_name: c.driver.clone(),
                pool_name: c.pool.clone(),
                device_name: c.device.clone(),
                share_id: None,
            };
            match out.iter_mut().find(|d| d.claim_name == c.claim_name) {
                Some(d) => d.claim_resources.push(resource),
                None => out.push(DynamicResource {
                    claim_name: c.claim_name,
                    claim_namespace: c.namespace,
                    claim_resources: vec![resource],
                }),
            }
        }
        out
    }
}

/// Whether the ResourceClaim `claim` is one of the pod's claims the container names
/// (by the pod's own name for it, a direct `resourceClaimName` or a template's
/// generated claim in `status.resourceClaimStatuses`).
fn pod_claim_named(pod: &Pod, claim: &str, container_names: &[&str]) -> bool {
    let spec_claims = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    spec_claims.into_iter().flatten().any(|pc| {
        container_names.contains(&pc.name.as_str())
            && (pc.resource_claim_name.as_deref() == Some(claim)
                || statuses.into_iter().flatten().any(|st| {
                    st.name == pc.name && st.resource_claim_name.as_deref() == Some(claim)
                }))
    })
}

impl ExtendedResourceSource for ResourceManagers {
    fn extended_resources(&self) -> ExtendedResources {
        let r = self.devices.resources();
        let mut allocated = std::collections::BTreeMap::new();
        for pod in self.active_pods() {
            for name in super::managers::container_names(&pod) {
                for d in self.devices.container_devices(pod_uid(&pod), name) {
                    *allocated.entry(d.resource).or_insert(0) += d.device_ids.len() as i64;
                }
            }
        }
        ExtendedResources {
            capacity: r.capacity,
            allocatable: r.allocatable,
            removed: r.removed,
            allocated,
        }
    }
}

/// The DRA manager as the plugin watcher's handler for `DRAPlugin` sockets.
pub(crate) struct DraPlugins(pub Arc<DraManager>);

impl PluginHandler for DraPlugins {
    fn validate(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), PluginError> {
        (self.0)
            .validate_plugin(name, endpoint, versions)
            .map_err(|e| PluginError(e.to_string()))
    }

    fn register(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> BoxFuture<'_, Result<(), PluginError>> {
        let (name, endpoint, versions) =
            (name.to_string(), endpoint.to_path_buf(), versions.to_vec());
        Box::pin(async move {
            (self.0)
                .register_plugin(&name, &endpoint, &versions)
                .await
                .map_err(|e| PluginError(e.to_string()))
        })
    }

    fn deregister(&self, name: &str) {
        self.0.deregister_plugin(name);
    }
}
