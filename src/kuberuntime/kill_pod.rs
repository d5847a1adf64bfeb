//! kubelet's `KillPod` (`kuberuntime_manager.go`, `killPodWithSyncResult`): every
//! running container stopped with its grace and preStop hook, sidecars in their turn,
//! then every sandbox; a pod known only to the runtime killed from its containers'
//! labels. And what follows a terminated pod: its volumes torn down, and its
//! containers, sandboxes and directories removed.

use std::collections::HashMap;

use futures::future::join_all;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use super::container_kill::{MIN_GRACE_SECS, gone_is_ok, stop_plan, termination_grace};
use super::errors::{StopError, SyncError};
use super::gc;
use super::labels;
use super::lifecycle;
use super::manager::RuntimeManager;
use super::sidecar::{self, TerminationOrder};
use super::types::*;
use crate::cri::CriError;
use crate::events::EventType::{Normal, Warning};
use crate::events::{ObjectRef, reason};
use crate::pod::{pod_ref, pod_uid};

impl RuntimeManager {
    /// Stops every running container (in parallel, each with its grace period) and
    /// then every sandbox of the pod, dead ones included: a sandbox whose pause process
    /// died still holds its network namespace and IP until it is stopped (kubelet's
    /// `killPodWithSyncResult` stops them all too).
    pub(crate) async fn kill_pod_status(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        grace_override: Option<i64>,
    ) -> Result<(), SyncError> {
        let grace = grace_override.unwrap_or_else(|| termination_grace(pod));
        let order = sidecar::has_sidecars(pod).then(|| {
            TerminationOrder::new(pod, status.running_containers().map(|c| c.name.as_str()))
        });
        let killed = self
            .kill_containers_and_sandboxes(
                pod,
                &hook_target(pod, &status.ips, self.host_ip()),
                status
                    .running_containers()
                    .map(|c| stop_plan(pod, &c.id, &c.name, grace))
                    .collect(),
                status.sandboxes.iter().map(|s| s.id.clone()).collect(),
                order.as_ref(),
            )
            .await;
        if let Err(e) = &killed {
            let msg = format!("error killing pod: {e}");
            (self.events).event(&ObjectRef::pod(pod), Warning, reason::FAILED_KILL_POD, msg);
        }
        killed
    }

    /// Kills a pod known only to the runtime. Its spec is gone, so each container's
    /// preStop hook and grace come back from its annotations (kubelet's
    /// `restoreSpecsFromContainerLabels`); an override still wins.
    pub(crate) async fn kill_runtime_pod(
        &self,
        pod: &RuntimePod,
        grace_override: Option<i64>,
    ) -> Result<(), SyncError> {
        let api_pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: Some(pod.uid.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut plans = Vec::new();
        for c in pod
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
        {
            let info = match self.cri.container_status(&c.id).await {
                Ok(st) => labels::container_info(&st.labels, &st.annotations),
                Err(_) => labels::ContainerInfo::default(),
            };
            plans.push(lifecycle::StopPlan {
                id: c.id.clone(),
                name: c.name.clone(),
                grace: grace_override
                    .or(info.termination_grace)
                    .unwrap_or(MIN_GRACE_SECS),
                pre_stop: info.pre_stop,
            });
        }
        // The pod IP is not known without the pod; HTTP hooks naming no host fail.
        self.kill_containers_and_sandboxes(
            &api_pod,
            &lifecycle::HookTarget::default(),
            plans,
            pod.sandboxes.iter().map(|s| s.id.clone()).collect(),
            None,
        )
        .await
    }

    async fn kill_containers_and_sandboxes(
        &self,
        pod: &Pod,
        target: &lifecycle::HookTarget,
        containers: Vec<lifecycle::StopPlan>,
        sandboxes: Vec<String>,
        order: Option<&TerminationOrder>,
    ) -> Result<(), SyncError> {
        let pod_ref = &pod_ref(pod);
        let uid = pod_uid(pod);
        let kills = containers.iter().map(|plan| async move {
            let msg = format!("Stopping container {}", plan.name);
            (self.events).event(
                &ObjectRef::container(pod, &plan.name),
                Normal,
                reason::KILLING,
                msg,
            );
            self.stop_with_hooks(pod, plan, target, order)
                .await
                .map_err(|source| StopError {
                    container: plan.name.clone(),
                    source,
                })
        });
        let errors: Vec<StopError> = join_all(kills)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if !errors.is_empty() {
            return Err(SyncError::KillContainers(errors));
        }
        for id in sandboxes {
            info!(pod = %pod_ref, podUID = %uid, sandboxID = %id, "stopping pod sandbox");
            gone_is_ok(self.cri.stop_pod_sandbox(&id).await).map_err(SyncError::StopSandbox)?;
        }
        Ok(())
    }

    /// Unmounts and removes the volumes of a terminated pod whose object stays (see
    /// [`crate::volumes::tear_down_pod_volumes`]), off the async threads: an emptyDir can be big.
    pub(crate) async fn tear_down_volumes(&self, uid: &str, pod_ref: &str) -> std::io::Result<()> {
        let pods_dir = self.sandbox_env.pods_dir.clone();
        let owned_uid = uid.to_string();
        let removed = tokio::task::spawn_blocking(move || {
            crate::volumes::tear_down_pod_volumes(&pods_dir, &owned_uid)
        })
        .await
        .map_err(std::io::Error::other)??;
        if removed {
            info!(pod = %pod_ref, podUID = %uid, "tore down the volumes of the terminated pod");
        }
        Ok(())
    }

    /// Removes every container (with its log) and sandbox of a pod that has terminated,
    /// then, once nothing of it is left in the runtime, its `<root-dir>/pods/<uid>` and
    /// `<pod-logs-dir>/<ns>_<name>_<uid>` (kubelet's garbage collector and orphan
    /// cleanup do this later; oxlet does it at once).
    pub(crate) async fn remove_pod(&self, uid: &str, pod_ref: &str) -> Result<(), CriError> {
        let selector = HashMap::from([(labels::POD_UID_LABEL.to_string(), uid.to_string())]);
        let containers = self
            .cri
            .list_containers(Some(cri::ContainerFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await?;
        for c in containers {
            let unknown = ContainerState::from_cri(c.state) == ContainerState::Unknown;
            self.remove_container(&c.id, unknown).await?;
        }
        let sandboxes = self
            .cri
            .list_pod_sandbox(Some(cri::PodSandboxFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await?;
        for s in sandboxes {
            info!(pod = %pod_ref, podUID = %uid, sandboxID = %s.id, "removing pod sandbox");
            self.remove_sandbox(&s.id).await?;
        }
        let pods_dir = &self.sandbox_env.pods_dir;
        let logs_dir = &self.sandbox_env.pod_logs_dir;
        match crate::safe_path::beneath(pods_dir, &[uid]) {
            Ok(dir) => {
                if let Err(e) = crate::volumes::unmount_pod_volumes(&dir) {
                    warn!(pod = %pod_ref, podUID = %uid, error = %e, "cannot unmount pod volumes");
                }
                let dirs = std::iter::once((pods_dir, dir)).chain(
                    gc::log_dirs_of(logs_dir, uid)
                        .into_iter()
                        .map(|d| (logs_dir, d)),
                );
                for (root, dir) in dirs {
                    if let Err(e) = crate::safe_path::remove_beneath(root, &dir) {
                        warn!(pod = %pod_ref, podUID = %uid, dir = %dir.display(), error = %e, "cannot remove pod directory");
                    }
                }
            }
            Err(e) => {
                warn!(pod = %pod_ref, podUID = %uid, error = %e, "not removing the directories of a pod with an unsafe UID");
            }
        }
        self.forget_pod(uid);
        Ok(())
    }
}

/// Where HTTP hooks without a host go: the pod's IP (the node's for host network).
pub(super) fn hook_target(pod: &Pod, ips: &[String], host_ip: &str) -> lifecycle::HookTarget {
    let pod_ip = if crate::pod::is_host_network(pod) {
        host_ip.to_string()
    } else {
        ips.first().cloned().unwrap_or_default()
    };
    lifecycle::HookTarget { pod_ip }
}
