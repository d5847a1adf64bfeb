//! Pod workers: one task per pod UID, so one pod's sync never runs twice at once and
//! a slow pod never blocks another. Each pod moves syncing → terminating →
//! terminated, never back; the latest update wins; a grace period only ever shortens.
//! Each worker runs under a supervisor that sees its end: a worker that panics is
//! restarted and its step retried with back-off, so no pod and no static pod full
//! name is ever left with a dead worker.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::locks::Locked as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::work_queue::WorkQueue;
use crate::backoff::jitter;
use crate::cri::CriError;
use crate::kuberuntime::RuntimePod;
use crate::kuberuntime::SyncError;
use crate::pleg::InspectError;
use crate::pod::{WaitingReason, is_static_pod, pod_full_name, pod_ref, pod_uid};
use crate::tasks::Tasks;

mod kill;
pub(crate) use kill::{KillReason, KillRequest, KillStatus};

/// Why a desired pod is synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateType {
    Create,
    Update,
    Sync,
}

impl UpdateType {
    /// kubelet's `operation_type` for `kubelet_pod_worker_duration_seconds`, and
    /// what a sync line says it is.
    pub(crate) fn as_metric(self) -> &'static str {
        match self {
            UpdateType::Create => "create",
            UpdateType::Update => "update",
            UpdateType::Sync => "sync",
        }
    }
}

/// A pod worker finished a unit of work begun at `started`.
fn worker_duration(operation: &str, started: Instant) {
    crate::metrics::kubelet()
        .pod_worker_duration
        .with_label_values(&[operation])
        .observe(started.elapsed().as_secs_f64());
}

/// One update for a pod worker: only the combinations that can exist.
#[derive(Debug, Clone)]
pub(crate) enum PodWork {
    /// Create, update or resync a desired pod.
    Sync { update: UpdateType, pod: Arc<Pod> },
    /// Stop a desired pod.
    Kill { pod: Arc<Pod>, kill: KillRequest },
    /// Stop a pod known only to the runtime.
    KillRuntimePod { pod: RuntimePod, kill: KillRequest },
}

impl PodWork {
    /// The UID of the pod the work is for.
    pub(crate) fn uid(&self) -> &str {
        match self {
            PodWork::Sync { pod, .. } | PodWork::Kill { pod, .. } => pod_uid(pod),
            PodWork::KillRuntimePod { pod, .. } => &pod.uid,
        }
    }

    /// The desired pod, unless the work is for a runtime-only pod.
    pub(crate) fn pod(&self) -> Option<&Arc<Pod>> {
        match self {
            PodWork::Sync { pod, .. } | PodWork::Kill { pod, .. } => Some(pod),
            PodWork::KillRuntimePod { .. } => None,
        }
    }

    pub(crate) fn kill(&self) -> Option<&KillRequest> {
        match self {
            PodWork::Sync { .. } => None,
            PodWork::Kill { kill, .. } | PodWork::KillRuntimePod { kill, .. } => Some(kill),
        }
    }

    fn update_type(&self) -> UpdateType {
        match self {
            PodWork::Sync { update, .. } => *update,
            _ => UpdateType::Sync,
        }
    }
}

/// Result of one `sync_pod`.
#[derive(Debug, Default, Clone)]
pub(crate) struct SyncResult {
    /// The pod reached a terminal phase: start terminating it.
    pub terminal: bool,
    /// A back-off ends then: sync again no later than this.
    pub retry_after: Option<Duration>,
    /// The sync changed nothing in the runtime: the view it worked from is still the
    /// runtime's, so the next sync needs nothing newer than this one did (kubelet
    /// waits for the cache to pass the start of every sync; after a no-op that wait
    /// is a relist period for nothing, e.g. between two quick resizes).
    pub unchanged: bool,
}

/// Why one step of a pod worker failed; the worker logs it and retries with back-off,
/// asking the error what kind it is (`retryable`, `back_off`, `waiting_reason`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodSyncError {
    #[error("cannot inspect the pod in the runtime: {0}")]
    Inspect(InspectError),
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error(transparent)]
    Runtime(#[from] SyncError),
    #[error("container {0} is still running after the kill")]
    StillRunning(String),
    #[error(transparent)]
    Cgroup(#[from] crate::cm::PodCgroupError),
    #[error("cannot tear down the pod's volumes: {0}")]
    Volumes(std::io::Error),
    /// The pod's claims could not be unprepared: it stays terminating until they are.
    #[error("{0}")]
    Release(crate::contracts::GrantError),
}

impl PodSyncError {
    /// False when the same step cannot succeed on a retry: the worker then waits the
    /// longest back-off before it tries again (a new update still ends the wait).
    pub(crate) fn retryable(&self) -> bool {
        match self {
            PodSyncError::Runtime(e) => e.retryable(),
            _ => true,
        }
    }

    /// A retry the failure asks for sooner than the worker's own back-off.
    pub(crate) fn back_off(&self) -> Option<Duration> {
        match self {
            PodSyncError::Runtime(e) => e.back_off(),
            _ => None,
        }
    }

    /// The waiting reason the failure shows on a container.
    pub(crate) fn waiting_reason(&self) -> Option<WaitingReason> {
        match self {
            PodSyncError::Runtime(e) => e.waiting_reason(),
            _ => None,
        }
    }
}

/// What the pod workers call (kubelet's `podSyncer`); the seam unit tests fake.
pub(crate) trait PodSyncer: Send + Sync + 'static {
    fn sync_pod(
        &self,
        update: UpdateType,
        pod: Arc<Pod>,
        last_sync: Option<Instant>,
    ) -> impl Future<Output = Result<SyncResult, PodSyncError>> + Send;
    /// Stops the pod with `grace`, first setting `status` on it if the kill asked.
    fn sync_terminating_pod(
        &self,
        pod: Arc<Pod>,
        grace: i64,
        status: Option<KillStatus>,
    ) -> impl Future<Output = Result<(), PodSyncError>> + Send;
    fn sync_terminating_runtime_pod(
        &self,
        pod: RuntimePod,
    ) -> impl Future<Output = Result<(), PodSyncError>> + Send;
    fn sync_terminated_pod(
        &self,
        pod: Option<Arc<Pod>>,
        runtime_pod: Option<RuntimePod>,
    ) -> impl Future<Output = Result<(), PodSyncError>> + Send;
    /// Runs before the first sync of a pod re-created with the UID of one that
    /// terminated: removes what the previous life left (dead sandbox and containers,
    /// cached runtime view, status), so the pod starts over as a new pod would.
    fn clear_previous_life(
        &self,
        pod: Arc<Pod>,
    ) -> impl Future<Output = Result<(), PodSyncError>> + Send;
}

/// The grace period for a kill: override, else the deletion grace of a deleted pod,
/// else `terminationGracePeriodSeconds` (default 30); never below 1 s.
pub(crate) fn effective_grace(pod: Option<&Pod>, kill: Option<&KillRequest>) -> i64 {
    let from_pod = pod.and_then(|p| {
        if p.metadata.deletion_timestamp.is_some() {
            p.metadata.deletion_grace_period_seconds
        } else {
            None
        }
        .or_else(|| {
            p.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
    });
    kill.and_then(|k| k.grace_override)
        .or(from_pod)
        .unwrap_or(30)
        .max(1)
}

/// Once terminating, a new grace period is taken only if it is shorter.
pub(crate) fn merge_grace(current: Option<i64>, new: i64) -> i64 {
    current.map_or(new, |c| c.min(new))
}

/// The wait before a failed sync is retried (kubelet's `backOffPeriod`), jittered up
/// to ×1.5 as kubelet's `workerBackOffPeriodJitterFactor`.
pub(crate) const BACK_OFF_PERIOD: Duration = Duration::from_secs(10);
/// The wait before a sync that cannot pass as it is (a spec error) is tried again; a
/// new update still ends it. oxlet's own: kubelet retries those every 10 s too.
pub(crate) const MAX_BACK_OFF: Duration = Duration::from_secs(300);
/// The first wait before a failed kill or cleanup is retried.
pub(crate) const TERMINATE_BACK_OFF: Duration = Duration::from_secs(1);

/// The wait before retrying a step that failed `failures` times in a row (errors and
/// panics alike). A sync waits kubelet's flat 10 s (`completeWork` requeues after
/// `backOffPeriod`, never longer), so a pod waiting for a ConfigMap starts within
/// ~15 s of it appearing; crash-loop and image-pull back-offs grow on their own.
/// Kills and cleanups double from 1 s up to that same 10 s: sooner than kubelet, never
/// later, so a pod being stopped is not held up by one failed (idempotent) CRI call.
pub(crate) fn failure_back_off(lifecycle: Lifecycle, failures: u32) -> Duration {
    match lifecycle {
        Lifecycle::Syncing => BACK_OFF_PERIOD,
        _ => {
            let doublings = failures.saturating_sub(1).min(16);
            TERMINATE_BACK_OFF
                .saturating_mul(1 << doublings)
                .min(BACK_OFF_PERIOD)
        }
    }
}

/// The wait for a step that cannot pass as it is.
fn permanent_back_off(lifecycle: Lifecycle) -> Duration {
    match lifecycle {
        Lifecycle::Syncing => MAX_BACK_OFF,
        _ => BACK_OFF_PERIOD,
    }
}

/// What a failed step asks of the worker's back-off (a panic asks nothing).
#[derive(Debug, Clone, Copy, Default)]
struct FailureHint {
    /// Retrying cannot help: wait the longest back-off.
    permanent: bool,
    /// Retry no later than this.
    sooner: Option<Duration>,
}

impl From<&PodSyncError> for FailureHint {
    fn from(e: &PodSyncError) -> Self {
        FailureHint {
            permanent: !e.retryable(),
            sooner: e.back_off(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    Syncing,
    Terminating,
    Terminated,
    Finished,
}

impl Lifecycle {
    /// The state's name in log lines.
    fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Syncing => "Syncing",
            Lifecycle::Terminating => "Terminating",
            Lifecycle::Terminated => "Terminated",
            Lifecycle::Finished => "Finished",
        }
    }
}

#[derive(Debug)]
struct PodSyncStatus {
    notify: Arc<Notify>,
    pending: Option<PodWork>,
    pod: Option<Arc<Pod>>,
    runtime_pod: Option<RuntimePod>,
    lifecycle: Lifecycle,
    grace: Option<i64>,
    /// The kill that moved the pod to terminating (merged with later ones); None for
    /// a deletion or a pod that became terminal by itself.
    kill: Option<KillRequest>,
    /// Cancels an in-flight sync when a kill arrives, and an in-flight terminate so it
    /// restarts with a shorter grace period.
    terminate_cancel: CancellationToken,
    full_name: String,
    is_static: bool,
    /// Static pods with one full name run one at a time; the others wait here.
    started: bool,
    /// The pod was re-added (a create with the same UID) after termination was
    /// requested: once finished, housekeeping starts it again (kubelet's field).
    restart_requested: bool,
    /// This worker is such a restart: its previous life is cleared before it syncs.
    new_life: bool,
    /// The step being run and the state it ran in; put back if the worker panics.
    in_flight: Option<(Lifecycle, PodWork)>,
    /// Failed steps in a row (errors or panics); a success resets it.
    failures: u32,
    /// After a failure, no step in that state runs before this instant (a move to
    /// another state, such as a kill, is not held back).
    retry_at: Option<(Lifecycle, Instant)>,
}

impl PodSyncStatus {
    /// A new pod's record: syncing, nothing pending yet, no failures.
    fn new(full_name: String, is_static: bool, started: bool, new_life: bool) -> Self {
        PodSyncStatus {
            notify: Arc::new(Notify::new()),
            pending: None,
            pod: None,
            runtime_pod: None,
            lifecycle: Lifecycle::Syncing,
            grace: None,
            kill: None,
            terminate_cancel: CancellationToken::new(),
            full_name,
            is_static,
            started,
            restart_requested: false,
            new_life,
            in_flight: None,
            failures: 0,
            retry_at: None,
        }
    }

    /// The same UID added again after its termination was asked for (a static pod
    /// with a fixed UID, removed and restored): it runs again as a new life once the
    /// old one has fully terminated (kubelet's restartRequested).
    fn request_restart(&mut self, uid: &str, work: &PodWork) {
        if !self.restart_requested {
            info!(pod = %work.pod().map(|p| pod_ref(p)).unwrap_or_default(), podUID = %uid, "pod re-added while terminating; it starts again once terminated");
        }
        self.restart_requested = true;
    }

    /// A kill or a deletion: a syncing pod starts terminating (its sync in flight is
    /// cancelled), a terminating one restarts termination if the grace period shortens.
    fn request_termination(&mut self, uid: &str, kill: Option<&KillRequest>) {
        // A kill is never lost to a later plain update: it is kept here, not in
        // the pending work, which the latest update replaces.
        if let Some(k) = kill {
            match &mut self.kill {
                Some(current) => current.merge(k),
                None => self.kill = Some(k.clone()),
            }
        }
        let grace = effective_grace(self.pod.as_deref(), kill);
        match self.lifecycle {
            Lifecycle::Syncing => {
                self.lifecycle = Lifecycle::Terminating;
                self.grace = Some(grace);
                // Like kubelet's cancelFn: a sync in flight (e.g. a postStart hook
                // that never returns) must not hold the kill back.
                self.terminate_cancel.cancel();
            }
            Lifecycle::Terminating => {
                let merged = merge_grace(self.grace, grace);
                if Some(merged) != self.grace {
                    debug!(podUID = %uid, grace = merged, "shorter grace period: restarting termination");
                    self.grace = Some(merged);
                    self.terminate_cancel.cancel();
                }
            }
            _ => {}
        }
    }

    /// A static pod waiting for its turn may not sync, but once it is asked to stop
    /// it goes through termination at once: stopping starts nothing, and a removed
    /// pod must not wait on a predecessor that may run for ever (as kubelet).
    fn may_act(&self) -> bool {
        self.started || self.lifecycle != Lifecycle::Syncing
    }

    /// When the pending step may run, if it must wait for a back-off to end.
    fn held_until(&self, now: Instant) -> Option<Instant> {
        match self.retry_at {
            Some((l, t)) if l == self.lifecycle && now < t => Some(t),
            _ => None,
        }
    }
}

/// One step a worker took to run: the update, the state it runs in, and what the
/// pod's record held for it when it was taken.
struct Step {
    work: PodWork,
    lifecycle: Lifecycle,
    pod: Option<Arc<Pod>>,
    runtime_pod: Option<RuntimePod>,
    /// The grace period a termination step stops the pod with.
    grace: i64,
    /// Cancelled when a kill (or a shorter grace period) arrives mid-step.
    cancel_term: CancellationToken,
    /// The pod's previous life is to be cleared before it syncs.
    new_life: bool,
    kill: Option<KillRequest>,
}

impl Step {
    /// The pod as the worker logs it.
    fn pod_name(&self) -> String {
        logged_name(self.pod.as_deref(), self.runtime_pod.as_ref())
    }
}

/// What a worker found when it looked for work.
enum NextWork {
    /// A step to run now (boxed: a step is large, a wait is not).
    Run(Box<Step>),
    /// Nothing may run yet: wait for an update, or until a back-off ends then.
    Wait(Option<Instant>),
    /// The pod's record is gone or finished: the worker ends.
    Stop,
}

/// The `ns/name` a worker logs: the desired pod's, else the runtime pod's.
fn logged_name(pod: Option<&Pod>, runtime_pod: Option<&RuntimePod>) -> String {
    pod.map(pod_ref)
        .or_else(|| runtime_pod.map(RuntimePod::pod_ref))
        .unwrap_or_default()
}

#[derive(Debug, Default)]
struct State {
    pods: HashMap<String, PodSyncStatus>,
    /// Full name → UIDs of static pods in arrival order; the first one may run.
    static_order: HashMap<String, Vec<String>>,
    /// UIDs purged for a restart whose new worker has not been created yet.
    restarting: HashSet<String>,
}

/// The pod workers. Cheap to clone.
pub(crate) struct PodWorkers<S: PodSyncer> {
    state: Arc<Mutex<State>>,
    syncer: Arc<S>,
    queue: Arc<WorkQueue>,
    resync: Duration,
    cancel: CancellationToken,
    /// The agent's task tree: every worker and supervisor lives in it.
    tasks: Tasks,
}

impl<S: PodSyncer> Clone for PodWorkers<S> {
    fn clone(&self) -> Self {
        PodWorkers {
            state: self.state.clone(),
            syncer: self.syncer.clone(),
            queue: self.queue.clone(),
            resync: self.resync,
            cancel: self.cancel.clone(),
            tasks: self.tasks.clone(),
        }
    }
}

impl<S: PodSyncer> PodWorkers<S> {
    /// The workers stop when `tasks` is shut down.
    pub(crate) fn new(
        syncer: Arc<S>,
        queue: Arc<WorkQueue>,
        resync: Duration,
        tasks: Tasks,
    ) -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        crate::census::watch("pod workers", &state, |s| s.locked().pods.len());
        crate::census::watch("pod workers: static pod order", &state, |s| {
            s.locked().static_order.len()
        });
        PodWorkers {
            state,
            syncer,
            queue,
            resync,
            cancel: tasks.token(),
            tasks,
        }
    }

    /// The state, even after a panic elsewhere poisoned its lock (`crate::locks`).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    /// kubelet's `UpdatePod`: hands an update to the pod's worker, starting the worker
    /// if needed; a kill or deletion starts termination, and the latest update wins.
    pub(crate) fn update_pod(&self, work: PodWork) {
        let uid = work.uid().to_string();
        if uid.is_empty() {
            return;
        }
        let mut state = self.state();
        let state = &mut *state;
        if !state.pods.contains_key(&uid) {
            self.start_worker(state, &uid, &work);
        }
        let status = state.pods.get_mut(&uid).expect("inserted above");
        let create = matches!(
            work,
            PodWork::Sync {
                update: UpdateType::Create,
                ..
            }
        );
        if create && let Some(p) = work.pod() {
            // kubelet observes this when it dispatches a create.
            let n = p.spec.as_ref().map_or(0, |s| s.containers.len());
            crate::metrics::kubelet()
                .containers_per_pod
                .observe(n as f64);
        }
        if status.lifecycle != Lifecycle::Syncing && create {
            status.request_restart(&uid, &work);
            return;
        }
        if status.lifecycle == Lifecycle::Finished {
            self.clean_up_finished_pod(status, &uid, work);
            return;
        }
        match &work {
            PodWork::Sync { pod, .. } | PodWork::Kill { pod, .. } => {
                status.pod = Some(pod.clone());
            }
            PodWork::KillRuntimePod { pod, .. } => status.runtime_pod = Some(pod.clone()),
        }
        let deleting = work
            .pod()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        if work.kill().is_some() || deleting {
            status.request_termination(&uid, work.kill());
        }
        // Latest update wins.
        status.pending = Some(work);
        status.notify.notify_one();
    }

    /// Creates a new pod's record (a static pod queued behind the others with its
    /// full name, kubelet's `allowStaticPodStart`) and starts its supervised worker.
    fn start_worker(&self, state: &mut State, uid: &str, work: &PodWork) {
        let (full_name, is_static) = match work.pod().map(|p| &**p) {
            Some(p) => (pod_full_name(p), is_static_pod(p)),
            None => (String::new(), false),
        };
        let started = if is_static {
            let order = state.static_order.entry(full_name.clone()).or_default();
            order.push(uid.to_string());
            order.first().is_some_and(|first| first == uid)
        } else {
            true
        };
        if !started {
            info!(pod = %work.pod().map(|p| pod_ref(p)).unwrap_or_default(), podUID = %uid, "static pod waits for the previous pod with the same name to terminate");
        }
        let new_life = state.restarting.remove(uid);
        state.pods.insert(
            uid.to_string(),
            PodSyncStatus::new(full_name, is_static, started, new_life),
        );
        self.spawn_supervised(uid);
    }

    /// A finished pod removed from its source (a kill): its terminal containers and
    /// status were kept while it was desired; clean them up now, in the worker, so a
    /// re-add of the same UID waits for that. Any other update is dropped.
    fn clean_up_finished_pod(&self, status: &mut PodSyncStatus, uid: &str, work: PodWork) {
        if let PodWork::Kill { pod, .. } = &work {
            debug!(pod = %work.pod().map(|p| pod_ref(p)).unwrap_or_default(), podUID = %uid, "finished pod removed; cleaning up what it left");
            status.lifecycle = Lifecycle::Terminated;
            status.pod = Some(pod.clone());
            status.pending = Some(work);
            status.retry_at = None;
            self.spawn_supervised(uid);
        }
    }

    /// Starts the pod's worker under its supervisor. The supervisor task is the
    /// worker's owner (it awaits the worker's handle) and ends with it; shutdown
    /// ends both through the cancellation token and waits for both in the task tree.
    fn spawn_supervised(&self, uid: &str) {
        let me = self.clone();
        let uid = uid.to_string();
        self.tasks.track(
            "pod_worker_supervisor",
            async move { me.supervise(uid).await },
        );
    }

    /// Runs the worker and watches its end: a normal end (finished, forgotten or
    /// shut down) ends the supervision; a panic is logged with the pod, the step
    /// that panicked is put back with back-off, and a new worker takes over.
    async fn supervise(self, uid: String) {
        loop {
            let worker = self
                .tasks
                .track("pod_worker", self.clone().worker_loop(uid.clone()));
            let panic = match worker.await {
                Ok(()) => return,
                Err(e) if e.is_panic() => e.into_panic(),
                Err(_) => return,
            };
            if self.cancel.is_cancelled() {
                return;
            }
            let Some((pod_name, lifecycle, delay)) = self.step_panicked(&uid) else {
                return;
            };
            error!(pod = %pod_name, podUID = %uid, state = lifecycle.as_str(), panic = %crate::tasks::panic_message(&*panic), retryIn = %crate::duration::format_go_duration(delay), "pod worker panicked; retrying with back-off");
        }
    }

    /// Puts back the step a panicked worker was running, with back-off. None when the
    /// pod's record is gone (nothing to supervise any more).
    fn step_panicked(&self, uid: &str) -> Option<(String, Lifecycle, Duration)> {
        let mut state = self.state();
        let s = state.pods.get_mut(uid)?;
        let (lifecycle, work) = match s.in_flight.take() {
            Some((l, w)) => (l, Some(w)),
            None => (s.lifecycle, None),
        };
        let pod_name = logged_name(s.pod.as_deref(), s.runtime_pod.as_ref());
        let delay = Self::record_failure(s, lifecycle, work, FailureHint::default());
        Some((pod_name, lifecycle, delay))
    }

    /// Counts a failed step, holds further steps in that state back, and keeps the
    /// failed work (unless a newer update replaced it) to be retried.
    fn record_failure(
        s: &mut PodSyncStatus,
        lifecycle: Lifecycle,
        work: Option<PodWork>,
        hint: FailureHint,
    ) -> Duration {
        s.failures = s.failures.saturating_add(1);
        let mut delay = if hint.permanent {
            permanent_back_off(lifecycle)
        } else {
            failure_back_off(lifecycle, s.failures)
        };
        if lifecycle == Lifecycle::Syncing {
            delay = jitter(delay, 0.5);
        }
        if let Some(sooner) = hint.sooner {
            delay = delay.min(sooner);
        }
        s.retry_at = Some((lifecycle, Instant::now() + delay));
        s.in_flight = None;
        if s.pending.is_none() {
            s.pending = work;
        }
        s.notify.notify_one();
        delay
    }

    fn step_failed(
        &self,
        uid: &str,
        lifecycle: Lifecycle,
        work: PodWork,
        error: &PodSyncError,
    ) -> Duration {
        let mut state = self.state();
        match state.pods.get_mut(uid) {
            Some(s) => Self::record_failure(s, lifecycle, Some(work), error.into()),
            None => Duration::ZERO,
        }
    }

    fn step_succeeded(&self, uid: &str) {
        if let Some(s) = self.state().pods.get_mut(uid) {
            s.in_flight = None;
            s.failures = 0;
            s.retry_at = None;
        }
    }

    /// The lifecycle of a pod's worker, if it has one.
    pub(crate) fn lifecycle(&self, uid: &str) -> Option<Lifecycle> {
        self.state().pods.get(uid).map(|s| s.lifecycle)
    }

    /// True when the worker exists and has not finished.
    pub(crate) fn is_active(&self, uid: &str) -> bool {
        matches!(self.lifecycle(uid), Some(l) if l != Lifecycle::Finished)
    }

    /// UIDs of every worker record.
    #[cfg(test)]
    pub(crate) fn known(&self) -> Vec<String> {
        self.state().pods.keys().cloned().collect()
    }

    /// Housekeeping (kubelet's `SyncKnownPods`): forgets finished workers of pods that
    /// are no longer desired, or that asked to be restarted. Returns the restarted
    /// UIDs; the caller sends each a create, which starts a new life.
    pub(crate) fn sync_known_pods(&self, desired: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut state = self.state();
        let state = &mut *state;
        let mut restarted = Vec::new();
        state.pods.retain(|uid, s| {
            if s.lifecycle != Lifecycle::Finished {
                return true;
            }
            let wanted = desired(uid);
            if s.restart_requested && wanted {
                crate::metrics::kubelet()
                    .restarted_pods
                    .with_label_values(&[if s.is_static { "true" } else { "" }])
                    .inc();
                restarted.push(uid.clone());
                return false;
            }
            wanted
        });
        state.restarting.retain(|uid| desired(uid));
        state.restarting.extend(restarted.iter().cloned());
        let mut working = crate::metrics::WorkingPods::default();
        for (uid, s) in &state.pods {
            let lifecycle = match s.lifecycle {
                Lifecycle::Syncing => "sync",
                Lifecycle::Terminating => "terminating",
                Lifecycle::Terminated | Lifecycle::Finished => "terminated",
            };
            let config = if desired(uid) {
                "desired"
            } else if s.pod.is_none() {
                "runtime_only"
            } else {
                "orphan"
            };
            working.add(lifecycle, config, s.is_static);
        }
        crate::metrics::kubelet().set_working(&working);
        restarted
    }

    /// kubelet's `podWorkerLoop`: waits for work, runs the step the pod's state calls
    /// for, and completes it; ends once the pod has finished or the agent stops.
    async fn worker_loop(self, uid: String) {
        let notify = match self.state().pods.get(&uid) {
            Some(s) => s.notify.clone(),
            None => return,
        };
        let mut last_sync: Option<Instant> = None;
        loop {
            let Some(step) = self.wait_for_work(&uid, &notify).await else {
                return;
            };
            let pod_name = step.pod_name();
            let next = match step.lifecycle {
                Lifecycle::Syncing => {
                    self.run_sync_pod(&uid, &pod_name, step, &mut last_sync)
                        .await
                }
                Lifecycle::Terminating => {
                    self.run_sync_terminating_pod(&uid, &pod_name, step).await
                }
                Lifecycle::Terminated => self.run_sync_terminated_pod(&uid, &pod_name, step).await,
                Lifecycle::Finished => return,
            };
            if next.is_break() {
                return;
            }
        }
    }

    /// Waits for work (for static pods, for our turn; after a failure, for the
    /// back-off to end); None when the worker is to end.
    async fn wait_for_work(&self, uid: &str, notify: &Notify) -> Option<Step> {
        loop {
            let held_until = match self.start_pod_sync(uid) {
                NextWork::Run(step) => return Some(*step),
                NextWork::Wait(held_until) => held_until,
                NextWork::Stop => return None,
            };
            let back_off_over = async {
                match held_until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.cancel.cancelled() => return None,
                () = notify.notified() => {}
                () = back_off_over => {}
            }
        }
    }

    /// kubelet's `startPodSync`: under the lock, takes the pending update if the pod
    /// may act on it now (its turn has come, no back-off holds it) and marks it in flight.
    fn start_pod_sync(&self, uid: &str) -> NextWork {
        let mut state = self.state();
        let Some(s) = state.pods.get_mut(uid) else {
            return NextWork::Stop;
        };
        if s.lifecycle == Lifecycle::Finished {
            return NextWork::Stop;
        }
        let held = s.held_until(Instant::now());
        if s.may_act() && s.pending.is_some() && held.is_none() {
            let work = s.pending.take().expect("checked");
            if s.terminate_cancel.is_cancelled() {
                s.terminate_cancel = CancellationToken::new();
            }
            s.in_flight = Some((s.lifecycle, work.clone()));
            return NextWork::Run(Box::new(Step {
                work,
                lifecycle: s.lifecycle,
                pod: s.pod.clone(),
                runtime_pod: s.runtime_pod.clone(),
                grace: s.grace.unwrap_or(1),
                cancel_term: s.terminate_cancel.clone(),
                new_life: s.new_life,
                kill: s.kill.clone(),
            }));
        }
        NextWork::Wait(held.filter(|_| s.may_act() && s.pending.is_some()))
    }

    /// kubelet's `SyncPod` step: a pod re-created with a terminated pod's UID first
    /// clears its previous life; a kill cancels the sync and goes next.
    async fn run_sync_pod(
        &self,
        uid: &str,
        pod_name: &str,
        step: Step,
        last_sync: &mut Option<Instant>,
    ) -> ControlFlow<()> {
        let Step {
            work,
            lifecycle,
            pod,
            cancel_term,
            new_life,
            ..
        } = step;
        let Some(pod) = pod else {
            self.step_succeeded(uid);
            return ControlFlow::Continue(());
        };
        let started = Instant::now();
        let update = work.update_type();
        if update == UpdateType::Create
            && let Some(seen) = crate::metrics::pod_first_seen(&pod)
        {
            let waited = jiff::Timestamp::now().duration_since(seen);
            crate::metrics::kubelet()
                .pod_worker_start_duration
                .observe(waited.as_secs_f64().max(0.0));
        }
        let previous_sync = *last_sync;
        let step = async {
            if new_life {
                info!(pod = %pod_name, podUID = %uid, "pod re-created with the UID of a terminated pod: clearing its previous life");
                self.syncer.clear_previous_life(pod.clone()).await?;
                if let Some(s) = self.state().pods.get_mut(uid) {
                    s.new_life = false;
                }
            }
            self.syncer
                .sync_pod(work.update_type(), pod.clone(), previous_sync)
                .await
        };
        let res = tokio::select! {
            () = self.cancel.cancelled() => return ControlFlow::Break(()),
            () = cancel_term.cancelled() => {
                // The pod is being killed: the kill (already pending) goes next.
                info!(pod = %pod_name, podUID = %uid, "sync cancelled: the pod is terminating");
                self.requeue_now(uid, work);
                return ControlFlow::Continue(());
            }
            r = step => r,
        };
        if !res.as_ref().is_ok_and(|r| r.unchanged) {
            *last_sync = Some(started);
        }
        worker_duration(update.as_metric(), started);
        self.complete_sync(uid, pod_name, lifecycle, work, res);
        ControlFlow::Continue(())
    }

    /// kubelet's `completeSync` and `completeWork` after a sync: a terminal pod starts
    /// terminating, a synced one comes back at the resync (or when a back-off ends),
    /// a failed one is retried with back-off.
    fn complete_sync(
        &self,
        uid: &str,
        pod_name: &str,
        lifecycle: Lifecycle,
        work: PodWork,
        res: Result<SyncResult, PodSyncError>,
    ) {
        match res {
            Ok(r) if r.terminal => {
                self.step_succeeded(uid);
                info!(pod = %pod_name, podUID = %uid, "pod is terminal; terminating it");
                self.transition_to_terminating(uid);
            }
            Ok(r) => {
                self.step_succeeded(uid);
                let next = jitter(self.resync, 0.5);
                let delay = r.retry_after.map_or(next, |d| d.min(next));
                self.queue.enqueue(uid, delay);
            }
            Err(e) => {
                let delay = self.step_failed(uid, lifecycle, work, &e);
                let reason = e.waiting_reason().map(WaitingReason::as_str);
                warn!(pod = %pod_name, podUID = %uid, error = %e, reason, retryable = e.retryable(), retryIn = %crate::duration::format_go_duration(delay), "error syncing pod, will retry");
            }
        }
    }

    /// kubelet's `SyncTerminatingPod` (or `SyncTerminatingRuntimePod`) step, then
    /// `completeTerminating`; a shorter grace period cancels it and it runs again.
    async fn run_sync_terminating_pod(
        &self,
        uid: &str,
        pod_name: &str,
        step: Step,
    ) -> ControlFlow<()> {
        let Step {
            work,
            lifecycle,
            pod,
            runtime_pod,
            grace,
            cancel_term,
            kill,
            ..
        } = step;
        let started = Instant::now();
        let reason = kill.as_ref().map_or(KillReason::Deleted, |k| k.reason);
        info!(pod = %pod_name, podUID = %uid, gracePeriod = grace, cause = %reason, "terminating pod within {grace}s");
        let status = kill.and_then(|k| k.status);
        let fut = async {
            match (&pod, &runtime_pod) {
                (Some(p), _) => {
                    self.syncer
                        .sync_terminating_pod(p.clone(), grace, status)
                        .await
                }
                (None, Some(r)) => self.syncer.sync_terminating_runtime_pod(r.clone()).await,
                (None, None) => Ok(()),
            }
        };
        let res = tokio::select! {
            () = self.cancel.cancelled() => return ControlFlow::Break(()),
            () = cancel_term.cancelled() => {
                // A shorter grace period arrived: go again with it.
                self.requeue_now(uid, work);
                return ControlFlow::Continue(());
            }
            r = fut => r,
        };
        worker_duration("kill", started);
        match res {
            Ok(()) => {
                let took = started.elapsed().as_secs_f64();
                info!(pod = %pod_name, podUID = %uid, cause = %reason, "pod's containers stopped after {took:.1}s of the {grace}s grace");
                self.step_succeeded(uid);
                self.set_lifecycle(uid, Lifecycle::Terminated, work);
            }
            Err(e) => {
                let delay = self.step_failed(uid, lifecycle, work, &e);
                warn!(pod = %pod_name, podUID = %uid, error = %e, retryIn = %crate::duration::format_go_duration(delay), "error terminating pod, will retry");
            }
        }
        ControlFlow::Continue(())
    }

    /// kubelet's `SyncTerminatedPod` step, then `completeTerminated`: once what the
    /// stopped pod left is cleaned up, the worker finishes (Break).
    async fn run_sync_terminated_pod(
        &self,
        uid: &str,
        pod_name: &str,
        step: Step,
    ) -> ControlFlow<()> {
        let Step {
            work,
            lifecycle,
            pod,
            runtime_pod,
            ..
        } = step;
        let started = Instant::now();
        let res = tokio::select! {
            () = self.cancel.cancelled() => return ControlFlow::Break(()),
            r = self.syncer.sync_terminated_pod(pod, runtime_pod) => r,
        };
        worker_duration("terminated", started);
        match res {
            Ok(()) => {
                info!(pod = %pod_name, podUID = %uid, "pod terminated");
                self.finish(uid);
                ControlFlow::Break(())
            }
            Err(e) => {
                let delay = self.step_failed(uid, lifecycle, work, &e);
                warn!(pod = %pod_name, podUID = %uid, error = %e, retryIn = %crate::duration::format_go_duration(delay), "error cleaning up terminated pod, will retry");
                ControlFlow::Continue(())
            }
        }
    }

    fn requeue_now(&self, uid: &str, work: PodWork) {
        let mut state = self.state();
        if let Some(s) = state.pods.get_mut(uid) {
            s.in_flight = None;
            if s.pending.is_none() {
                s.pending = Some(work);
            }
        }
    }

    fn transition_to_terminating(&self, uid: &str) {
        let mut state = self.state();
        if let Some(s) = state.pods.get_mut(uid) {
            if s.lifecycle == Lifecycle::Syncing {
                s.lifecycle = Lifecycle::Terminating;
                s.grace = Some(effective_grace(s.pod.as_deref(), None));
                s.kill.get_or_insert(KillRequest::new(KillReason::Terminal));
            }
            if s.pending.is_none()
                && let Some(pod) = s.pod.clone()
            {
                s.pending = Some(PodWork::Sync {
                    update: UpdateType::Sync,
                    pod,
                });
            }
        }
    }

    fn set_lifecycle(&self, uid: &str, lifecycle: Lifecycle, work: PodWork) {
        let mut state = self.state();
        if let Some(s) = state.pods.get_mut(uid) {
            s.lifecycle = lifecycle;
            if s.pending.is_none() {
                s.pending = Some(work);
            }
        }
    }

    /// Marks the worker finished and lets the next static pod with the same name start.
    fn finish(&self, uid: &str) {
        self.queue.forget(uid);
        let mut state = self.state();
        let Some(s) = state.pods.get_mut(uid) else {
            return;
        };
        s.lifecycle = Lifecycle::Finished;
        s.pending = None;
        s.in_flight = None;
        s.failures = 0;
        s.retry_at = None;
        if !s.is_static {
            return;
        }
        let full_name = s.full_name.clone();
        let next = state.static_order.get_mut(&full_name).and_then(|order| {
            order.retain(|u| u != uid);
            order.first().cloned()
        });
        if state
            .static_order
            .get(&full_name)
            .is_some_and(std::vec::Vec::is_empty)
        {
            state.static_order.remove(&full_name);
        }
        if let Some(next) = next
            && let Some(n) = state.pods.get_mut(&next)
        {
            n.started = true;
            n.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;
