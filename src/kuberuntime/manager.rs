//! The runtime manager (kubelet's `kubeGenericRuntimeManager`): reads pods back from
//! CRI objects, and carries out one pod sync (sandbox, images, init containers,
//! containers, restarts with CrashLoopBackOff) or a kill.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::locks::Locked as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Secret};
use tracing::{debug, info, warn};

use super::actions::{PodActions, compute_pod_actions_probed};
use super::container::{self, PodEnv};
use super::container_kill::{MIN_GRACE_SECS, gone_is_ok, stop_plan, termination_grace};
use super::container_start::{ContainerStart, StartContext};
use super::errors::{ContainerStartError, StopError, SyncError};
use super::gc;
use super::labels::{self, ContainerType};
use super::lifecycle;
use super::reader::RuntimeReader;
use super::sandbox::{self, SandboxEnv};
use super::sidecar::{self, RunningIsStarted, StartupGate, TerminationOrder};
use super::types::*;
use crate::backoff::Backoff;
use crate::contracts::RuntimeHealth;
use crate::cri::Cri;
use crate::cri::CriError;
use crate::events::EventType::{Normal, Warning};
use crate::events::{EventRecorder, ObjectRef, reason};
use crate::images::{ImagePuller, PullLimit};
use crate::pod::{WaitingReason, pod_ref, pod_uid};

/// The outcome of one successful sync.
#[derive(Debug, Default)]
pub(crate) struct SyncOutcome {
    /// When a back-off (crash loop or image pull) ends and the pod should be synced again.
    pub retry_after: Option<Duration>,
    /// True when the sync changed something in the runtime.
    pub acted: bool,
}

/// Why a container is waiting (reason, message), by pod UID and container name:
/// kept between syncs, shown as the container's `waiting` state.
#[derive(Debug, Default)]
pub(crate) struct ReasonCache {
    inner: Mutex<HashMap<(String, String), (WaitingReason, String)>>,
}

impl ReasonCache {
    /// Containers with a waiting reason kept (the census).
    pub(crate) fn len(&self) -> usize {
        self.inner.locked().len()
    }

    pub(crate) fn get(&self, uid: &str, name: &str) -> Option<(WaitingReason, String)> {
        self.inner
            .locked()
            .get(&(uid.to_string(), name.to_string()))
            .cloned()
    }
    pub(super) fn set(&self, uid: &str, name: &str, reason: WaitingReason, message: String) {
        self.inner
            .locked()
            .insert((uid.to_string(), name.to_string()), (reason, message));
    }
    pub(super) fn clear(&self, uid: &str, name: &str) {
        self.inner
            .locked()
            .remove(&(uid.to_string(), name.to_string()));
    }
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.inner.locked().retain(|(u, _), _| u != uid);
    }
}

/// What the container starts of one sync came to: the soonest end of a back-off
/// among them, and the containers that failed.
#[derive(Default)]
struct ContainerStarts {
    retry_after: Option<Duration>,
    errors: Vec<ContainerStartError>,
}

/// Converts a CRI wall-clock timestamp (ns) into a tokio instant in the past.
fn instant_of(ns: i64) -> tokio::time::Instant {
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let ago = Duration::from_nanos((now_ns - ns).max(0) as u64);
    tokio::time::Instant::now()
        .checked_sub(ago)
        .unwrap_or_else(tokio::time::Instant::now)
}

/// Drives the CRI on behalf of pod workers.
pub(crate) struct RuntimeManager {
    pub(super) cri: Arc<dyn Cri>,
    reader: RuntimeReader,
    pub(super) sandbox_env: SandboxEnv,
    /// The node's InternalIPs, primary first (pods' `hostIPs`).
    host_ips: Vec<String>,
    crash_backoff: Backoff,
    pub(super) images: ImagePuller,
    pull_records: Option<Arc<crate::images::PullRecords>>,
    pub(super) reasons: ReasonCache,
    /// Bounds how many pods create sandboxes and start containers at once. On a small
    /// node containerd finishes a burst fastest a few pods at a time: 105 pods all at
    /// once took 1.25 × as long as 4 at a time, and each pod waited twice as long
    /// (benches/agent.rs). Container restarts take a slot too; kills never wait for one.
    start_slots: tokio::sync::Semaphore,
    /// Whether a running sidecar has started (its startup probe passed), so the
    /// next init container may start.
    startup_gate: Arc<dyn StartupGate>,
    /// `--container-log-symlink-dir`: where the legacy log symlinks go (None: none made).
    pub(super) log_symlink_dir: Option<std::path::PathBuf>,
    /// Containers being removed now: the pod worker's prune and housekeeping's GC may
    /// pick the same dead container, and only one of them removes it (kubelet's GC
    /// never overlaps removals either).
    pub(super) removing: std::sync::Mutex<std::collections::HashSet<String>>,
    /// ConfigMaps, Secrets and tokens from the apiserver (None: standalone).
    pub(super) objects: Option<Arc<crate::objects::ObjectManager>>,
    /// Where container, image and sandbox events go.
    pub(super) events: EventRecorder,
    /// Rules run before RunPodSandbox, CreateContainer and StartContainer (the node
    /// QoS hooks).
    pub(super) hooks: super::hooks::RuntimeHooks,
    /// The resource managers (CPU, memory, devices, DRA): what each container gets.
    pub(super) grants: Option<Arc<dyn crate::contracts::ResourceGrants>>,
    /// What the runtime's handlers support, from its last status (recursive
    /// read-only mounts, user namespaces).
    pub(super) runtime_state: Arc<RuntimeHealth>,
    /// The ID blocks of `hostUsers: false` pods.
    pub(super) userns: super::userns::UsernsManager,
    /// What the runtime was last told each container runs with (kubelet's actuated
    /// resources, `actuated_pods_state`): a resize is the difference to the allocation.
    /// None: not kept (a resize then goes by what the runtime reports).
    pub(super) actuated: Option<Arc<crate::allocation::ResourceState>>,
    /// The pod cgroups a resize changes (None: pods have none of oxlet's).
    pod_cgroups: Option<Arc<crate::cm::ContainerManager>>,
}

/// The image volumes container `c` mounts, each as a container whose image and pull
/// policy are the volume's (`volumes[].image.reference`, `pullPolicy`), so the one
/// image puller pulls it; the container's own name keeps its events and back-off.
pub(super) fn image_volume_pulls(pod: &Pod, c: &Container) -> Vec<(String, Container)> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut out = Vec::new();
    for vm in c.volume_mounts.iter().flatten() {
        let image = (volumes.unwrap_or_default().iter())
            .find(|v| v.name == vm.name)
            .and_then(|v| v.image.as_ref());
        let Some(image) = image else { continue };
        if out.iter().any(|(name, _)| *name == vm.name) {
            continue;
        }
        let as_container = Container {
            name: c.name.clone(),
            image: image.reference.clone(),
            image_pull_policy: image.pull_policy.clone(),
            ..Default::default()
        };
        out.push((vm.name.clone(), as_container));
    }
    out
}

/// Pods starting at once: four per core, at least 4.
fn start_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    (4 * cores).max(4)
}

impl RuntimeManager {
    /// Containers in crash back-off, containers with a waiting reason, containers
    /// being removed (the census).
    pub(crate) fn census(&self) -> (usize, usize, usize) {
        (
            self.crash_backoff.len(),
            self.reasons.len(),
            self.removing.locked().len(),
        )
    }

    /// `cri` is the real client in the agent, the in-memory fake in unit tests.
    pub(crate) fn new(cri: Arc<dyn Cri>, sandbox_env: SandboxEnv, host_ip: String) -> Self {
        let userns = super::userns::UsernsManager::new(&sandbox_env.pods_dir);
        RuntimeManager {
            reader: RuntimeReader::new(
                cri.clone(),
                sandbox_env.pods_dir.clone(),
                sandbox_env.pod_logs_dir.clone(),
            ),
            cri,
            sandbox_env,
            host_ips: vec![host_ip],
            crash_backoff: Backoff::default(),
            images: ImagePuller::default(),
            pull_records: None,
            reasons: ReasonCache::default(),
            start_slots: tokio::sync::Semaphore::new(start_concurrency()),
            startup_gate: Arc::new(RunningIsStarted),
            log_symlink_dir: None,
            removing: Default::default(),
            objects: None,
            events: EventRecorder::log_only(),
            hooks: Default::default(),
            grants: None,
            runtime_state: Default::default(),
            userns,
            actuated: None,
            pod_cgroups: None,
        }
    }

    /// Keeps the actuated resources in `state` (the agent's is the root dir's
    /// `actuated_pods_state`, read back at start so nothing is applied twice).
    pub(crate) fn with_actuated(mut self, state: Arc<crate::allocation::ResourceState>) -> Self {
        self.actuated = Some(state);
        self
    }

    /// The container manager whose pod cgroups a resize changes.
    pub(crate) fn with_pod_cgroups(mut self, cm: Arc<crate::cm::ContainerManager>) -> Self {
        self.pod_cgroups = cm.cgroups_per_qos().then_some(cm);
        self
    }

    /// Forgets the actuated resources of every pod `keep` says no to (housekeeping,
    /// kubelet's `RemoveOrphanedPods`).
    pub(crate) fn prune_actuated(&self, keep: &dyn Fn(&str) -> bool) {
        let Some(state) = &self.actuated else {
            return;
        };
        if let Err(e) = state.retain(keep) {
            warn!(error = %e, "cannot write the actuated resources of pods that are gone");
        }
    }

    fn actuator(&self) -> super::resize::Actuator<'_> {
        super::resize::Actuator {
            cri: self.cri.as_ref(),
            cgroups: self.pod_cgroups.as_deref(),
            hooks: &self.hooks,
            actuated: self.actuated.as_deref(),
            env: &self.sandbox_env,
        }
    }

    /// Reads the runtime handlers' features from `state`, which the runtime health
    /// check keeps (by default: none known, so nothing is supported).
    pub(crate) fn with_runtime_state(mut self, state: Arc<RuntimeHealth>) -> Self {
        self.runtime_state = state;
        self
    }

    /// `userNamespaces.idsPerPod` and `maxPods` for `hostUsers: false` pods, checked
    /// against the kubelet range now, as kubelet's start does (`MakeUserNsManager`).
    pub(crate) fn with_user_namespaces(
        mut self,
        ids_per_pod: u32,
        max_pods: u32,
    ) -> Result<Self, super::userns::UsernsError> {
        self.userns = self.userns.with_limits(ids_per_pod, max_pods);
        self.userns.check()?;
        Ok(self)
    }

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

    /// kubelet's `runtimeClassSupportsRecursiveReadOnlyMounts`: whether the pod's
    /// runtime handler is listed with support for recursive read-only mounts.
    pub(crate) fn supports_recursive_read_only(&self, pod: &Pod) -> bool {
        let handler = self.known_handler(pod);
        let handler = handler.as_str();
        match self.runtime_state.handler(handler) {
            Some(h) => h.recursive_read_only_mounts,
            None => {
                debug!(pod = %pod_ref(pod), runtimeHandler = handler, "runtime handler not listed by the runtime: recursive read-only mounts unsupported");
                false
            }
        }
    }

    /// Plugs in the prober's startup results (the default: running is started).
    pub(crate) fn with_startup_gate(mut self, gate: Arc<dyn StartupGate>) -> Self {
        self.startup_gate = gate;
        self
    }

    /// Records kubelet's container, image and sandbox events to `events`.
    pub(crate) fn with_events(mut self, events: EventRecorder) -> Self {
        self.images = std::mem::take(&mut self.images).with_events(events.clone());
        self.events = events;
        self
    }

    /// Sets the rules run before each sandbox is run and each container is created
    /// and started.
    /// With the resource managers: claims prepared before the sandbox, each
    /// container's cpuset, devices and CDI devices at creation.
    pub(crate) fn with_resource_grants(
        mut self,
        grants: Arc<dyn crate::contracts::ResourceGrants>,
    ) -> Self {
        self.grants = Some(grants);
        self
    }

    pub(crate) fn with_runtime_hooks(mut self, hooks: super::hooks::RuntimeHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Where this runtime's events go; the sync loop records its own (admission) there too.
    pub(crate) fn events(&self) -> &EventRecorder {
        &self.events
    }

    /// Sets how many image pulls run at once (serialized by default, as in kubelet),
    /// where the node's registry logins are read, and the credential provider plugins.
    pub(crate) fn with_image_pulls(
        mut self,
        limit: PullLimit,
        node_logins: crate::credentials::NodeKeyring,
        plugins: Option<Arc<crate::credentials::CredentialPlugins>>,
    ) -> Self {
        self.images = ImagePuller::new(limit)
            .with_events(self.events.clone())
            .with_node_keyring(node_logins)
            .with_credential_plugins(plugins);
        self
    }

    /// Keeps image pull records and checks a pod's pull credentials before it uses a
    /// present image (`imagePullCredentialsVerificationPolicy`).
    pub(crate) fn with_pull_records(mut self, records: Arc<crate::images::PullRecords>) -> Self {
        self.images = std::mem::take(&mut self.images).with_pull_records(records.clone());
        self.pull_records = Some(records);
        self
    }

    /// The image pull records, for the image GC's pruning and the start's recovery.
    pub(crate) fn pull_records(&self) -> Option<Arc<crate::images::PullRecords>> {
        self.pull_records.clone()
    }

    /// Makes the legacy container log symlinks in `dir` (kubelet's /var/log/containers).
    pub(crate) fn with_log_symlinks(mut self, dir: std::path::PathBuf) -> Self {
        self.log_symlink_dir = Some(dir);
        self
    }

    /// Reads ConfigMaps, Secrets and service-account tokens through `objects`
    /// (cluster mode), for volumes and env; `None` stays standalone.
    pub(crate) fn with_objects(
        mut self,
        objects: Option<Arc<crate::objects::ObjectManager>>,
    ) -> Self {
        self.objects = objects;
        self
    }

    pub(crate) fn cri(&self) -> &dyn Cri {
        self.cri.as_ref()
    }

    /// The read-only view of the runtime (for the PLEG).
    pub(crate) fn reader(&self) -> RuntimeReader {
        self.reader.clone()
    }

    /// The node's primary InternalIP.
    pub(crate) fn host_ip(&self) -> &str {
        self.host_ips.first().map_or("", String::as_str)
    }

    /// The node's InternalIPs, primary first (a dual-stack node has one per family).
    pub(crate) fn host_ips(&self) -> &[String] {
        &self.host_ips
    }

    /// Every InternalIP of the node (`--node-ip`'s dual-stack pair), not just the
    /// primary one given to `new`.
    pub(crate) fn with_host_ips(mut self, host_ips: Vec<String>) -> Self {
        if !host_ips.is_empty() {
            self.host_ips = host_ips;
        }
        self
    }

    /// The resources the runtime was last given for the pod's containers.
    pub(crate) fn actuated(&self, uid: &str) -> Option<crate::allocation::PodResources> {
        self.actuated.as_ref()?.pod(uid)
    }

    /// Whether the runtime runs `pod`'s containers at the resources it asks for: each
    /// resizable container it was given resources for has them (one not running has
    /// nothing to resize).
    pub(crate) fn is_actuated(&self, pod: &Pod) -> bool {
        let (Some(state), Some(spec)) = (&self.actuated, pod.spec.as_ref()) else {
            return true;
        };
        let Some(given) = state.pod(crate::pod::pod_uid(pod)) else {
            return true;
        };
        let pod_level = spec.resources.as_ref();
        crate::allocation::same_optional(pod_level, given.pod_level.as_ref())
            && crate::allocation::resizable_containers(spec).all(|(c, _)| {
                given
                    .containers
                    .get(&c.name)
                    .is_none_or(|a| super::resize::settled(c.resources.as_ref(), a))
            })
    }

    pub(crate) fn reasons(&self) -> &ReasonCache {
        &self.reasons
    }

    /// `<root-dir>/pods`: the per-pod directories.
    pub(crate) fn pods_dir(&self) -> &std::path::Path {
        &self.sandbox_env.pods_dir
    }

    /// `--pod-logs-dir`: the pod log directories.
    pub(crate) fn pod_logs_dir(&self) -> &std::path::Path {
        &self.sandbox_env.pod_logs_dir
    }

    /// Forgets per-pod back-off, waiting reasons and actuated resources of a pod
    /// whose containers are gone.
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.reasons.forget_pod(uid);
        self.crash_backoff.forget_prefix(&format!("{uid}_"));
        self.images.forget_pod(uid);
        if let Some(o) = &self.objects {
            o.forget_pod(uid);
        }
        // Its containers are gone: nothing of it runs with any resources.
        if let Some(Err(e)) = self.actuated.as_ref().map(|a| a.remove_pod(uid)) {
            warn!(podUID = %uid, error = %e, "cannot forget the actuated resources of a removed pod");
        }
    }

    /// Housekeeping of back-off entries.
    pub(crate) fn gc_backoff(&self) {
        self.crash_backoff.gc();
        self.images.gc_backoff();
    }

    /// Every pod in the runtime, grouped by pod UID label (two list calls).
    pub(crate) async fn get_pods(&self) -> Result<Vec<RuntimePod>, CriError> {
        self.reader.get_pods().await
    }

    /// Full status of one pod: every sandbox and container, newest first.
    pub(crate) async fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodRuntimeStatus, CriError> {
        self.reader.get_pod_status(uid, name, namespace).await
    }

    fn pod_env(
        &self,
        status_ips: &[String],
        pod: &Pod,
        objects: Option<Arc<crate::objects::PodObjects>>,
    ) -> PodEnv {
        let pod_ips = if crate::pod::is_host_network(pod) {
            self.host_ips.clone()
        } else {
            status_ips.to_vec()
        };
        PodEnv {
            pod_ips,
            host_ips: self.host_ips.clone(),
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

    /// SyncPod's step 5: starts the ephemeral containers never started yet (`kubectl
    /// debug`), each once; one that fails is not retried until the next sync.
    async fn start_ephemeral_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        let all = spec.ephemeral_containers.as_deref().unwrap_or_default();
        for ec in indices.iter().filter_map(|&i| all.get(i)) {
            let c = container::ephemeral_as_container(ec);
            let mut s = ContainerStart::new(ctx, &c, ContainerType::Ephemeral);
            s.target = ec
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty());
            info!(pod = %s.pod_ref, podUID = %s.uid, container = %c.name, target = s.target.unwrap_or(""),
                cause = "in the pod's ephemeralContainers with no instance yet", "starting ephemeral container");
            match self.start_one(s).await {
                Ok(retry) => merge_retry(&mut started.retry_after, retry),
                Err(e) => started.errors.push(e),
            }
        }
    }

    /// SyncPod's step 6: starts the init containers due, in order. A sidecar that cannot
    /// start does not hold up the others; a regular init container does.
    async fn start_init_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        for &i in indices {
            let c = &spec.init_containers.as_ref().expect("init index")[i];
            let is_sidecar = sidecar::is_sidecar(c);
            if is_sidecar {
                info!(pod = %pod_ref(ctx.pod), podUID = %pod_uid(ctx.pod), container = %c.name, initIndex = i, "starting sidecar container");
            }
            match self.start_container(ctx, c, ContainerType::Init).await {
                Ok(retry) => merge_retry(&mut started.retry_after, retry),
                Err(e) if is_sidecar => started.errors.push(e),
                Err(e) => {
                    started.errors.push(e);
                    break;
                }
            }
        }
    }

    /// SyncPod's step 7: starts the regular containers together, but one with a
    /// postStart hook blocks the ones after it until the hook returned (kubelet starts
    /// them one by one).
    async fn start_regular_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        let mut futs = Vec::new();
        for (n, &i) in indices.iter().enumerate() {
            let c = &spec.containers[i];
            futs.push(self.start_container(ctx, c, ContainerType::Regular));
            let blocks = c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some());
            if blocks || n + 1 == indices.len() {
                for r in join_all(std::mem::take(&mut futs)).await {
                    match r {
                        Ok(retry) => merge_retry(&mut started.retry_after, retry),
                        Err(e) => started.errors.push(e),
                    }
                }
            }
        }
    }

    /// kubelet's `doBackOff` (CrashLoopBackOff): only a container that already ran and
    /// exited backs off, counted from its newest exited instance (not only the latest
    /// one: a container restarted because a probe failed is running still). Some: the
    /// back-off left, the container does not start now.
    pub(super) fn do_back_off(&self, s: &ContainerStart<'_>) -> Option<Duration> {
        let prev = s.ctx.status.latest_exited(s.name)?;
        let (pod, uid, name) = (s.ctx.pod, s.uid, s.name);
        let key = format!("{uid}_{name}");
        let died = instant_of(prev.finished_at);
        if let Some(left) = self.crash_backoff.remaining(&key, died) {
            let current = self.crash_backoff.current(&key).unwrap_or(left);
            let msg = format!(
                "back-off {} restarting failed container={name} pod={}_{}({uid})",
                crate::duration::format_go_duration(current),
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            // Said once per exit, at -v=2; every later sync in the same back-off at -v=4.
            let told = self
                .reasons
                .get(uid, name)
                .is_some_and(|(r, m)| r == WaitingReason::CrashLoopBackOff && m == msg);
            if told {
                debug!(pod = %s.pod_ref, podUID = %uid, container = name, message = %msg, "container in CrashLoopBackOff");
            } else {
                let ran = Duration::from_nanos(
                    (prev.finished_at - prev.started_at).max(0).unsigned_abs(),
                );
                info!(pod = %s.pod_ref, podUID = %uid, container = name, restartCount = prev.restart_count,
                    cause = %format!("exited with code {} ({}) after running {:.1}s", prev.exit_code, prev.terminated_reason(), ran.as_secs_f64()),
                    "back-off {} restarting failed container ({}s left)",
                    crate::duration::format_go_duration(current), left.as_secs());
            }
            // kubelet's doBackOff: recorded on the container (its fieldPath).
            let event = format!(
                "Back-off restarting failed container {name} in pod {}_{}({uid})",
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            let container_ref = ObjectRef::container(pod, name);
            (self.events).event(&container_ref, Warning, reason::BACK_OFF, event);
            self.reasons
                .set(uid, name, WaitingReason::CrashLoopBackOff, msg);
            return Some(left);
        }
        self.crash_backoff.next(&key, died);
        None
    }

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
fn hook_target(pod: &Pod, ips: &[String], host_ip: &str) -> lifecycle::HookTarget {
    let pod_ip = if crate::pod::is_host_network(pod) {
        host_ip.to_string()
    } else {
        ips.first().cloned().unwrap_or_default()
    };
    lifecycle::HookTarget { pod_ip }
}

fn merge_retry(acc: &mut Option<Duration>, next: Option<Duration>) {
    if let Some(d) = next {
        *acc = Some(acc.map_or(d, |a| a.min(d)));
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
