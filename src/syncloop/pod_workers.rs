//! Pod workers: one task per pod UID, so one pod's sync never runs twice at once and
//! a slow pod never blocks another. Each pod moves syncing → terminating →
//! terminated, never back; the latest update wins; a grace period only ever shortens.
//! Each worker runs under a supervisor that sees its end: a worker that panics is
//! restarted and its step retried with back-off, so no pod and no static pod full
//! name is ever left with a dead worker.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::work_queue::{WorkQueue, jitter};
use crate::pod::{is_static_pod, pod_full_name, pod_ref, pod_uid};
use crate::runtime::CriError;
use crate::runtime::manager::SyncError;
use crate::runtime::types::RuntimePod;
use crate::tasks::Tasks;

/// Why the pod worker is asked to act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    Create,
    Update,
    Sync,
    Kill,
}

/// A request to stop a pod, with the reason and an optional grace override
/// (eviction, runtime-only pods, REMOVE from config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillRequest {
    pub grace_override: Option<i64>,
    pub reason: String,
}

/// One update for a pod worker.
#[derive(Debug, Clone)]
pub struct PodWork {
    pub update_type: UpdateType,
    /// The desired pod (None for a pod known only to the runtime).
    pub pod: Option<Arc<Pod>>,
    /// The runtime pod, for pods known only to the runtime.
    pub runtime_pod: Option<RuntimePod>,
    pub kill: Option<KillRequest>,
}

/// Result of one `sync_pod`.
#[derive(Debug, Default, Clone)]
pub struct SyncResult {
    /// The pod reached a terminal phase: start terminating it.
    pub terminal: bool,
    /// A back-off ends then: sync again no later than this.
    pub retry_after: Option<Duration>,
}

/// Why one step of a pod worker failed; the worker logs it and retries with back-off.
#[derive(Debug, thiserror::Error)]
pub enum PodSyncError {
    #[error("cannot inspect the pod in the runtime: {0}")]
    Inspect(String),
    #[error(transparent)]
    Cri(#[from] CriError),
    #[error(transparent)]
    Runtime(#[from] SyncError),
    #[error("container {0} is still running after the kill")]
    StillRunning(String),
}

/// What the pod workers call (kubelet's `podSyncer`); the seam unit tests fake.
pub trait PodSyncer: Send + Sync + 'static {
    fn sync_pod(
        &self,
        update: UpdateType,
        pod: Arc<Pod>,
        last_sync: Option<Instant>,
    ) -> impl Future<Output = Result<SyncResult, PodSyncError>> + Send;
    fn sync_terminating_pod(
        &self,
        pod: Arc<Pod>,
        grace: i64,
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
pub fn effective_grace(pod: Option<&Pod>, kill: Option<&KillRequest>) -> i64 {
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
pub fn merge_grace(current: Option<i64>, new: i64) -> i64 {
    current.map_or(new, |c| c.min(new))
}

/// The first wait before a failed sync is retried (kubelet's `backOffPeriod`).
pub const BACK_OFF_PERIOD: Duration = Duration::from_secs(10);
/// The longest wait before a sync that keeps failing is retried (kubelet's cap for
/// crash-loop back-off).
pub const MAX_BACK_OFF: Duration = Duration::from_secs(300);
/// The first wait before a failed kill or cleanup is retried.
pub const TERMINATE_BACK_OFF: Duration = Duration::from_secs(1);

/// The wait before retrying a step that failed `failures` times in a row (errors and
/// panics alike): doubling from 10 s up to 5 min for syncs, so a pod that keeps
/// failing costs less and less; doubling from 1 s up to 10 s for kills and
/// cleanups, so a pod being stopped is never left waiting long.
pub fn failure_back_off(lifecycle: Lifecycle, failures: u32) -> Duration {
    let (base, max) = match lifecycle {
        Lifecycle::Syncing => (BACK_OFF_PERIOD, MAX_BACK_OFF),
        _ => (TERMINATE_BACK_OFF, BACK_OFF_PERIOD),
    };
    let doublings = failures.saturating_sub(1).min(16);
    base.saturating_mul(1 << doublings).min(max)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Syncing,
    Terminating,
    Terminated,
    Finished,
}

#[derive(Debug)]
struct PodSyncStatus {
    notify: Arc<Notify>,
    pending: Option<PodWork>,
    pod: Option<Arc<Pod>>,
    runtime_pod: Option<RuntimePod>,
    lifecycle: Lifecycle,
    grace: Option<i64>,
    /// Cancels an in-flight terminate so it restarts with a shorter grace period.
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

#[derive(Debug, Default)]
struct State {
    pods: HashMap<String, PodSyncStatus>,
    /// Full name → UIDs of static pods in arrival order; the first one may run.
    static_order: HashMap<String, Vec<String>>,
    /// UIDs purged for a restart whose new worker has not been created yet.
    restarting: HashSet<String>,
}

/// The pod workers. Cheap to clone.
pub struct PodWorkers<S: PodSyncer> {
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
    pub fn new(syncer: Arc<S>, queue: Arc<WorkQueue>, resync: Duration, tasks: Tasks) -> Self {
        PodWorkers {
            state: Arc::default(),
            syncer,
            queue,
            resync,
            cancel: tasks.token(),
            tasks,
        }
    }

    /// The state, even after a panic elsewhere poisoned its lock: every change to it
    /// is a few plain assignments, so what a panicking holder left is still whole.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands an update to the pod's worker, starting the worker if needed.
    pub fn update_pod(&self, work: PodWork) {
        let uid = work
            .pod
            .as_deref()
            .map(|p| pod_uid(p).to_string())
            .or_else(|| work.runtime_pod.as_ref().map(|r| r.uid.clone()))
            .unwrap_or_default();
        if uid.is_empty() {
            return;
        }
        let mut state = self.state();
        let state = &mut *state;
        if !state.pods.contains_key(&uid) {
            if work.update_type == UpdateType::Kill
                && work.pod.is_none()
                && work.runtime_pod.is_none()
            {
                return;
            }
            let (full_name, is_static) = match work.pod.as_deref() {
                Some(p) => (pod_full_name(p), is_static_pod(p)),
                None => (String::new(), false),
            };
            let started = if is_static {
                let order = state.static_order.entry(full_name.clone()).or_default();
                order.push(uid.clone());
                order.first() == Some(&uid)
            } else {
                true
            };
            if !started {
                info!(pod = %work.pod.as_deref().map(pod_ref).unwrap_or_default(), podUID = %uid, "static pod waits for the previous pod with the same name to terminate");
            }
            let new_life = state.restarting.remove(&uid);
            state.pods.insert(
                uid.clone(),
                PodSyncStatus {
                    notify: Arc::new(Notify::new()),
                    pending: None,
                    pod: None,
                    runtime_pod: None,
                    lifecycle: Lifecycle::Syncing,
                    grace: None,
                    terminate_cancel: CancellationToken::new(),
                    full_name,
                    is_static,
                    started,
                    restart_requested: false,
                    new_life,
                    in_flight: None,
                    failures: 0,
                    retry_at: None,
                },
            );
            self.spawn_supervised(&uid);
        }
        let status = state.pods.get_mut(&uid).expect("inserted above");
        let pod_name = || work.pod.as_deref().map(pod_ref).unwrap_or_default();
        if status.lifecycle != Lifecycle::Syncing && work.update_type == UpdateType::Create {
            // The same UID added again after its termination was asked for (a static
            // pod with a fixed UID, removed and restored): it runs again as a new
            // life once the old one has fully terminated (kubelet's restartRequested).
            if !status.restart_requested {
                info!(pod = %pod_name(), podUID = %uid, "pod re-added while terminating; it starts again once terminated");
            }
            status.restart_requested = true;
            return;
        }
        if status.lifecycle == Lifecycle::Finished {
            if work.update_type == UpdateType::Kill && work.pod.is_some() {
                // A finished pod removed from its source: its terminal containers and
                // status were kept while it was desired; clean them up now, in the
                // worker, so a re-add of the same UID waits for that.
                debug!(pod = %pod_name(), podUID = %uid, "finished pod removed; cleaning up what it left");
                status.lifecycle = Lifecycle::Terminated;
                status.pod = work.pod.clone();
                status.pending = Some(work);
                status.retry_at = None;
                self.spawn_supervised(&uid);
            }
            return;
        }
        if let Some(p) = &work.pod {
            status.pod = Some(p.clone());
        }
        if let Some(r) = &work.runtime_pod {
            status.runtime_pod = Some(r.clone());
        }
        let deleting = work
            .pod
            .as_deref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        if work.kill.is_some() || deleting {
            let grace = effective_grace(status.pod.as_deref(), work.kill.as_ref());
            match status.lifecycle {
                Lifecycle::Syncing => {
                    status.lifecycle = Lifecycle::Terminating;
                    status.grace = Some(grace);
                }
                Lifecycle::Terminating => {
                    let merged = merge_grace(status.grace, grace);
                    if Some(merged) != status.grace {
                        debug!(podUID = %uid, grace = merged, "shorter grace period: restarting termination");
                        status.grace = Some(merged);
                        status.terminate_cancel.cancel();
                    }
                }
                _ => {}
            }
        }
        // Latest update wins, but a kill is never lost to a later plain update.
        let kill = work
            .kill
            .clone()
            .or_else(|| status.pending.as_ref().and_then(|p| p.kill.clone()));
        status.pending = Some(PodWork { kill, ..work });
        status.notify.notify_one();
    }

    /// Starts the pod's worker under its supervisor. The supervisor task is the
    /// worker's owner (it awaits the worker's handle) and ends with it; shutdown
    /// ends both through the cancellation token and waits for both in the task tree.
    fn spawn_supervised(&self, uid: &str) {
        let me = self.clone();
        let uid = uid.to_string();
        self.tasks.track(async move { me.supervise(uid).await });
    }

    /// Runs the worker and watches its end: a normal end (finished, forgotten or
    /// shut down) ends the supervision; a panic is logged with the pod, the step
    /// that panicked is put back with back-off, and a new worker takes over.
    async fn supervise(self, uid: String) {
        loop {
            let worker = self.tasks.track(self.clone().worker_loop(uid.clone()));
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
            error!(pod = %pod_name, podUID = %uid, state = ?lifecycle, panic = %panic_message(&*panic), retryIn = ?delay, "pod worker panicked; retrying with back-off");
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
        let pod_name = s
            .pod
            .as_deref()
            .map(pod_ref)
            .or_else(|| s.runtime_pod.as_ref().map(|r| r.pod_ref()))
            .unwrap_or_default();
        let delay = Self::record_failure(s, lifecycle, work);
        Some((pod_name, lifecycle, delay))
    }

    /// Counts a failed step, holds further steps in that state back, and keeps the
    /// failed work (unless a newer update replaced it) to be retried.
    fn record_failure(
        s: &mut PodSyncStatus,
        lifecycle: Lifecycle,
        work: Option<PodWork>,
    ) -> Duration {
        s.failures = s.failures.saturating_add(1);
        let mut delay = failure_back_off(lifecycle, s.failures);
        if lifecycle == Lifecycle::Syncing {
            delay = jitter(delay, 0.5);
        }
        s.retry_at = Some((lifecycle, Instant::now() + delay));
        s.in_flight = None;
        if s.pending.is_none() {
            s.pending = work;
        }
        s.notify.notify_one();
        delay
    }

    fn step_failed(&self, uid: &str, lifecycle: Lifecycle, work: PodWork) -> Duration {
        let mut state = self.state();
        match state.pods.get_mut(uid) {
            Some(s) => Self::record_failure(s, lifecycle, Some(work)),
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
    pub fn lifecycle(&self, uid: &str) -> Option<Lifecycle> {
        self.state().pods.get(uid).map(|s| s.lifecycle)
    }

    /// True when the worker exists and has not finished.
    pub fn is_active(&self, uid: &str) -> bool {
        matches!(self.lifecycle(uid), Some(l) if l != Lifecycle::Finished)
    }

    /// UIDs of every worker record.
    pub fn known(&self) -> Vec<String> {
        self.state().pods.keys().cloned().collect()
    }

    /// Housekeeping (kubelet's `SyncKnownPods`): forgets finished workers of pods that
    /// are no longer desired, or that asked to be restarted. Returns the restarted
    /// UIDs; the caller sends each a create, which starts a new life.
    pub fn sync_known_pods(&self, desired: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut state = self.state();
        let state = &mut *state;
        let mut restarted = Vec::new();
        state.pods.retain(|uid, s| {
            if s.lifecycle != Lifecycle::Finished {
                return true;
            }
            let wanted = desired(uid);
            if s.restart_requested && wanted {
                restarted.push(uid.clone());
                return false;
            }
            wanted
        });
        state.restarting.retain(|uid| desired(uid));
        state.restarting.extend(restarted.iter().cloned());
        restarted
    }

    async fn worker_loop(self, uid: String) {
        let notify = match self.state().pods.get(&uid) {
            Some(s) => s.notify.clone(),
            None => return,
        };
        let mut last_sync: Option<Instant> = None;
        loop {
            // Wait for work (for static pods, for our turn; after a failure, for the
            // back-off to end).
            let (work, lifecycle, pod, runtime_pod, grace, cancel_term, new_life) = loop {
                let held_until = {
                    let mut state = self.state();
                    let Some(s) = state.pods.get_mut(&uid) else {
                        return;
                    };
                    if s.lifecycle == Lifecycle::Finished {
                        return;
                    }
                    let held = s.held_until(Instant::now());
                    if s.may_act() && s.pending.is_some() && held.is_none() {
                        let work = s.pending.take().expect("checked");
                        if s.terminate_cancel.is_cancelled() {
                            s.terminate_cancel = CancellationToken::new();
                        }
                        s.in_flight = Some((s.lifecycle, work.clone()));
                        break (
                            work,
                            s.lifecycle,
                            s.pod.clone(),
                            s.runtime_pod.clone(),
                            s.grace.unwrap_or(1),
                            s.terminate_cancel.clone(),
                            s.new_life,
                        );
                    }
                    held.filter(|_| s.may_act() && s.pending.is_some())
                };
                let back_off_over = async {
                    match held_until {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = notify.notified() => {}
                    _ = back_off_over => {}
                }
            };
            let pod_name = pod
                .as_deref()
                .map(pod_ref)
                .or_else(|| runtime_pod.as_ref().map(|r| r.pod_ref()))
                .unwrap_or_default();
            match lifecycle {
                Lifecycle::Syncing => {
                    let Some(pod) = pod else {
                        self.step_succeeded(&uid);
                        continue;
                    };
                    let started = Instant::now();
                    let step = async {
                        if new_life {
                            info!(pod = %pod_name, podUID = %uid, "pod re-created with the UID of a terminated pod: clearing its previous life");
                            self.syncer.clear_previous_life(pod.clone()).await?;
                            if let Some(s) = self.state().pods.get_mut(&uid) {
                                s.new_life = false;
                            }
                        }
                        self.syncer
                            .sync_pod(work.update_type, pod.clone(), last_sync)
                            .await
                    };
                    let res = tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        r = step => r,
                    };
                    last_sync = Some(started);
                    match res {
                        Ok(r) if r.terminal => {
                            self.step_succeeded(&uid);
                            info!(pod = %pod_name, podUID = %uid, "pod is terminal; terminating it");
                            self.transition_to_terminating(&uid);
                        }
                        Ok(r) => {
                            self.step_succeeded(&uid);
                            let next = jitter(self.resync, 0.5);
                            let delay = r.retry_after.map_or(next, |d| d.min(next));
                            self.queue.enqueue(&uid, delay);
                        }
                        Err(e) => {
                            let delay = self.step_failed(&uid, lifecycle, work);
                            warn!(pod = %pod_name, podUID = %uid, error = %e, retryIn = ?delay, "error syncing pod, will retry");
                        }
                    }
                }
                Lifecycle::Terminating => {
                    info!(pod = %pod_name, podUID = %uid, gracePeriod = grace, reason = %work.kill.as_ref().map(|k| k.reason.as_str()).unwrap_or("deleted"), "terminating pod");
                    let fut = async {
                        match (&pod, &runtime_pod) {
                            (Some(p), _) => {
                                self.syncer.sync_terminating_pod(p.clone(), grace).await
                            }
                            (None, Some(r)) => {
                                self.syncer.sync_terminating_runtime_pod(r.clone()).await
                            }
                            (None, None) => Ok(()),
                        }
                    };
                    let res = tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = cancel_term.cancelled() => {
                            // A shorter grace period arrived: go again with it.
                            self.requeue_now(&uid, work);
                            continue;
                        }
                        r = fut => r,
                    };
                    match res {
                        Ok(()) => {
                            self.step_succeeded(&uid);
                            self.set_lifecycle(&uid, Lifecycle::Terminated, work)
                        }
                        Err(e) => {
                            let delay = self.step_failed(&uid, lifecycle, work);
                            warn!(pod = %pod_name, podUID = %uid, error = %e, retryIn = ?delay, "error terminating pod, will retry");
                        }
                    }
                }
                Lifecycle::Terminated => {
                    let res = tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        r = self.syncer.sync_terminated_pod(pod.clone(), runtime_pod.clone()) => r,
                    };
                    match res {
                        Ok(()) => {
                            info!(pod = %pod_name, podUID = %uid, "pod terminated");
                            self.finish(&uid);
                            return;
                        }
                        Err(e) => {
                            let delay = self.step_failed(&uid, lifecycle, work);
                            warn!(pod = %pod_name, podUID = %uid, error = %e, retryIn = ?delay, "error cleaning up terminated pod, will retry");
                        }
                    }
                }
                Lifecycle::Finished => return,
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
            }
            if s.pending.is_none() {
                s.pending = Some(PodWork {
                    update_type: UpdateType::Sync,
                    pod: s.pod.clone(),
                    runtime_pod: s.runtime_pod.clone(),
                    kill: None,
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
            .is_some_and(|o| o.is_empty())
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

/// The text of a panic payload (a `&str` or `String` for `panic!` with a message).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}

#[cfg(test)]
mod tests;
