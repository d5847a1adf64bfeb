//! The runtime manager (kubelet's `kuberuntime_manager.go`: `kubeGenericRuntimeManager`,
//! `NewKubeGenericRuntimeManager` with its options, and the getters): what it holds
//! and how the agent builds it, the waiting reasons it keeps between syncs, and the
//! pods it reads back. What it does lives beside it, as in kubelet's files:
//! `sync_pod.rs` (`SyncPod`), `container_start_steps.rs` (SyncPod's container starts
//! and `doBackOff`), `kill_pod.rs` (`KillPod`), `sandbox.rs`, `container_start.rs` and
//! `container_kill.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::locks::Locked as _;

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, warn};

use super::reader::RuntimeReader;
use super::sandbox::SandboxEnv;
use super::sidecar::{RunningIsStarted, StartupGate};
use super::types::*;
use crate::backoff::Backoff;
use crate::contracts::RuntimeHealth;
use crate::cri::Cri;
use crate::cri::CriError;
use crate::events::EventRecorder;
use crate::images::{ImagePuller, PullLimit};
use crate::pod::{WaitingReason, pod_ref};

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

/// Drives the CRI on behalf of pod workers.
pub(crate) struct RuntimeManager {
    pub(super) cri: Arc<dyn Cri>,
    reader: RuntimeReader,
    pub(super) sandbox_env: SandboxEnv,
    /// The node's InternalIPs, primary first (pods' `hostIPs`).
    host_ips: Vec<String>,
    pub(super) crash_backoff: Backoff,
    pub(super) images: ImagePuller,
    pull_records: Option<Arc<crate::images::PullRecords>>,
    pub(super) reasons: ReasonCache,
    /// Bounds how many pods create sandboxes and start containers at once. On a small
    /// node containerd finishes a burst fastest a few pods at a time: 105 pods all at
    /// once took 1.25 × as long as 4 at a time, and each pod waited twice as long
    /// (benches/agent.rs). Container restarts take a slot too; kills never wait for one.
    pub(super) start_slots: tokio::sync::Semaphore,
    /// Whether a running sidecar has started (its startup probe passed), so the
    /// next init container may start.
    pub(super) startup_gate: Arc<dyn StartupGate>,
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

    pub(super) fn actuator(&self) -> super::resize::Actuator<'_> {
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
}
