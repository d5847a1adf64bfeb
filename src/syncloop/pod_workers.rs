//! Pod workers: one task per pod UID, so one pod's sync never runs twice at once and
//! a slow pod never blocks another. Each pod moves syncing → terminating →
//! terminated, never back; the latest update wins; a grace period only ever shortens.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::work_queue::{WorkQueue, jitter};
use crate::config::{is_static_pod, pod_full_name, pod_ref, pod_uid};
use crate::runtime::types::RuntimePod;

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

/// What the pod workers call (kubelet's `podSyncer`); the seam unit tests fake.
pub trait PodSyncer: Send + Sync + 'static {
    fn sync_pod(
        &self,
        update: UpdateType,
        pod: Arc<Pod>,
        last_sync: Option<Instant>,
    ) -> impl Future<Output = Result<SyncResult, String>> + Send;
    fn sync_terminating_pod(
        &self,
        pod: Arc<Pod>,
        grace: i64,
    ) -> impl Future<Output = Result<(), String>> + Send;
    fn sync_terminating_runtime_pod(
        &self,
        pod: RuntimePod,
    ) -> impl Future<Output = Result<(), String>> + Send;
    fn sync_terminated_pod(
        &self,
        pod: Option<Arc<Pod>>,
        runtime_pod: Option<RuntimePod>,
    ) -> impl Future<Output = Result<(), String>> + Send;
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

/// How long after a successful sync the pod is synced again.
pub const BACK_OFF_PERIOD: Duration = Duration::from_secs(10);

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
    restart_requested: bool,
}

#[derive(Debug, Default)]
struct State {
    pods: HashMap<String, PodSyncStatus>,
    /// Full name → UIDs of static pods in arrival order; the first one may run.
    static_order: HashMap<String, Vec<String>>,
}

/// The pod workers. Cheap to clone.
pub struct PodWorkers<S: PodSyncer> {
    state: Arc<Mutex<State>>,
    syncer: Arc<S>,
    queue: Arc<WorkQueue>,
    resync: Duration,
    cancel: CancellationToken,
}

impl<S: PodSyncer> Clone for PodWorkers<S> {
    fn clone(&self) -> Self {
        PodWorkers {
            state: self.state.clone(),
            syncer: self.syncer.clone(),
            queue: self.queue.clone(),
            resync: self.resync,
            cancel: self.cancel.clone(),
        }
    }
}

impl<S: PodSyncer> PodWorkers<S> {
    pub fn new(
        syncer: Arc<S>,
        queue: Arc<WorkQueue>,
        resync: Duration,
        cancel: CancellationToken,
    ) -> Self {
        PodWorkers {
            state: Arc::default(),
            syncer,
            queue,
            resync,
            cancel,
        }
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
        let mut state = self.state.lock().unwrap();
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
                },
            );
            let me = self.clone();
            let uid2 = uid.clone();
            tokio::spawn(async move { me.worker_loop(uid2).await });
        }
        let status = state.pods.get_mut(&uid).expect("inserted above");
        if status.lifecycle == Lifecycle::Finished {
            if work.update_type == UpdateType::Create {
                status.restart_requested = true;
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

    /// The lifecycle of a pod's worker, if it has one.
    pub fn lifecycle(&self, uid: &str) -> Option<Lifecycle> {
        self.state
            .lock()
            .unwrap()
            .pods
            .get(uid)
            .map(|s| s.lifecycle)
    }

    /// True when the worker exists and has not finished.
    pub fn is_active(&self, uid: &str) -> bool {
        matches!(self.lifecycle(uid), Some(l) if l != Lifecycle::Finished)
    }

    /// UIDs of every worker record.
    pub fn known(&self) -> Vec<String> {
        self.state.lock().unwrap().pods.keys().cloned().collect()
    }

    /// Housekeeping (kubelet's `SyncKnownPods`): forgets finished workers of pods that
    /// are no longer desired, or that asked to be restarted. Returns the restarted UIDs.
    pub fn sync_known_pods(&self, desired: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut state = self.state.lock().unwrap();
        let mut restarted = Vec::new();
        state.pods.retain(|uid, s| {
            if s.lifecycle != Lifecycle::Finished {
                return true;
            }
            if s.restart_requested && desired(uid) {
                restarted.push(uid.clone());
                return false;
            }
            desired(uid)
        });
        restarted
    }

    async fn worker_loop(self, uid: String) {
        let notify = match self.state.lock().unwrap().pods.get(&uid) {
            Some(s) => s.notify.clone(),
            None => return,
        };
        let mut last_sync: Option<Instant> = None;
        loop {
            // Wait for work (and, for static pods, for our turn).
            let (work, lifecycle, pod, runtime_pod, grace, cancel_term) = loop {
                {
                    let mut state = self.state.lock().unwrap();
                    let Some(s) = state.pods.get_mut(&uid) else {
                        return;
                    };
                    if s.started && s.pending.is_some() {
                        let work = s.pending.take().expect("checked");
                        if s.terminate_cancel.is_cancelled() {
                            s.terminate_cancel = CancellationToken::new();
                        }
                        break (
                            work,
                            s.lifecycle,
                            s.pod.clone(),
                            s.runtime_pod.clone(),
                            s.grace.unwrap_or(1),
                            s.terminate_cancel.clone(),
                        );
                    }
                }
                tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = notify.notified() => {}
                }
            };
            let pod_name = pod
                .as_deref()
                .map(pod_ref)
                .or_else(|| runtime_pod.as_ref().map(|r| r.pod_ref()))
                .unwrap_or_default();
            match lifecycle {
                Lifecycle::Syncing => {
                    let Some(pod) = pod else { continue };
                    let started = Instant::now();
                    let res = tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        r = self.syncer.sync_pod(work.update_type, pod.clone(), last_sync) => r,
                    };
                    last_sync = Some(started);
                    match res {
                        Ok(r) if r.terminal => {
                            info!(pod = %pod_name, podUID = %uid, "pod is terminal; terminating it");
                            self.transition_to_terminating(&uid);
                        }
                        Ok(r) => {
                            let next = jitter(self.resync, 0.5);
                            let delay = r.retry_after.map_or(next, |d| d.min(next));
                            self.queue.enqueue(&uid, delay);
                        }
                        Err(e) => {
                            warn!(pod = %pod_name, podUID = %uid, error = %e, "error syncing pod, will retry");
                            self.queue.enqueue(&uid, jitter(BACK_OFF_PERIOD, 0.5));
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
                        Ok(()) => self.set_lifecycle(&uid, Lifecycle::Terminated, work),
                        Err(e) => {
                            warn!(pod = %pod_name, podUID = %uid, error = %e, "error terminating pod, will retry");
                            tokio::select! {
                                _ = self.cancel.cancelled() => return,
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            }
                            self.requeue_now(&uid, work);
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
                            warn!(pod = %pod_name, podUID = %uid, error = %e, "error cleaning up terminated pod, will retry");
                            tokio::select! {
                                _ = self.cancel.cancelled() => return,
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            }
                            self.requeue_now(&uid, work);
                        }
                    }
                }
                Lifecycle::Finished => return,
            }
        }
    }

    fn requeue_now(&self, uid: &str, work: PodWork) {
        let mut state = self.state.lock().unwrap();
        if let Some(s) = state.pods.get_mut(uid)
            && s.pending.is_none()
        {
            s.pending = Some(work);
        }
    }

    fn transition_to_terminating(&self, uid: &str) {
        let mut state = self.state.lock().unwrap();
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
        let mut state = self.state.lock().unwrap();
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
        let mut state = self.state.lock().unwrap();
        let Some(s) = state.pods.get_mut(uid) else {
            return;
        };
        s.lifecycle = Lifecycle::Finished;
        s.pending = None;
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

#[cfg(test)]
mod tests;
