//! kubelet's `SyncPod` (`kuberuntime_manager.go`): the network check before it, and
//! its steps in its order: the pod's actions and resize computed, its data, downward
//! and API-object volumes brought up to date, the whole pod killed when its sandbox
//! changed (`killPodWithSyncResult`) or else the containers it should not keep, the
//! sandbox made (with its user namespace and prepared claims), then the containers
//! started (`container_start_steps.rs`) and the running ones resized
//! (`doPodResizeAction`, `resize.rs`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use tracing::{debug, info, warn};

use super::actions::{PodActions, compute_pod_actions_probed};
use super::container::PodEnv;
use super::container_kill::{stop_plan, termination_grace};
use super::container_start::StartContext;
use super::container_start_steps::ContainerStarts;
use super::errors::SyncError;
use super::kill_pod::hook_target;
use super::manager::RuntimeManager;
use super::sandbox;
use super::types::*;
use crate::events::EventType::{Normal, Warning};
use crate::events::{ObjectRef, reason};
use crate::pod::{pod_ref, pod_uid};

/// The outcome of one successful sync.
#[derive(Debug, Default)]
pub(crate) struct SyncOutcome {
    /// When a back-off (crash loop or image pull) ends and the pod should be synced again.
    pub retry_after: Option<Duration>,
    /// True when the sync changed something in the runtime.
    pub acted: bool,
}

impl RuntimeManager {
    /// kubelet's network check at the top of `SyncPod`: while the runtime says its
    /// network is not ready, a pod off the host network is not synced, with kubelet's
    /// `NetworkNotReady` event; it is tried again on the worker's back-off.
    pub(crate) fn check_network(&self, pod: &Pod) -> Result<(), SyncError> {
        let Some(e) = self.runtime_state.network_error() else {
            return Ok(());
        };
        if crate::pod::is_host_network(pod) {
            return Ok(());
        }
        let err = SyncError::NetworkNotReady(e);
        let msg = err.to_string();
        debug!(pod = %pod_ref(pod), podUID = %crate::pod::pod_uid(pod), event = reason::NETWORK_NOT_READY, "{msg}");
        (self.events).event(
            &ObjectRef::pod(pod),
            Warning,
            reason::NETWORK_NOT_READY,
            msg,
        );
        Err(err)
    }

    fn pod_env(
        &self,
        status_ips: &[String],
        pod: &Pod,
        objects: Option<Arc<crate::objects::PodObjects>>,
    ) -> PodEnv {
        let pod_ips = if crate::pod::is_host_network(pod) {
            self.host_ips().to_vec()
        } else {
            status_ips.to_vec()
        };
        PodEnv {
            pod_ips,
            host_ips: self.host_ips().to_vec(),
            allocatable: self.sandbox_env.allocatable,
            objects,
            pods_dir: self.sandbox_env.pods_dir.clone(),
        }
    }

    /// Brings the pod's runtime state towards its spec. Back-offs are not errors: they
    /// show as waiting reasons and come back as `retry_after`.
    #[cfg(test)]
    pub(crate) async fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
    ) -> Result<SyncOutcome, SyncError> {
        self.sync_pod_probed(pod, status, &|_| None).await
    }

    /// `sync_pod`, with the liveness/startup probe that failed a container (by ID).
    /// The steps of kubelet's `SyncPod`, in its order.
    pub(crate) async fn sync_pod_probed(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        failed_probe: &(dyn Fn(&str) -> Option<crate::pod::ProbeKind> + Sync),
    ) -> Result<SyncOutcome, SyncError> {
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod).to_string();
        // Step 1: compute sandbox and container changes, and the resize.
        let mut actions =
            compute_pod_actions_probed(pod, status, self.startup_gate.as_ref(), failed_probe);
        let actuated = |name: &str| (self.actuated.as_ref())?.container(&uid, name);
        super::resize::compute_resize(pod, status, &actuated, &mut actions);
        if self.pod_level_changed(pod, &actions) {
            // kubelet's pod-level resize: only the pod cgroup changes.
            actions.resize.update_pod = true;
        }
        debug!(pod = %pod_ref, podUID = %uid, actions = actions.to_string().as_str(), "computed pod actions");
        crate::volumes::make_pod_data_dirs(&self.sandbox_env.pods_dir, &uid)?;
        self.update_downward_volumes(pod);
        let objects = self.resolve_objects(pod).await;
        if let Some(o) = &objects {
            self.update_object_volumes(pod, o);
        }
        let pull_secrets = self.pull_secrets(pod, objects.as_deref());
        let mut outcome = SyncOutcome::default();
        if actions.is_noop() {
            return Ok(outcome);
        }
        outcome.acted = true;

        // Step 2: kill the pod if its sandbox changed (or all is done); step 3: else
        // kill the running containers it should not keep.
        if actions.kill_pod {
            self.kill_pod_for_sync(pod, status, &actions).await?;
            if !actions.create_sandbox {
                return Ok(outcome);
            }
        } else {
            self.kill_unwanted_containers(pod, status, &actions).await;
        }

        self.prune_dead_containers(pod, status).await;
        let _slot = self.start_slots.acquire().await.expect("never closed");

        if let (true, Some(o)) = (actions.create_sandbox, &objects) {
            self.set_up_object_volumes(pod, o)?;
        }
        // Step 4: create a sandbox if needed.
        let mut sandbox_config = sandbox::sandbox_config(pod, actions.attempt, &self.sandbox_env)?;
        match self.user_namespace(pod, objects.as_deref()) {
            Ok(userns) => sandbox::set_user_namespace(&mut sandbox_config, userns),
            Err(e) => {
                // kubelet's event and wording (its sandbox config fails); retried.
                let msg = format!("Failed to create pod sandbox: {e}");
                warn!(pod = %pod_ref, podUID = %uid, event = "FailedCreatePodSandBox", "{msg}");
                let pod_obj = ObjectRef::pod(pod);
                (self.events).event(&pod_obj, Warning, reason::FAILED_CREATE_POD_SANDBOX, msg);
                return Err(SyncError::UserNamespace(e));
            }
        }
        if actions.create_sandbox {
            self.prepare_dynamic_resources(pod).await?;
        }
        let (sandbox_id, ips) = if actions.create_sandbox {
            self.create_pod_sandbox(
                pod,
                status,
                actions.attempt,
                &sandbox_config,
                objects.as_deref(),
            )
            .await?
        } else {
            match actions.sandbox_id.clone() {
                Some(id) => (id, status.ips.clone()),
                None => return Ok(outcome),
            }
        };
        let env = self.pod_env(&ips, pod, objects);
        let spec = pod.spec.as_ref().expect("pod with actions has a spec");
        let ctx = StartContext {
            pod,
            status,
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_config,
            env: &env,
            pull_secrets: &pull_secrets,
        };

        // Step 5: start the ephemeral containers; step 6: the init containers; step 7:
        // the regular containers.
        let mut started = ContainerStarts::default();
        self.start_ephemeral_containers(&ctx, spec, &actions.start_ephemeral, &mut started)
            .await;
        self.start_init_containers(&ctx, spec, &actions.start_init, &mut started)
            .await;
        // Step 7: resize the running containers and the pod cgroup; step 8: start.
        let resized = self.resize(pod, &actions).await;
        self.start_regular_containers(&ctx, spec, &actions.start, &mut started)
            .await;
        outcome.retry_after = started.retry_after;
        if started.errors.is_empty() {
            resized.map(|()| outcome)
        } else {
            Err(SyncError::Containers {
                errors: started.errors,
                retry_after: outcome.retry_after,
            })
        }
    }

    /// kubelet's `PrepareDynamicResources` before a sandbox: a failure is a Warning
    /// event `FailedPrepareDynamicResources` and the sync ends, to be tried again.
    async fn prepare_dynamic_resources(&self, pod: &Pod) -> Result<(), SyncError> {
        let Some(grants) = &self.grants else {
            return Ok(());
        };
        if let Err(e) = grants.prepare_pod(pod).await {
            let msg = format!("Failed to prepare dynamic resources: {e}");
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), event = reason::FAILED_PREPARE_DYNAMIC_RESOURCES, "{msg}");
            let pod_obj = ObjectRef::pod(pod);
            let why = reason::FAILED_PREPARE_DYNAMIC_RESOURCES;
            (self.events).event(&pod_obj, Warning, why, msg);
            return Err(SyncError::PrepareResources(e));
        }
        Ok(())
    }

    /// Whether the pod's own resources (`spec.resources`) differ from those its pod
    /// cgroup was last given, for a pod that keeps its sandbox; unknown is no change.
    fn pod_level_changed(&self, pod: &Pod, actions: &PodActions) -> bool {
        !(actions.kill_pod || actions.create_sandbox || crate::pod::is_static_pod(pod))
            && self.pod_level_differs(pod)
    }

    /// Whether the pod's own resources differ from the actuated ones (unknown: no).
    fn pod_level_differs(&self, pod: &Pod) -> bool {
        let Some(given) = (self.actuated.as_ref()).and_then(|s| s.pod(pod_uid(pod))) else {
            return false;
        };
        let wanted = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
        !crate::allocation::same_optional(wanted, given.pod_level.as_ref())
    }

    /// SyncPod's step 7 (kubelet's `doPodResizeAction`), when the actions resize.
    async fn resize(&self, pod: &Pod, actions: &PodActions) -> Result<(), SyncError> {
        if actions.resize.is_empty() {
            return Ok(());
        }
        super::resize::log_restarts(pod, actions);
        let started = std::time::Instant::now();
        let res = self.actuator().resize(pod, &actions.resize).await;
        crate::metrics::pod_resize_duration(started.elapsed(), res.is_ok());
        match &res {
            Err(e) => super::resize::log_failed(pod, e),
            Ok(()) => self.record_pod_level(pod),
        }
        res.map_err(SyncError::Resize)
    }

    /// kubelet's actuated pod-level resources: what the pod cgroup was made or last
    /// resized with.
    pub(super) fn record_pod_level(&self, pod: &Pod) {
        let Some(state) = &self.actuated else {
            return;
        };
        let level = pod.spec.as_ref().and_then(|s| s.resources.clone());
        if let Err(e) = state.set_pod_level(pod_uid(pod), level) {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), error = %e, "cannot record the pod's actuated pod-level resources");
        }
    }

    /// Changed labels or annotations reach the downwardAPI volumes on every sync; a
    /// failure is only logged.
    fn update_downward_volumes(&self, pod: &Pod) {
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod);
        match crate::volumes::refresh_downward_volumes(
            pod,
            &self.sandbox_env.pods_dir,
            &self.sandbox_env.allocatable,
        ) {
            Ok(written) if !written.is_empty() => {
                info!(pod = %pod_ref, podUID = %uid, volumes = %written.join(","), "updated downwardAPI volumes");
            }
            Ok(_) => {}
            Err(e) => {
                warn!(pod = %pod_ref, podUID = %uid, error = %e, "cannot update downwardAPI volumes");
            }
        }
    }

    /// kubelet's `getPullSecretsForPod`, on every sync: the pod's `imagePullSecrets` that
    /// could be had. The names that could not (no apiserver, not found, refused) go into
    /// one FailedToRetrieveImagePullSecret warning, and the pull goes on without them.
    fn pull_secrets(
        &self,
        pod: &Pod,
        objects: Option<&crate::objects::PodObjects>,
    ) -> Vec<Arc<Secret>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let refs = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref());
        let mut found = Vec::new();
        let mut failed = Vec::new();
        // An empty name passed API validation once; kubelet skips it without a word.
        for name in refs
            .into_iter()
            .flatten()
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty())
        {
            match crate::objects::PodObjects::secret(objects, ns, name, false) {
                Ok(Some(s)) => found.push(s),
                Ok(None) => failed.push(name),
                Err(e) => {
                    info!(pod = %pod_ref(pod), secret = %format!("{ns}/{name}"), error = %e, "Unable to retrieve pull secret, the image pull may not succeed.");
                    failed.push(name);
                }
            }
        }
        if !failed.is_empty() {
            let msg = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                failed.join(", ")
            );
            let obj = ObjectRef::pod(pod);
            (self.events).event(
                &obj,
                Warning,
                reason::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                &msg,
            );
        }
        found
    }

    /// The ConfigMaps, Secrets and tokens this sync uses (`None` standalone), read once
    /// so volumes and env see the same objects.
    async fn resolve_objects(&self, pod: &Pod) -> Option<Arc<crate::objects::PodObjects>> {
        match &self.objects {
            Some(m) => Some(Arc::new(m.resolve(pod).await)),
            None => None,
        }
    }

    /// Changed ConfigMaps, Secrets and tokens reach the pod's volumes on every sync; a
    /// failure is only logged.
    fn update_object_volumes(&self, pod: &Pod, objects: &crate::objects::PodObjects) {
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod);
        let pods_dir = &self.sandbox_env.pods_dir;
        match crate::volumes::refresh_object_volumes(
            pod,
            pods_dir,
            objects,
            &self.sandbox_env.allocatable,
        ) {
            Ok(w) if !w.is_empty() => {
                info!(pod = %pod_ref, podUID = %uid, volumes = %w.join(","), "updated API object volumes");
            }
            Ok(_) => {}
            Err(e) => {
                warn!(pod = %pod_ref, podUID = %uid, error = %e, "cannot update API object volumes");
            }
        }
    }

    /// SyncPod's step 2 (kubelet's `killPodWithSyncResult`): kills the whole pod, as its
    /// sandbox changed (it is made again) or all its containers are done.
    async fn kill_pod_for_sync(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        actions: &PodActions,
    ) -> Result<(), SyncError> {
        let why = if actions.create_sandbox {
            "pod sandbox changed, it will be killed and re-created"
        } else {
            "all containers of the pod are done"
        };
        info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), reason = why, "killing pod");
        if actions.create_sandbox {
            let msg = "Pod sandbox changed, it will be killed and re-created.";
            (self.events).event(&ObjectRef::pod(pod), Normal, reason::SANDBOX_CHANGED, msg);
        }
        self.kill_pod_status(pod, status, None).await
    }

    /// SyncPod's step 3: kills the running containers the pod should not keep (changed
    /// spec, failed probe), each with its preStop hook; a failure is only logged.
    async fn kill_unwanted_containers(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        actions: &PodActions,
    ) {
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod);
        let grace = termination_grace(pod);
        let target = hook_target(pod, &status.ips, self.host_ip());
        for (id, name, why) in &actions.kill {
            // A probe's own terminationGracePeriodSeconds replaces the pod's.
            let grace = (actions.probe_grace.iter())
                .find(|(i, _)| i == id)
                .map_or(grace, |(_, g)| *g);
            info!(pod = %pod_ref, podUID = %uid, container = %name, containerID = %id, reason = %why, gracePeriod = grace, "killing container");
            (self.events).event(
                &ObjectRef::container(pod, name),
                Normal,
                reason::KILLING,
                why,
            );
            let plan = stop_plan(pod, id, name, grace);
            if let Err(e) = self.stop_with_hooks(pod, &plan, &target, None).await {
                warn!(pod = %pod_ref, podUID = %uid, container = %name, error = %e, "failed to kill container");
            }
        }
    }

    /// kubelet's `WaitForAttachAndMount` for the API-object volumes: it waits for the
    /// pod's volumes before the runtime sync, so no sandbox (nor IP) while one fails.
    fn set_up_object_volumes(
        &self,
        pod: &Pod,
        objects: &crate::objects::PodObjects,
    ) -> Result<(), SyncError> {
        let env = &self.sandbox_env;
        let failed =
            crate::volumes::set_up_object_volumes(pod, &env.pods_dir, objects, &env.allocatable);
        if failed.is_empty() {
            return Ok(());
        }
        for (_, msg) in &failed {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), event = "FailedMount", "{msg}");
            let pod_obj = ObjectRef::pod(pod);
            (self.events).event(&pod_obj, Warning, reason::FAILED_MOUNT, msg.clone());
        }
        let names = failed.into_iter().map(|(v, _)| v).collect();
        Err(SyncError::UnmountedVolumes(names))
    }
}

#[cfg(test)]
#[path = "sync_pod_tests.rs"]
mod tests;
