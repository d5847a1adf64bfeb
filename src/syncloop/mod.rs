//! The sync loop: `sync_loop_iteration` selects over merged pod updates, PLEG events,
//! the 1 s sync tick and the 2 s housekeeping tick, and hands each pod to its worker.

mod admission;
mod allocation;
mod deadline;
mod evictor;
mod monitor;
mod pod_syncer;
mod pod_workers;
mod sysctl_admission;
mod work_queue;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::cm::ContainerManager;
use crate::config::{PodOperation, PodUpdate};
use crate::contracts::{AdmissionChain, RuntimeHandlerFeatures, RuntimeHealth};
use crate::kuberuntime::RuntimeManager;
use crate::pleg::{EventKind, PlegStats, PodLifecycleEvent};
use crate::pod::{PodManager, is_api_mirror};
use crate::pod::{is_static_pod, pod_ref, pod_uid};
use crate::prober::ProbeUpdate;
use crate::status::{StatusManager, rejected, was_rejected};
use crate::tasks::Tasks;
use pod_workers::{KillReason, KillRequest, PodWork, UpdateType};

pub(crate) use evictor::WorkerEvictor;
// The loop's parts the agent builds: the syncer, the pod workers, the work queue.
pub(crate) use pod_syncer::Syncer;
// kubelet's allocation manager: the resources each pod runs at, and its resizes.
pub(crate) use allocation::AllocationManager;
pub(crate) use pod_workers::{Lifecycle, PodWorkers};
pub(crate) use work_queue::WorkQueue;
// The admission handlers the loop's own rules contribute to the chain.
pub(crate) use admission::MaxPods;
pub(crate) use sysctl_admission::SysctlAdmission;
// The loop's liveness, for `/healthz`.
#[cfg(test)]
pub(crate) use monitor::RuntimeUnhealthy;
pub(crate) use monitor::{SyncLoopMonitor, SyncLoopUnhealthy, stall_threshold};

/// kubelet's housekeeping period.
pub(crate) const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// kubelet's `ContainerGCPeriod`: its container GC, which also removes the dangling
/// `/var/log/containers` links (`evictPodLogsDirectories`), runs once a minute, not at
/// every housekeeping pass (a `stat` per link).
const LOG_LINK_GC_PERIOD: Duration = Duration::from_secs(60);
/// The admission reason when `maxPods` is reached (kubelet's).
pub(crate) const OUT_OF_PODS: &str = "OutOfpods";
/// kubelet's sync tick.
pub(crate) const SYNC_PERIOD: Duration = Duration::from_secs(1);

/// Checks the runtime every 5 s (kubelet's `updateRuntimeUp`).
pub(crate) async fn run_runtime_health(
    runtime: Arc<RuntimeManager>,
    health: Arc<RuntimeHealth>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        check_runtime(&runtime, &health).await;
    }
}

/// One runtime check: whether the runtime answers its CRI status, and the handlers
/// it lists with their features. The agent runs one before the first pod syncs, so
/// a pod's mounts see the handlers' features from the start.
pub(crate) async fn check_runtime(runtime: &RuntimeManager, health: &RuntimeHealth) {
    let up = match runtime.cri().status().await {
        Ok(status) => {
            let handlers = handler_features(&status);
            let listed = (handlers.iter())
                .map(|h| {
                    format!(
                        "{:?} (recursiveReadOnlyMounts={}, userNamespaces={})",
                        h.name, h.recursive_read_only_mounts, h.user_namespaces
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            if health.set_handlers(handlers) {
                info!(handlers = %listed, "runtime handlers changed");
            }
            health.set_supplemental_groups_policy(
                (status.features.as_ref()).map(|f| f.supplemental_groups_policy),
            );
            let network = network_error(&status);
            if health.set_network_error(network.clone()) {
                match &network {
                    Some(e) => {
                        error!(networkReady = %e, "Container runtime network not ready: pods off the host network wait, and the node is not Ready");
                    }
                    None => info!("container runtime network is ready"),
                }
            }
            true
        }
        Err(e) => {
            warn!(error = %e, "container runtime status check failed");
            false
        }
    };
    if up != health.is_up() {
        info!(up, "container runtime health changed");
    }
    health.set(up);
}

/// kubelet's network check of `updateRuntimeUp`: the runtime's `NetworkReady`
/// condition, missing or false, is an error worded as kubelet's
/// (`container runtime network not ready: NetworkReady=false reason:... message:...`).
fn network_error(status: &k8s_cri::v1::StatusResponse) -> Option<String> {
    let condition = (status.status.as_ref())
        .and_then(|s| s.conditions.iter().find(|c| c.r#type == "NetworkReady"));
    match condition {
        Some(c) if c.status => None,
        Some(c) => Some(format!(
            "container runtime network not ready: {}={} reason:{} message:{}",
            c.r#type, c.status, c.reason, c.message
        )),
        None => Some("container runtime network not ready: <nil>".to_string()),
    }
}

/// The runtime handlers a CRI status lists, with their features (kubelet's
/// `runtimeState.setRuntimeHandlers`).
fn handler_features(status: &k8s_cri::v1::StatusResponse) -> Vec<RuntimeHandlerFeatures> {
    (status.runtime_handlers.iter())
        .map(|h| {
            let f = h.features.unwrap_or_default();
            RuntimeHandlerFeatures {
                name: h.name.clone(),
                recursive_read_only_mounts: f.recursive_read_only_mounts,
                user_namespaces: f.user_namespaces,
            }
        })
        .collect()
}

/// The sync loop's state and handlers.
pub(crate) struct SyncLoop {
    pub pods: Arc<PodManager>,
    pub workers: PodWorkers<Syncer>,
    pub statuses: Arc<StatusManager>,
    pub runtime: Arc<RuntimeManager>,
    /// Pod cgroups, whose orphans housekeeping removes.
    pub cm: Arc<ContainerManager>,
    pub queue: Arc<WorkQueue>,
    pub pleg: Arc<PlegStats>,
    pub health: Arc<RuntimeHealth>,
    /// Asked before a new pod gets a worker; cm and eviction add their handlers.
    pub admission: AdmissionChain,
    /// What each pod runs at, and the resizes waiting for room.
    allocation: Arc<AllocationManager>,
    /// When the waiting resizes are tried again without a trigger (kubelet's ticker).
    next_resize_retry: Instant,
    /// Every configured source; housekeeping waits until each has reported.
    pub sources: Vec<&'static str>,
    seen: HashSet<&'static str>,
    /// The runtime part of the last housekeeping, still running or done.
    housekeeping: Option<tokio::task::JoinHandle<()>>,
    /// When a housekeeping pass last removed dangling log links.
    last_log_link_gc: Option<Instant>,
    /// Where housekeeping passes run (and the pod workers, in a scope of their own).
    tasks: Tasks,
    /// Last iteration and skip reason, for the `syncloop` health check.
    pub monitor: Arc<monitor::SyncLoopMonitor>,
    /// Woken when a static or mirror pod changes (cluster mode: the mirror pod reconciler).
    mirror_hook: Option<Arc<Notify>>,
    /// Set once every source has reported: kubelet deletes orphaned mirror pods only
    /// then, since before it a static pod not yet read looks like one that is gone.
    sources_ready_tx: watch::Sender<bool>,
}

/// The channels and tickers `sync_loop_iteration` selects over.
pub(crate) struct LoopInputs {
    pub updates: mpsc::Receiver<PodUpdate>,
    pub pleg: mpsc::Receiver<PodLifecycleEvent>,
    pub sync_tick: Interval,
    pub housekeeping_tick: Interval,
    /// Probe result changes (None: no prober, as in some unit tests).
    pub probes: Option<mpsc::Receiver<ProbeUpdate>>,
}

impl LoopInputs {
    pub(crate) fn new(
        updates: mpsc::Receiver<PodUpdate>,
        pleg: mpsc::Receiver<PodLifecycleEvent>,
    ) -> Self {
        let mut sync_tick = tokio::time::interval(SYNC_PERIOD);
        sync_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut housekeeping_tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
        housekeeping_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        LoopInputs {
            updates,
            pleg,
            sync_tick,
            housekeeping_tick,
            probes: None,
        }
    }

    /// Adds the prober's result changes to what the loop selects over.
    pub(crate) fn with_probes(mut self, probes: mpsc::Receiver<ProbeUpdate>) -> Self {
        self.probes = Some(probes);
        self
    }
}

/// The next probe update; pending forever without a prober.
async fn next_probe_update(rx: &mut Option<mpsc::Receiver<ProbeUpdate>>) -> Option<ProbeUpdate> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the sync loop is built from: the shared state it reads and writes, the
/// syncer its pod workers call, and the task tree they and housekeeping run in.
pub(crate) struct SyncLoopDeps {
    pub pods: Arc<PodManager>,
    pub syncer: Arc<Syncer>,
    pub statuses: Arc<StatusManager>,
    pub runtime: Arc<RuntimeManager>,
    pub queue: Arc<WorkQueue>,
    pub pleg: Arc<PlegStats>,
    pub health: Arc<RuntimeHealth>,
    /// How often a pod worker resyncs its pod (`syncFrequency`).
    pub resync: Duration,
    /// The admission handlers (kubelet's order: pods, then resource fit, …).
    pub admission: AdmissionChain,
    pub sources: Vec<&'static str>,
    pub tasks: Tasks,
    /// Notified when a static or mirror pod is added, updated or removed, so mirror
    /// pods follow at once (kubelet does it in syncPod and HandlePodCleanups).
    pub mirror_hook: Option<Arc<Notify>>,
    /// Told `true` once every configured source has reported.
    pub sources_ready: watch::Sender<bool>,
}

impl SyncLoop {
    pub(crate) fn new(d: SyncLoopDeps) -> Self {
        SyncLoop {
            cm: d.syncer.cm.clone(),
            allocation: d.syncer.allocation.clone(),
            next_resize_retry: Instant::now() + allocation::INITIAL_RETRY_DELAY,
            workers: PodWorkers::new(d.syncer, d.queue.clone(), d.resync, d.tasks.child()),
            pods: d.pods,
            statuses: d.statuses,
            runtime: d.runtime,
            queue: d.queue,
            pleg: d.pleg,
            health: d.health,
            admission: d.admission,
            sources: d.sources,
            tasks: d.tasks,
            seen: HashSet::new(),
            housekeeping: None,
            last_log_link_gc: None,
            monitor: Default::default(),
            mirror_hook: d.mirror_hook,
            sources_ready_tx: d.sources_ready,
        }
    }

    /// True once every configured source has reported at least once.
    pub(crate) fn sources_ready(&self) -> bool {
        self.sources.iter().all(|s| self.seen.contains(s))
    }

    /// Runs until cancelled or the config channel closes. While the runtime is
    /// unhealthy, no events are processed (back-off 100 ms doubling to 5 s).
    pub(crate) async fn run(mut self, mut inputs: LoopInputs, cancel: CancellationToken) {
        info!("starting sync loop");
        let mut backoff = Duration::from_millis(100);
        loop {
            if let Err(why) = self.runtime_errors() {
                warn!(reason = %why, "skipping pod synchronization");
                self.monitor.skipping(&why);
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            backoff = Duration::from_millis(100);
            self.monitor.iterated();
            if !self.sync_loop_iteration(&mut inputs, &cancel).await {
                info!("sync loop stopped");
                return;
            }
            self.monitor.iterated();
        }
    }

    fn runtime_errors(&self) -> Result<(), monitor::RuntimeUnhealthy> {
        if !self.health.is_up() {
            return Err(monitor::RuntimeUnhealthy::RuntimeDown);
        }
        Ok(self.pleg.healthy()?)
    }

    /// One iteration: handles exactly one ready input. Returns false to stop.
    pub(crate) async fn sync_loop_iteration(
        &mut self,
        inputs: &mut LoopInputs,
        cancel: &CancellationToken,
    ) -> bool {
        tokio::select! {
            () = cancel.cancelled() => false,
            update = inputs.updates.recv() => {
                let Some(update) = update else {
                    warn!("config channel closed");
                    return false;
                };
                debug!(channel = "config", op = update.op.as_str(), source = update.source, pods = update.pods.len(), "sync loop iteration");
                self.handle_update(update);
                true
            }
            Some(event) = inputs.pleg.recv() => {
                debug!(channel = "pleg", podUID = %event.uid, event = event.kind.as_str(), containerID = %event.container_id, "sync loop iteration");
                if event.kind != EventKind::ContainerRemoved
                    && let Some(pod) = self.pods.get(&event.uid)
                {
                    // kubelet's V(2) line: each event that makes the pod sync again.
                    info!(pod = %pod_ref(&pod), podUID = %event.uid, event = event.kind.as_str(), containerID = %event.container_id,
                        "SyncLoop (PLEG): event for pod, syncing it");
                    self.handle_pod_syncs(vec![pod]);
                }
                true
            }
            Some(u) = next_probe_update(&mut inputs.probes) => {
                // As kubelet's handleProbeSync: any change syncs the pod, whose status
                // then shows it and whose actions kill on liveness/startup failure.
                debug!(channel = "probe", podUID = %u.pod_uid, containerID = %u.container_id, probe = u.kind.as_str(), result = u.result.as_str(), "sync loop iteration");
                if let Some(pod) = self.pods.get(&u.pod_uid) {
                    self.handle_pod_syncs(vec![pod]);
                }
                true
            }
            _ = inputs.sync_tick.tick() => {
                self.handle_active_deadlines();
                let due: Vec<Arc<Pod>> = self.queue.take_due().iter().filter_map(|u| self.pods.get(u)).collect();
                if !due.is_empty() {
                    debug!(channel = "sync", pods = due.len(), "sync loop iteration: pods due for resync");
                    self.handle_pod_syncs(due);
                }
                true
            }
            _ = inputs.housekeeping_tick.tick() => {
                if self.sources_ready() {
                    debug!(channel = "housekeeping", "sync loop iteration: housekeeping");
                    self.handle_pod_cleanups();
                } else {
                    debug!(channel = "housekeeping", "sync loop iteration: skipping housekeeping, sources not ready");
                }
                true
            }
        }
    }

    fn handle_update(&mut self, update: PodUpdate) {
        let source = update.source;
        for pod in &update.pods {
            // kubelet logs RECONCILE (a status-only change, after every status write) at V(4).
            if update.op == PodOperation::Reconcile {
                debug!(pod = %pod_ref(pod), podUID = %pod_uid(pod), source, op = update.op.as_str(), "pod update from config");
            } else if is_api_mirror(pod) {
                // The mirror's own UID is not the static pod's: named apart, so the
                // line joins the static pod's story instead of starting one.
                info!(pod = %pod_ref(pod), mirrorPodUID = %pod_uid(pod), source, op = update.op.as_str(), "mirror pod update from config");
            } else {
                info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), source, op = update.op.as_str(), "pod update from config");
            }
        }
        let pods: Vec<Arc<Pod>> = update.pods.into_iter().map(Arc::new).collect();
        // A status-only change (Reconcile) leaves the mirror pods as they are.
        if update.op != PodOperation::Reconcile
            && pods.iter().any(|p| is_static_pod(p) || is_api_mirror(p))
        {
            self.poke_mirrors();
        }
        match update.op {
            PodOperation::Add => self.handle_pod_additions(pods),
            PodOperation::Update | PodOperation::Delete => self.handle_pod_updates(pods),
            PodOperation::Remove => self.handle_pod_removes(pods),
            PodOperation::Reconcile => self.handle_pod_reconcile(pods),
        }
        self.seen.insert(source);
        if !*self.sources_ready_tx.borrow() && self.sources_ready() {
            info!(sources = %self.sources.join(","), "every pod source has reported; housekeeping and orphaned mirror pod cleanup may run");
            self.sources_ready_tx.send_replace(true);
        }
    }

    /// Asks the mirror pod reconciler for a pass (no-op without an apiserver).
    fn poke_mirrors(&self) {
        if let Some(hook) = &self.mirror_hook {
            hook.notify_one();
        }
    }

    fn is_terminal(&self, uid: &str) -> bool {
        self.statuses
            .read(uid, |s| {
                s.phase
                    .as_deref()
                    .and_then(|p| p.parse::<crate::pod::Phase>().ok())
                    .is_some_and(crate::pod::Phase::is_terminal)
            })
            .unwrap_or(false)
    }

    /// True when admission rejected the pod (it never gets a worker).
    fn is_rejected(&self, uid: &str) -> bool {
        self.statuses.read(uid, was_rejected).unwrap_or(false)
    }

    /// Pods admitted and not finished (the other pods admission weighs a new one against).
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .all()
            .into_iter()
            .filter(|p| {
                let uid = pod_uid(p);
                !self.is_terminal(uid) && !self.is_rejected(uid)
            })
            .collect()
    }

    /// kubelet's HandlePodAdditions: oldest first, admission (the chain), dispatch.
    pub(crate) fn handle_pod_additions(&mut self, mut pods: Vec<Arc<Pod>>) {
        pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for pod in pods {
            let uid = pod_uid(&pod).to_string();
            let active = self.active_pods();
            let already = self.workers.is_active(&uid);
            self.pods.add_or_update(pod.clone());
            if is_api_mirror(&pod) {
                self.handle_mirror_pod(&pod);
                continue;
            }
            if !already
                && !self.is_terminal(&uid)
                && let Err(r) = self.allocation.add_pod(&self.admission, &active, &pod)
            {
                warn!(pod = %pod_ref(&pod), podUID = %uid, cause = %r.reason, "pod rejected at admission: {}", r.message);
                // kubelet's rejectPod: a Warning event with the rejection's reason.
                self.runtime.events().event(
                    &crate::events::ObjectRef::pod(&pod),
                    crate::events::EventType::Warning,
                    r.reason.clone(),
                    r.message.clone(),
                );
                let status = rejected(&pod, &r.reason, &r.message, jiff::Timestamp::now());
                self.statuses.set(&uid, status);
                continue;
            }
            // Admitted at its allocation after a restart: a resize it asks for waits its turn.
            if self.allocation.resize_requested(&pod) {
                self.allocation.push_pending(&uid);
            }
            self.dispatch(pod, UpdateType::Create);
        }
        self.retry_pending_resizes(allocation::Trigger::PodsAdded);
    }

    fn handle_pod_updates(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            // kubelet's recordContainerResizeOperations: what the update asks to change.
            if let Some(old) = self.pods.get(pod_uid(&pod)) {
                crate::metrics::resize_requested(&old, &pod);
            }
            self.pods.add_or_update(pod.clone());
            if is_api_mirror(&pod) {
                self.handle_mirror_pod(&pod);
                continue;
            }
            if self.is_rejected(pod_uid(&pod)) {
                continue;
            }
            // kubelet's HandlePodUpdates: a spec asking for other resources queues a
            // resize, tried below with every other waiting one.
            if self.allocation.resize_requested(&pod) {
                self.allocation.push_pending(pod_uid(&pod));
            }
            self.dispatch(pod, UpdateType::Update);
        }
        self.retry_pending_resizes(allocation::Trigger::PodUpdated);
    }

    /// kubelet's `RetryPendingResizes`: the waiting resizes tried again against the
    /// active pods; the pods whose allocation or condition changed are synced.
    fn retry_pending_resizes(&self, trigger: allocation::Trigger) {
        if !self.allocation.has_pending() {
            return;
        }
        if !self.sources_ready() {
            debug!(
                trigger = trigger.as_str(),
                "not retrying pending resizes: sources not ready"
            );
            return;
        }
        let active = self.active_pods();
        let pods = self.pods.clone();
        let synced =
            self.allocation
                .retry_pending(&self.admission, &active, |uid| pods.get(uid), trigger);
        for pod in synced {
            self.dispatch(pod, UpdateType::Sync);
        }
    }

    /// kubelet's `handleMirrorPod`: a mirror pod is never run; a change to it syncs
    /// the static pod it stands for (if that is still here and was admitted).
    /// Returns the static pod synced, if any.
    fn handle_mirror_pod(&self, mirror: &Pod) -> Option<Arc<Pod>> {
        let pod = self.pods.get_static_of_mirror(mirror)?;
        if self.is_rejected(pod_uid(&pod)) {
            return None;
        }
        self.dispatch(pod.clone(), UpdateType::Update);
        Some(pod)
    }

    /// Pods gone from their source are killed at once (with their own grace period);
    /// a finished one has what it left cleaned up by its worker. Either way its status
    /// goes with it, so the same UID added again later is a new life.
    fn handle_pod_removes(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            let uid = pod_uid(&pod).to_string();
            self.pods.remove(&uid);
            if is_api_mirror(&pod) {
                self.handle_mirror_pod(&pod);
                continue;
            }
            self.allocation.remove_pod(&uid);
            if self.workers.lifecycle(&uid).is_none() {
                // Never had a worker (rejected at admission): only its status is left.
                self.statuses.remove(&uid);
                continue;
            }
            self.workers.update_pod(PodWork::Kill {
                pod,
                kill: KillRequest::new(KillReason::RemovedFromConfig),
            });
        }
        // What the removed pods held may be what a waiting resize needs.
        self.retry_pending_resizes(allocation::Trigger::PodsRemoved);
    }

    /// Only the pod manager learns of status-only changes; a mirror pod's goes there
    /// too and, as in kubelet (without a readiness to reconcile), syncs nothing.
    fn handle_pod_reconcile(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            self.pods.add_or_update(pod);
        }
    }

    /// kubelet's active-deadline sync handler: a syncing pod past its
    /// `activeDeadlineSeconds` is killed with status Failed / DeadlineExceeded.
    fn handle_active_deadlines(&mut self) {
        let now = jiff::Timestamp::now();
        for pod in self.pods.all() {
            let uid = pod_uid(&pod).to_string();
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .is_none()
                || self.workers.lifecycle(&uid) != Some(pod_workers::Lifecycle::Syncing)
                || !deadline::past_deadline(&pod, self.statuses.get(&uid).as_ref(), now)
            {
                continue;
            }
            info!(pod = %pod_ref(&pod), podUID = %uid, activeDeadlineSeconds = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).unwrap_or_default(), "pod passed its active deadline, killing it");
            self.workers.update_pod(PodWork::Kill {
                pod,
                kill: KillRequest {
                    status: Some(deadline::kill_status()),
                    ..KillRequest::new(KillReason::DeadlineExceeded)
                },
            });
        }
    }

    fn handle_pod_syncs(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            self.dispatch(pod, UpdateType::Sync);
        }
    }

    fn dispatch(&self, pod: Arc<Pod>, update_type: UpdateType) {
        self.workers.update_pod(PodWork::Sync {
            update: update_type,
            pod,
        });
    }

    /// kubelet's HandlePodCleanups: forget finished workers, restart re-created pods,
    /// kill and remove what runs in the runtime but is not desired. Runs as its own
    /// task so a slow runtime never stalls the loop; at most one at a time.
    fn handle_pod_cleanups(&mut self) {
        let pods = self.pods.clone();
        let restarted = self.workers.sync_known_pods(&|uid| pods.contains(uid));
        let static_split = |ps: &[Arc<Pod>]| {
            let n = ps.iter().filter(|p| is_static_pod(p)).count();
            (ps.len() - n, n)
        };
        let desired = self.pods.all();
        let ephemeral = desired
            .iter()
            .filter_map(|p| p.spec.as_ref()?.ephemeral_containers.as_ref())
            .map(Vec::len)
            .sum();
        crate::metrics::kubelet().set_pod_counts(
            static_split(&desired),
            static_split(&self.active_pods()),
            self.pods.mirror_pods().len(),
            ephemeral,
        );
        // Statuses of pods neither desired nor being stopped (kubelet's
        // RemoveOrphanedStatuses).
        let workers = &self.workers;
        for uid in self
            .statuses
            .retain(|uid| pods.contains(uid) || workers.is_active(uid))
        {
            debug!(podUID = %uid, "forgot the status of a pod that is gone");
        }
        // Allocations of pods neither desired nor being stopped (kubelet's
        // RemoveOrphanedPods), then the resizes waiting on a finished one or the clock.
        self.allocation
            .remove_orphans(|uid| pods.contains(uid) || workers.is_active(uid));
        if self.allocation.take_retry_request() {
            self.retry_pending_resizes(allocation::Trigger::PodResized);
        } else if Instant::now() >= self.next_resize_retry {
            self.next_resize_retry = Instant::now() + allocation::RETRY_DELAY;
            self.retry_pending_resizes(allocation::Trigger::Periodic);
        }
        // A gone pod's timeline is kept a while longer, so the end of its story can be read.
        crate::timeline::global().retain_live(|uid| pods.contains(uid) || workers.is_active(uid));
        for uid in restarted {
            if let Some(pod) = self.pods.get(&uid) {
                info!(pod = %pod_ref(&pod), podUID = %uid, "restarting pod that was re-created");
                self.dispatch(pod, UpdateType::Create);
            }
        }
        // Pods that are desired but have no worker (e.g. a terminal worker was purged) stay as they are.
        self.runtime.gc_backoff();
        if self.housekeeping.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        let runtime = self.runtime.clone();
        let workers = self.workers.clone();
        let pods = self.pods.clone();
        let cm = self.cm.clone();
        let started = Instant::now();
        let log_links = self
            .last_log_link_gc
            .is_none_or(|t| started.duration_since(t) >= LOG_LINK_GC_PERIOD);
        if log_links {
            self.last_log_link_gc = Some(started);
        }
        let pass = async move {
            cleanup_runtime_pods(&runtime, &workers, &pods).await;
            if log_links {
                runtime.remove_dangling_log_symlinks().await;
            }
            cleanup_pod_cgroups(cm, workers).await;
            let took = started.elapsed();
            if took > Duration::from_secs(1) {
                warn!(took = %crate::duration::format_go_duration(took), "housekeeping took longer than expected");
            }
            Ok(())
        };
        self.housekeeping = Some(self.tasks.spawn_pass("housekeeping", pass));
    }
}

/// Kills runtime pods nobody wants (grace 1 s, through a pod worker), removes dead
/// ones that have no worker any more, garbage-collects the dead containers and
/// sandboxes of the others (kuberuntime's container GC), and removes orphaned pod directories.
/// (The dangling log links go once a minute, see [`LOG_LINK_GC_PERIOD`].)
async fn cleanup_runtime_pods(
    runtime: &RuntimeManager,
    workers: &PodWorkers<Syncer>,
    pods: &PodManager,
) {
    let running = match runtime.get_pods().await {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "housekeeping: cannot list runtime pods");
            return;
        }
    };
    let in_runtime: HashSet<String> = running.iter().map(|p| p.uid.clone()).collect();
    for rp in running {
        let lifecycle = workers.lifecycle(&rp.uid);
        let active = lifecycle.is_some_and(|l| l != Lifecycle::Finished);
        if pods.contains(&rp.uid) || active {
            // A stopping pod's leftovers are its worker's to remove: a GC pass on
            // them at the same time makes both trip over each other in containerd
            // ("already in removing state"), and the worker retries a second later.
            let stopping = matches!(
                lifecycle,
                Some(Lifecycle::Terminating | Lifecycle::Terminated)
            );
            if !stopping {
                crate::kuberuntime::collect_pod(runtime, &rp).await;
            }
            continue;
        }
        if rp.is_running() {
            info!(pod = %rp.pod_ref(), podUID = %rp.uid, "killing runtime pod that is not in the config");
            workers.update_pod(PodWork::KillRuntimePod {
                pod: rp,
                kill: KillRequest {
                    grace_override: Some(1),
                    ..KillRequest::new(KillReason::RuntimeOnly)
                },
            });
        } else {
            debug!(pod = %rp.pod_ref(), podUID = %rp.uid, "removing dead runtime pod that is not in the config");
            if let Err(e) = runtime.remove_pod(&rp.uid, &rp.pod_ref()).await {
                warn!(pod = %rp.pod_ref(), podUID = %rp.uid, error = %e, "cannot remove dead pod");
            }
        }
    }
    // A pod the runtime still had is left to the removal above (which takes its
    // directories once its containers are gone), or to the next pass.
    let known =
        |uid: &str| pods.contains(uid) || workers.is_active(uid) || in_runtime.contains(uid);
    crate::kuberuntime::cleanup_orphaned_dirs(runtime.pods_dir(), runtime.pod_logs_dir(), &known);
    runtime.prune_actuated(&known);
}

/// Destroys the cgroups of pods no worker may still run (kubelet's
/// `cleanupOrphanedPodCgroups`, with its `possiblyRunningPods`: syncing or terminating).
/// Blocking file I/O, so off the async threads.
async fn cleanup_pod_cgroups(cm: Arc<ContainerManager>, workers: PodWorkers<Syncer>) {
    let done = tokio::task::spawn_blocking(move || {
        cm.cleanup_orphans(&|uid| {
            matches!(
                workers.lifecycle(uid),
                Some(Lifecycle::Syncing | Lifecycle::Terminating)
            )
        });
    })
    .await;
    if let Err(e) = done {
        warn!(error = %e, "housekeeping: the pod cgroup cleanup failed");
    }
}

#[cfg(test)]
mod fake_runtime_tests;
