//! The shutdown manager (kubelet's `nodeshutdown` manager on Linux): it holds a delay
//! inhibitor lock from logind; when logind announces a shutdown it marks the node as
//! shutting down (admission refuses new pods, the Ready condition goes False), stops
//! the pods group by group, lowest priority first, each group within its budget, and
//! then releases the lock so the shutdown goes on. A cancelled shutdown takes the lock
//! again. Without logind at start it says so once and stays idle; once it has watched,
//! it reconnects every second after the bus goes away, as kubelet's.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::groups::{Group, PriorityGrace, group_by_priority, period_requested, range_text};
use super::logind::{InhibitLock, Logind, LogindError};
use super::storage::ShutdownTimes;
use crate::contracts::{NodeShutdownState, PodTerminator, Termination};
use crate::duration::format_go_duration;
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::pod::{pod_ref, pod_uid};

/// kubelet's status for a pod stopped by the shutdown.
pub(crate) const SHUTDOWN_REASON: &str = "Terminated";
pub(crate) const SHUTDOWN_MESSAGE: &str =
    "Pod was terminated in response to imminent node shutdown.";
/// The node event's messages (its reason is `NodeShutdown`).
const EVENT_SHUTDOWN: &str = "Shutdown manager detected shutdown event";
const EVENT_CANCELLED: &str = "Shutdown manager detected shutdown cancellation";
/// kubelet's `dbusReconnectPeriod`.
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
/// How often a group's pods are checked for having stopped.
const STOPPED_POLL: Duration = Duration::from_millis(100);

/// Why the manager could not start watching.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error(transparent)]
    Logind(#[from] LogindError),
    #[error(
        "logind's InhibitDelayMaxSec is {} after raising it to {}, the sum of the shutdown's budgets; logind would not wait for the pods",
        format_go_duration(*current),
        format_go_duration(*requested)
    )]
    DelayTooShort {
        requested: Duration,
        current: Duration,
    },
}

/// What the manager works with.
pub(crate) struct ManagerDeps<L> {
    pub logind: L,
    /// The budgets, sorted by priority, lowest first; not empty.
    pub groups: Vec<PriorityGrace>,
    pub state: Arc<NodeShutdownState>,
    pub pods: Arc<dyn PodTerminator>,
    pub events: EventRecorder,
    pub node_name: String,
    /// SIGUSR1 starts a shutdown too (kubelet's); off in unit tests, as it is process-wide.
    pub sigusr1: bool,
    /// Where the last shutdown's times are kept for the metrics (None in unit tests,
    /// whose gauges are process-wide).
    pub times: Option<ShutdownTimes>,
}

/// The manager, holding the inhibitor lock while it watches.
pub(crate) struct Manager<L> {
    d: ManagerDeps<L>,
    lock: Option<InhibitLock>,
}

/// How watching one connection ended.
enum Watch {
    /// The signals stopped: the bus went away.
    Ended,
    Cancelled,
}

impl<L: Logind> Manager<L> {
    pub(crate) fn new(d: ManagerDeps<L>) -> Self {
        Manager { d, lock: None }
    }

    /// Watches for shutdowns until `cancel`. A failed first start is said once and
    /// the manager then waits idle (kubelet's `Start` does not retry it).
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        if let Some(t) = &self.d.times {
            t.restore();
        }
        let mut events = match self.start().await {
            Ok(events) => Some(events),
            Err(e) => {
                warn!(error = %e, "graceful node shutdown is off: cannot watch logind for a node shutdown, so pods will not be stopped before the node shuts down");
                cancel.cancelled().await;
                return;
            }
        };
        info!(target: crate::logging::STARTUP_TARGET, "graceful node shutdown: holding a delay inhibitor lock from logind and watching for PrepareForShutdown");
        let mut usr1 = self.usr1();
        let mut failures = 0_u32;
        loop {
            if let Some(stream) = events.take()
                && let Watch::Cancelled = self.watch(stream, &mut usr1, &cancel).await
            {
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(RECONNECT_PERIOD) => {}
            }
            match self.start().await {
                Ok(stream) => {
                    info!(failures, "node shutdown manager: watching logind again");
                    failures = 0;
                    events = Some(stream);
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        warn!(error = %e, retryIn = %format_go_duration(RECONNECT_PERIOD), "node shutdown manager: cannot watch logind again; retrying every second");
                    } else {
                        debug!(error = %e, failures, "node shutdown manager: still cannot watch logind");
                    }
                }
            }
        }
    }

    fn usr1(&self) -> Option<tokio::signal::unix::Signal> {
        if !self.d.sigusr1 {
            return None;
        }
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
            .inspect_err(|e| warn!(error = %e, "node shutdown manager: cannot listen for SIGUSR1"))
            .ok()
    }

    /// kubelet's `start`: connect, make sure logind waits long enough, take the lock,
    /// subscribe to the signal.
    async fn start(&mut self) -> Result<BoxStream<'static, bool>, StartError> {
        self.d.logind.connect().await?;
        let current = self.d.logind.inhibit_delay_max().await?;
        let requested = period_requested(&self.d.groups);
        if requested > current {
            info!(
                current = %format_go_duration(current),
                requested = %format_go_duration(requested),
                "node shutdown manager: logind's InhibitDelayMaxSec is shorter than the shutdown's budgets together; raising it with a logind drop-in and reloading logind"
            );
            self.d.logind.override_inhibit_delay(requested).await?;
            self.d.logind.reload_logind().await?;
            let current = self.d.logind.inhibit_delay_max().await?;
            if requested > current {
                return Err(StartError::DelayTooShort { requested, current });
            }
        }
        self.take_lock().await?;
        match self.d.logind.shutdown_events().await {
            Ok(events) => Ok(events),
            Err(e) => {
                self.release_lock();
                Err(e.into())
            }
        }
    }

    /// Takes a new lock, then lets the old one go (kubelet's `acquireInhibitLock`).
    async fn take_lock(&mut self) -> Result<(), LogindError> {
        let lock = self.d.logind.inhibit_shutdown().await?;
        self.lock = Some(lock);
        debug!("node shutdown manager: took a delay inhibitor lock from logind");
        Ok(())
    }

    fn release_lock(&mut self) {
        if self.lock.take().is_some() {
            debug!("node shutdown manager: released the delay inhibitor lock");
        }
    }

    /// Handles logind's signals (and SIGUSR1) until the stream ends or `cancel`.
    async fn watch(
        &mut self,
        mut events: BoxStream<'static, bool>,
        usr1: &mut Option<tokio::signal::unix::Signal>,
        cancel: &CancellationToken,
    ) -> Watch {
        loop {
            let usr1_recv = async {
                match usr1.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            let shutting_down = tokio::select! {
                () = cancel.cancelled() => return Watch::Cancelled,
                e = events.next() => match e {
                    Some(e) => e,
                    None => {
                        warn!("node shutdown manager: logind's signals ended (the system bus went away); reconnecting in 1s");
                        self.release_lock();
                        return Watch::Ended;
                    }
                },
                Some(()) = usr1_recv => {
                    info!("node shutdown manager: SIGUSR1 received, handled as a shutdown");
                    true
                }
            };
            if shutting_down {
                if self.shutdown(cancel).await.is_err() {
                    return Watch::Cancelled;
                }
            } else {
                self.cancelled().await;
            }
        }
    }

    /// A shutdown started: mark the node, stop the pods, release the lock.
    async fn shutdown(&mut self, cancel: &CancellationToken) -> Result<(), Cancelled> {
        self.node_event(EVENT_SHUTDOWN);
        self.d.state.set(true);
        let pods = self.d.pods.running_pods();
        info!(
            pods = pods.len(),
            budget = %format_go_duration(period_requested(&self.d.groups)),
            "node is shutting down (logind sent PrepareForShutdown): new pods are refused, the node is not Ready, and the running pods are stopped by priority, lowest first"
        );
        let groups = group_by_priority(&self.d.groups, pods);
        let started = std::time::SystemTime::now();
        if let Some(t) = &self.d.times {
            t.record(started, None);
        }
        let outcome = self.stop_groups(groups, cancel).await;
        if let Some(t) = &self.d.times {
            t.record(started, Some(std::time::SystemTime::now()));
        }
        self.release_lock();
        if outcome.is_ok() {
            info!(
                "node shutdown manager: done; the inhibitor lock is released, so the node shuts down now"
            );
        }
        outcome
    }

    /// Each group in turn: its pods stopped together, waited for up to its budget.
    async fn stop_groups(
        &self,
        groups: Vec<Group>,
        cancel: &CancellationToken,
    ) -> Result<(), Cancelled> {
        for (i, group) in groups.iter().enumerate() {
            // kubelet does not wait for a group with no pods.
            if group.pods.is_empty() {
                continue;
            }
            let range = range_text(&self.d.groups, i);
            let budget = Duration::from_secs(u64::try_from(group.grace.seconds).unwrap_or(0));
            info!(
                pods = group.pods.len(),
                priority = group.grace.priority,
                gracePeriod = group.grace.seconds,
                "node is shutting down: stopping {} pods {range} within {}",
                group.pods.len(),
                format_go_duration(budget)
            );
            for pod in &group.pods {
                self.stop_pod(pod, group.grace.seconds);
            }
            let left = self.wait_stopped(&group.pods, budget, cancel).await?;
            if left == 0 {
                info!(
                    priority = group.grace.priority,
                    "node shutdown manager: every pod {range} has stopped"
                );
            } else {
                info!(
                    pods = left,
                    priority = group.grace.priority,
                    "node shutdown manager: {left} pods {range} are still stopping after their group's {}; going on with the next group",
                    format_go_duration(budget)
                );
            }
        }
        Ok(())
    }

    /// One pod, with the group's grace or its own when shorter (kubelet's rule).
    fn stop_pod(&self, pod: &Arc<Pod>, group_grace: i64) {
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let grace = own.filter(|g| *g <= group_grace).unwrap_or(group_grace);
        let whose = if grace < group_grace {
            "its own"
        } else {
            "its priority group's"
        };
        info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), gracePeriod = grace, cause = "node is shutting down",
            "node shutdown manager: stopping pod within {grace}s ({whose} grace)");
        let stopping = self.d.pods.terminate(
            pod.clone(),
            Termination {
                reason: SHUTDOWN_REASON.into(),
                message: SHUTDOWN_MESSAGE.into(),
                grace_seconds: grace,
            },
        );
        if !stopping {
            debug!(pod = %pod_ref(pod), podUID = %pod_uid(pod), "node shutdown manager: the pod had already stopped");
        }
    }

    /// Waits until every pod has stopped or `budget` is over; the pods still stopping.
    async fn wait_stopped(
        &self,
        pods: &[Arc<Pod>],
        budget: Duration,
        cancel: &CancellationToken,
    ) -> Result<usize, Cancelled> {
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            let left = pods
                .iter()
                .filter(|p| !self.d.pods.terminated(pod_uid(p)))
                .count();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(left);
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(Cancelled),
                () = tokio::time::sleep(STOPPED_POLL.min(deadline - tokio::time::Instant::now())) => {}
            }
        }
    }

    /// kubelet's `NodeShutdown` event on the Node.
    fn node_event(&self, message: &'static str) {
        let node = ObjectRef::node(&self.d.node_name);
        let reason = crate::events::reason::NODE_SHUTDOWN;
        self.d
            .events
            .event(&node, EventType::Normal, reason, message);
    }

    /// The shutdown was cancelled: the node is usable again, and the lock is taken
    /// anew for the next one.
    async fn cancelled(&mut self) {
        self.node_event(EVENT_CANCELLED);
        self.d.state.set(false);
        info!(
            "node shutdown cancelled (logind sent PrepareForShutdown false): pods are admitted again; taking the inhibitor lock again"
        );
        if let Err(e) = self.take_lock().await {
            warn!(error = %e, "node shutdown manager: cannot take the inhibitor lock again; the next shutdown will not wait for the pods");
        }
    }
}

/// The agent is stopping: the manager stops where it is.
#[derive(Debug)]
struct Cancelled;
