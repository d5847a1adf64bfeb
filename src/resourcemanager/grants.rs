//! What a container gets from the managers (kubelet's `GetResources` and the internal
//! container lifecycle's `PreCreateContainer`), and the release when its pod is done.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::info;

use super::managers::{ResourceManagers, container_names};
use crate::contracts::{ContainerGrants, DeviceGrant, GrantError, MountGrant, ResourceGrants};
use crate::pod::{pod_ref, pod_uid};

fn grant_error(e: impl std::fmt::Display) -> GrantError {
    GrantError {
        message: e.to_string(),
    }
}

impl ResourceManagers {
    /// The container's devices: the plugins' `Allocate` answers for what admission
    /// picked (asked here, off the sync loop, the first time), their `PreStartContainer`
    /// when a plugin wants it, then the run options.
    async fn device_grants(
        &self,
        pod: &Pod,
        container: &str,
        out: &mut ContainerGrants,
    ) -> Result<(), GrantError> {
        let uid = pod_uid(pod);
        self.devices
            .complete_allocation(pod)
            .await
            .map_err(|e| grant_error(e.message))?;
        self.devices
            .pre_start(uid, container)
            .await
            .map_err(grant_error)?;
        let Some(o) = self.devices.run_options(uid, container) else {
            return Ok(());
        };
        out.devices
            .extend(o.devices.into_iter().map(|d| DeviceGrant {
                container_path: d.container_path,
                host_path: d.host_path,
                permissions: d.permissions,
            }));
        out.mounts.extend(o.mounts.into_iter().map(|m| MountGrant {
            container_path: m.container_path,
            host_path: m.host_path,
            read_only: m.read_only,
        }));
        out.envs.extend(o.envs);
        out.annotations.extend(o.annotations);
        out.cdi_devices.extend(o.cdi_devices);
        Ok(())
    }
}

impl ResourceGrants for ResourceManagers {
    fn prepare_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<(), GrantError>> {
        Box::pin(async move {
            match &self.dra {
                Some(dra) => dra.prepare_resources(pod).await.map_err(grant_error),
                None => Ok(()),
            }
        })
    }

    fn container_grants<'a>(
        &'a self,
        pod: &'a Pod,
        container: &'a Container,
    ) -> BoxFuture<'a, Result<ContainerGrants, GrantError>> {
        Box::pin(async move {
            let uid = pod_uid(pod);
            let name = container.name.as_str();
            let mut out = ContainerGrants {
                cpuset_cpus: self.cpu.cpuset_for(uid, name).map(|c| c.to_string()),
                cpuset_mems: (self.memory.numa_nodes_for(uid, name))
                    .map(|nodes| crate::cm::format_cpu_list(&nodes)),
                ..Default::default()
            };
            self.device_grants(pod, name, &mut out).await?;
            if let Some(dra) = &self.dra {
                let cdi = dra
                    .container_cdi_devices(pod, container)
                    .map_err(grant_error)?;
                out.cdi_devices.extend(cdi);
            }
            if !out.is_empty() {
                info!(pod = %pod_ref(pod), podUID = uid, container = name,
                    cpusetCpus = out.cpuset_cpus.as_deref().unwrap_or(""),
                    cpusetMems = out.cpuset_mems.as_deref().unwrap_or(""),
                    devices = out.devices.len(), mounts = out.mounts.len(),
                    cdiDevices = out.cdi_devices.join(",").as_str(),
                    "container gets its resources from the resource managers");
            }
            Ok(out)
        })
    }

    fn container_created(&self, _pod: &Pod, _container: &str, _container_id: &str) {
        // The reconcile loop finds containers by their labels in the runtime's list,
        // so an ID needs no record here (kubelet keeps a container map instead).
    }

    fn release_pod<'a>(&'a self, pod: &'a Pod) -> BoxFuture<'a, Result<(), GrantError>> {
        Box::pin(async move {
            if let Some(dra) = &self.dra {
                dra.unprepare_resources(pod).await.map_err(grant_error)?;
            }
            let uid = pod_uid(pod);
            for name in container_names(pod) {
                self.cpu.remove_container(uid, name);
                self.memory.remove_container(uid, name);
            }
            self.topology.remove_pod(uid);
            Ok(())
        })
    }
}
