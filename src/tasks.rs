//! The agent's one supervised task tree.
//!
//! Every long-lived task (sources, merger, sync loop, PLEG, pod workers, housekeeping,
//! servers, the runtime supervisor) is spawned here, by name, into one root
//! [`TaskTracker`] with a child [`CancellationToken`] of one root token. No task can end
//! unseen: a *critical* task that ends before shutdown (with `Err`, with `Ok`, or in a
//! panic) is logged with its name and cancels the whole tree, and the agent exits with a
//! non-zero code; a *restarting* task is logged and started again after a back-off.
//! Shutdown cancels the tree and waits for every task in it.
//!
//! Scopes ([`Tasks::child`]) let a part of the tree stop first (the agent before the
//! managed containerd it talks to); their tasks are still tracked by the root.

use crate::locks::Locked as _;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, warn};

/// What a task returns: any error type, kept for the report.
pub(crate) type TaskResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// How a task that ended unseen ended.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum TaskEnd {
    #[error("failed: {0}")]
    Failed(Arc<dyn std::error::Error + Send + Sync>),
    #[error("panicked: {0}")]
    Panicked(String),
    #[error("ended before shutdown")]
    EndedEarly,
}

/// A critical task ended before shutdown; the agent stops because of it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("task {name} {end}")]
pub(crate) struct TaskFailure {
    pub name: &'static str,
    pub end: TaskEnd,
}

/// The back-off between restarts of a restarting task: doubling from `initial` to
/// `max`; a run that lasted at least `max` starts over at `initial`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after `current`: doubled, up to `max`.
    pub(crate) fn after(&self, current: Duration) -> Duration {
        (current * 2).min(self.max)
    }
}

impl Default for Backoff {
    /// 1 s doubling to 30 s, as the managed containerd's restarts.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// What every scope of one tree shares: the root token and the first failure.
#[derive(Debug)]
struct Shared {
    root: CancellationToken,
    /// Fired only by a critical task's failure (shutdown does not fire it).
    failed: CancellationToken,
    failure: Mutex<Option<TaskFailure>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One scope of the task tree. Cheap to clone; clones spawn into the same scope.
#[derive(Debug, Clone)]
pub(crate) struct Tasks {
    shared: Arc<Shared>,
    token: CancellationToken,
    tracker: TaskTracker,
    /// The trackers of the enclosing scopes, root first: they track this scope's tasks too.
    ancestors: Arc<[TaskTracker]>,
}

impl Default for Tasks {
    fn default() -> Self {
        Self::new()
    }
}

impl Tasks {
    /// A new tree: its root scope.
    pub(crate) fn new() -> Self {
        let root = CancellationToken::new();
        Tasks {
            shared: Arc::new(Shared {
                root: root.clone(),
                failed: CancellationToken::new(),
                failure: Mutex::new(None),
            }),
            token: root,
            tracker: TaskTracker::new(),
            ancestors: Arc::from(Vec::new()),
        }
    }

    /// A scope inside this one: cancelled with it (and on its own by
    /// [`shutdown`](Self::shutdown)); its tasks are waited for by every enclosing scope.
    pub(crate) fn child(&self) -> Tasks {
        let mut ancestors = self.ancestors.to_vec();
        ancestors.push(self.tracker.clone());
        Tasks {
            shared: self.shared.clone(),
            token: self.token.child_token(),
            tracker: TaskTracker::new(),
            ancestors: Arc::from(ancestors),
        }
    }

    /// This scope's token: cancelled at its shutdown, at the tree's, or on a failure.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Spawns `fut` into this scope and every enclosing one.
    fn spawn_tracked<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<T> {
        let mut fut: BoxFuture<T> = Box::pin(fut);
        for t in self.ancestors.iter() {
            fut = Box::pin(t.track_future(fut));
        }
        self.tracker.spawn(fut)
    }

    /// Tracks a task that supervises itself (a pod worker and its supervisor): it is
    /// waited for at shutdown, and must end when [`token`](Self::token) is cancelled.
    /// Its CPU time is charged to `name` (see [`cpu`]).
    pub(crate) fn track<T: Send + 'static>(
        &self,
        name: &'static str,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<T> {
        self.spawn_tracked(cpu::metered(name, fut))
    }

    /// Spawns a task the agent cannot run without. Its end before shutdown (an `Err`,
    /// an `Ok`, or a panic) is logged with `name` and stops the whole tree.
    pub(crate) fn spawn_critical<F, Fut>(&self, name: &'static str, make: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let token = self.token.child_token();
        let fut = make(token.clone());
        let shared = self.shared.clone();
        self.spawn_tracked(cpu::metered(name, async move {
            let end = run_caught(fut).await;
            if token.is_cancelled() {
                log_end_at_shutdown(name, end);
                return;
            }
            let end = end.err().unwrap_or(TaskEnd::EndedEarly);
            error!(task = name, error = %end, "critical task ended; stopping the agent");
            shared.fail(TaskFailure { name, end });
        }));
    }

    /// Spawns a task that is started again (by calling `make` anew) after any end
    /// before shutdown, with `backoff` between attempts; each end is logged with `name`.
    pub(crate) fn spawn_restarting<F, Fut>(&self, name: &'static str, backoff: Backoff, mut make: F)
    where
        F: FnMut(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let token = self.token.child_token();
        self.spawn_tracked(cpu::metered(name, async move {
            let mut delay = backoff.initial;
            loop {
                let started = Instant::now();
                let end = run_caught(make(token.clone())).await;
                if token.is_cancelled() {
                    log_end_at_shutdown(name, end);
                    return;
                }
                if started.elapsed() >= backoff.max {
                    delay = backoff.initial;
                }
                let end = end.err().unwrap_or(TaskEnd::EndedEarly);
                error!(task = name, error = %end, retryIn = %crate::duration::format_go_duration(delay), "task ended; restarting it after a back-off");
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = backoff.after(delay);
            }
        }));
    }

    /// Spawns one pass of a periodic job (housekeeping), which its caller starts
    /// again at its next tick: a failure or panic is logged with `name`, and the pass
    /// is dropped at shutdown.
    pub(crate) fn spawn_pass(
        &self,
        name: &'static str,
        fut: impl Future<Output = TaskResult> + Send + 'static,
    ) -> JoinHandle<()> {
        let token = self.token.clone();
        self.spawn_tracked(cpu::metered(name, async move {
            tokio::select! {
                () = token.cancelled() => {}
                end = run_caught(fut) => if let Err(end) = end {
                    error!(task = name, error = %end, "task pass ended in error; the next pass runs at its tick");
                }
            }
        }))
    }

    /// Resolves once a critical task has failed, with that failure.
    pub(crate) async fn failed(&self) -> TaskFailure {
        self.shared.failed.cancelled().await;
        self.failure().expect("set before `failed` fires")
    }

    /// The first critical failure, if any.
    pub(crate) fn failure(&self) -> Option<TaskFailure> {
        self.shared.failure.locked().clone()
    }

    /// Cancels this scope and waits up to `timeout` for each of its tasks to end.
    /// Returns false if some did not.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> bool {
        self.token.cancel();
        self.tracker.close();
        tokio::time::timeout(timeout, self.tracker.wait())
            .await
            .is_ok()
    }

    /// The number of tasks running in this scope (the census, and tests).
    pub(crate) fn len(&self) -> usize {
        self.tracker.len()
    }

    /// True when no task runs in this scope.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }
}

impl Shared {
    /// Records the first failure and cancels the tree.
    fn fail(&self, failure: TaskFailure) {
        {
            let mut slot = self.failure.locked();
            if slot.is_none() {
                *slot = Some(failure);
            }
        }
        self.failed.cancel();
        self.root.cancel();
    }
}

/// Runs `fut`, turning an `Err` or a panic into a [`TaskEnd`].
async fn run_caught(fut: impl Future<Output = TaskResult>) -> Result<(), TaskEnd> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(TaskEnd::Failed(Arc::from(e))),
        Err(panic) => Err(TaskEnd::Panicked(panic_message(&*panic))),
    }
}

/// A task that ends in error while shutting down is still worth a line.
fn log_end_at_shutdown(name: &'static str, end: Result<(), TaskEnd>) {
    if let Err(end) = end {
        warn!(task = name, error = %end, "task ended in error during shutdown");
    }
}

/// The text of a panic's payload (a `&str` or `String` for `panic!` with a message).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(std::string::ToString::to_string)
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}

mod cpu;
// CPU time per task (`--task-cpu-accounting`): the switch, the meters, the totals.
pub(crate) use cpu::{
    cpu_accounting_enabled, cpu_snapshot, enable_cpu_accounting, intern_task_name, metered,
    metered_sync,
};
#[cfg(test)]
mod tests;
