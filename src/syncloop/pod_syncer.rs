//! The real [`PodSyncer`]: kubelet's `SyncPod`, `SyncTerminatingPod` and
//! `SyncTerminatedPod` over the runtime manager, the pod cache and the status manager.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;
use tracing::{debug, info};

use super::allocation::{AllocationManager, resize_message};
use super::pod_workers::{KillStatus, PodSyncError, PodSyncer, SyncResult, UpdateType};
use crate::cm::ContainerManager;
use crate::kuberuntime::RuntimeManager;
use crate::kuberuntime::{PodRuntimeStatus, RuntimePod};
use crate::pleg::PodCache;
use crate::pod::PodManager;
use crate::pod::{Phase, is_container_restartable, is_static_pod, pod_ref, pod_uid};
use crate::prober::ProbeManager;
use crate::status::{
    ResizeInputs, StartupTracker, StatusInputs, StatusManager, generate_pod_status,
    terminate_pod_status,
};

/// Everything a pod sync touches.
pub(crate) struct Syncer {
    pub runtime: Arc<RuntimeManager>,
    pub cache: Arc<PodCache>,
    pub statuses: Arc<StatusManager>,
    pub pods: Arc<PodManager>,
    /// The runtime's name, for container IDs (`containerd://…`).
    pub runtime_name: String,
    pub startup: StartupTracker,
    /// The probe workers: started by a sync, read for `ready`/`started` and kills.
    pub probes: Arc<ProbeManager>,
    /// Pod cgroups: made before the sandbox.
    pub cm: Arc<ContainerManager>,
    /// What each pod was admitted (or resized) at: the pod a sync runs.
    pub allocation: Arc<AllocationManager>,
    /// The resource managers: a stopped pod's claims unprepared, its CPUs, memory and
    /// devices given back (kubelet's `UnprepareDynamicResources` in SyncTerminatingPod).
    pub grants: Option<Arc<dyn crate::contracts::ResourceGrants>>,
}

fn names(pod: &Pod) -> (String, String, String) {
    (
        pod_uid(pod).to_string(),
        pod.metadata.name.clone().unwrap_or_default(),
        pod.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    )
}

impl Syncer {
    /// Generates and stores the pod's API status from a runtime view.
    fn update_status(&self, pod: &Pod, rt: &PodRuntimeStatus, terminating: bool) -> Phase {
        self.update_status_with(pod, rt, terminating, None)
    }

    /// `update_status`, with the status a kill asked for written over the generated one.
    fn update_status_with(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        terminating: bool,
        kill_status: Option<&KillStatus>,
    ) -> Phase {
        let uid = pod_uid(pod);
        let old = self.statuses.get(uid);
        // kubelet's `generateAPIPodStatus`: what the status manager holds, else what
        // the apiserver has (after a restart, a finished pod keeps its reason, message
        // and terminated containers, and a running one its times and restart counts).
        let previous = old.clone().or_else(|| pod.status.clone());
        let reasons = self.runtime.reasons();
        let lookup = |name: &str| reasons.get(uid, name);
        let resize = ResizeInputs {
            allocated: self.allocation.allocation(uid),
            actuated: self.runtime.actuated(uid),
            conditions: self.allocation.conditions(uid),
        };
        let mut status = generate_pod_status(&StatusInputs {
            pod,
            runtime: rt,
            waiting_reason: &lookup,
            old: previous.as_ref(),
            host_ips: self.runtime.host_ips(),
            runtime_name: &self.runtime_name,
            terminating,
            now: jiff::Timestamp::now(),
            probed: &|c, id| self.probes.readiness(c, id),
            supports_rro: self.runtime.supports_recursive_read_only(pod),
            resize: Some(&resize),
        });
        if let Some(k) = kill_status {
            k.apply(&mut status, previous.as_ref());
        }

        let phase = Phase::parse_or_pending(status.phase.as_deref());
        let now = jiff::Timestamp::now();
        let old_phase = old
            .as_ref()
            .map(|s| s.phase.as_deref().unwrap_or("Pending"));
        crate::metrics::status_synced(pod, old_phase, phase.as_str(), now);
        if let Some(stages) = self.startup.observe(pod, rt, &status, now) {
            crate::metrics::pod_running(pod, now);
            let d = stages.durations();
            let total = d.iter().map(|(_, ms)| ms).sum::<f64>();
            info!(
                pod = %pod_ref(pod),
                podUID = %uid,
                podStartMs = format!("{total:.1}"),
                seenToWorkerMs = format!("{:.1}", d[0].1),
                workerToSandboxMs = format!("{:.1}", d[1].1),
                sandboxToContainersMs = format!("{:.1}", d[2].1),
                containersToStartedMs = format!("{:.1}", d[3].1),
                startedToStatusMs = format!("{:.1}", d[4].1),
                "observed pod startup duration"
            );
        }
        if self.statuses.set(uid, status) {
            debug!(pod = %pod_ref(pod), podUID = %uid, phase = %phase, "pod status changed");
        }
        phase
    }

    /// kubelet's `SyncPod` before the runtime acts: containers that run without a pod
    /// cgroup (started before per-QoS cgroups were on) are killed so they come back
    /// inside one, except a `Never` pod none of whose containers may restart, which
    /// then ends without; and the pod's cgroup is made before its sandbox.
    async fn ensure_pod_cgroup(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
    ) -> Result<(), PodSyncError> {
        if !self.cm.cgroups_per_qos() {
            return Ok(());
        }
        if !self.cm.pod_cgroup_exists(pod) && rt.running_containers().next().is_some() {
            info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), "killing the pod: its containers run outside its pod cgroup (started without one, or its QoS class changed)");
            self.runtime.kill_pod_status(pod, rt, None).await?;
            // A run-once pod ends here: none of its containers may run again.
            let run_once = pod.spec.as_ref().is_some_and(|spec| {
                spec.restart_policy.as_deref() == Some("Never")
                    && !spec
                        .containers
                        .iter()
                        .any(|c| is_container_restartable(spec, c))
            });
            if run_once {
                return Ok(());
            }
        }
        self.cm.ensure_pod(pod)?;
        Ok(())
    }

    /// After a sync: a resize the runtime now has is complete (`PodResizeInProgress`
    /// goes, `ResizeCompleted`, and the waiting resizes are tried again); one it
    /// refused says why in the condition (reason `Error`).
    fn note_resize(&self, pod: &Pod, run: &Pod, err: Option<&crate::kuberuntime::SyncError>) {
        let uid = pod_uid(pod);
        if !self.allocation.in_progress(uid) {
            return;
        }
        let generation = pod.metadata.generation.unwrap_or(0);
        if let Some(message) = err.and_then(crate::kuberuntime::SyncError::resize_error) {
            if self.allocation.set_in_progress(
                uid,
                Some(super::allocation::RESIZE_ERROR),
                &message,
                generation,
            ) {
                tracing::warn!(pod = %pod_ref(pod), podUID = %uid, generation, "pod resize failed: {message}");
            }
            return;
        }
        if !self.runtime.is_actuated(run) {
            return;
        }
        if self.allocation.clear_in_progress(uid) {
            info!(pod = %pod_ref(pod), podUID = %uid, generation, "pod resize completed: the runtime runs the pod at its allocated resources");
            self.runtime.events().event(
                &crate::events::ObjectRef::pod(pod),
                crate::events::EventType::Normal,
                "ResizeCompleted",
                format!(
                    "Pod resize completed: {}",
                    resize_message(run, generation, None)
                ),
            );
            self.allocation.request_retry();
        }
    }

    /// Reads the pod's runtime status now and stores it in the cache, so what an
    /// action caused is visible at once rather than after the next relist.
    async fn refresh(&self, pod: &Pod) -> Result<PodRuntimeStatus, PodSyncError> {
        let (uid, name, ns) = names(pod);
        let read_at = Instant::now();
        let st = self.runtime.get_pod_status(&uid, &name, &ns).await?;
        self.cache.set(&uid, st.clone(), read_at);
        Ok(st)
    }
}

impl PodSyncer for Syncer {
    async fn sync_pod(
        &self,
        update: UpdateType,
        pod: Arc<Pod>,
        last_sync: Option<Instant>,
    ) -> Result<SyncResult, PodSyncError> {
        let uid = pod_uid(&pod).to_string();
        debug!(pod = %pod_ref(&pod), podUID = %uid, update = update.as_metric(), "syncing pod");
        self.startup.worker_started(&uid, jiff::Timestamp::now());
        // The runtime's view newer than our last sync (the first sync takes what the
        // relists saw, which includes everything adopted after a restart).
        let rt = self
            .cache
            .get_newer_than(&uid, last_sync)
            .await
            .map_err(PodSyncError::Inspect)?;
        let phase = self.update_status(&pod, &rt, false);
        if phase.is_terminal() {
            return Ok(SyncResult {
                terminal: true,
                retry_after: None,
                unchanged: false,
            });
        }
        self.runtime.check_network(&pod)?;
        // The pod as admitted or last resized: what the cgroups and the runtime get.
        let run = self.allocation.allocated_pod(&pod);
        self.ensure_pod_cgroup(&run, &rt).await?;
        self.probes.add_pod(&pod);
        let failed = |id: &str| self.probes.failed(id);
        let res = self.runtime.sync_pod_probed(&run, &rt, &failed).await;
        self.note_resize(&pod, &run, res.as_ref().err());
        let acted = res.as_ref().map(|o| o.acted).unwrap_or(true);
        if acted {
            let fresh = self.refresh(&pod).await?;
            self.update_status(&pod, &fresh, false);
        } else {
            // Back-off reasons may have changed without any runtime action.
            self.update_status(&pod, &rt, false);
        }
        let outcome = res?;
        Ok(SyncResult {
            terminal: false,
            retry_after: outcome.retry_after,
            unchanged: !acted,
        })
    }

    async fn sync_terminating_pod(
        &self,
        pod: Arc<Pod>,
        grace: i64,
        kill_status: Option<KillStatus>,
    ) -> Result<(), PodSyncError> {
        // As kubelet: no liveness or startup kills while the pod stops.
        self.probes.stop_liveness_and_startup(pod_uid(&pod));
        let rt = self.refresh(&pod).await?;
        if let Some(k) = &kill_status {
            // Set before the containers stop, as kubelet does, so what is reported
            // while they stop already says why.
            self.update_status_with(&pod, &rt, true, Some(k));
        }
        self.runtime.kill_pod_status(&pod, &rt, Some(grace)).await?;
        let after = self.refresh(&pod).await?;
        self.update_status_with(&pod, &after, true, kill_status.as_ref());
        if let Some(c) = after.running_containers().next() {
            return Err(PodSyncError::StillRunning(c.name.clone()));
        }
        if let Some(grants) = &self.grants {
            grants
                .release_pod(&pod)
                .await
                .map_err(PodSyncError::Release)?;
        }
        Ok(())
    }

    async fn sync_terminating_runtime_pod(&self, pod: RuntimePod) -> Result<(), PodSyncError> {
        Ok(self.runtime.kill_runtime_pod(&pod, Some(1)).await?)
    }

    async fn sync_terminated_pod(
        &self,
        pod: Option<Arc<Pod>>,
        runtime_pod: Option<RuntimePod>,
    ) -> Result<(), PodSyncError> {
        let (uid, pod_ref) = match (&pod, &runtime_pod) {
            (Some(p), _) => (pod_uid(p).to_string(), pod_ref(p)),
            (None, Some(r)) => (r.uid.clone(), r.pod_ref()),
            (None, None) => return Ok(()),
        };
        self.startup.forget(&uid);
        crate::metrics::forget_pod_pulls(&uid);
        self.probes.remove_pod(&uid);
        // A pod still in the config keeps its (terminal) containers for its status,
        // made final as kubelet's `TerminatePod` (so the status writer can delete it);
        // a pod gone from the config leaves nothing behind.
        if self.pods.contains(&uid) {
            let mut evicted = false;
            if let Some(p) = &pod
                && let Some(mut status) = self.statuses.get(&uid)
            {
                terminate_pod_status(&mut status, p, is_static_pod(p));
                evicted = status.reason.as_deref() == Some(crate::events::reason::EVICTED);
                if self.statuses.set(&uid, status) {
                    debug!(pod = %pod_ref, podUID = %uid, "pod status made final");
                }
            }
            // kubelet's volume manager unmounts the volumes of every terminated pod
            // (an emptyDir's content goes with it), so the eviction manager's wait
            // for a pod's resources ends only once its disk is free.
            self.runtime
                .tear_down_volumes(&uid, &pod_ref)
                .await
                .map_err(PodSyncError::Volumes)?;
            if let Some(p) = &pod {
                self.cm.destroy_pod(p)?;
            }
            if evicted {
                // kubelet's container GC removes the content of an evicted pod at once
                // (`ShouldPodContentBeRemoved`): its writable layers and logs are what
                // disk pressure wants back. The final status stays.
                self.runtime.remove_pod(&uid, &pod_ref).await?;
            }
        } else {
            if let Some(p) = &pod {
                self.cm.destroy_pod(p)?;
            }
            self.runtime.remove_pod(&uid, &pod_ref).await?;
            self.cache.delete(&uid);
            self.statuses.remove(&uid);
            // No event can be about this pod any more.
            self.runtime.events().forget_object(&uid);
        }
        Ok(())
    }

    async fn clear_previous_life(&self, pod: Arc<Pod>) -> Result<(), PodSyncError> {
        let uid = pod_uid(&pod).to_string();
        // The old life is fully terminated (its worker finished), so only dead
        // sandboxes and containers are removed here.
        self.runtime.remove_pod(&uid, &pod_ref(&pod)).await?;
        self.statuses.remove(&uid);
        self.startup.forget(&uid);
        // Read the runtime now: a relist that started before the removal must not
        // show the first sync the old containers.
        self.refresh(&pod).await?;
        Ok(())
    }
}
