//! CPU time per task, for the cost account (`--task-cpu-accounting`, off by default).
//!
//! A process's CPU time says how much the agent costs, not which of its tasks spent
//! it: every task runs on the same two runtime threads. When accounting is on, each
//! named task's future (and each metric advisor collector's round, and each named
//! blocking job) is wrapped so that every poll adds the thread's CPU time over that
//! poll (`CLOCK_THREAD_CPUTIME_ID`) to the name's counter. The answer is on
//! `/debug/tasks`. A poll costs two clock reads (about 0.5 µs each on the bench VM),
//! which is why it is opt-in; off, nothing is wrapped.

use crate::locks::Locked as _;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

static ENABLED: AtomicBool = AtomicBool::new(false);
static COUNTERS: OnceLock<Mutex<BTreeMap<&'static str, Arc<Counter>>>> = OnceLock::new();

/// One name's totals.
#[derive(Debug, Default)]
struct Counter {
    nanos: AtomicU64,
    polls: AtomicU64,
}

impl Counter {
    fn add(&self, nanos: u64) {
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.polls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Turns accounting on for tasks spawned from now on (called once at start).
pub(crate) fn enable_cpu_accounting() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// True when accounting is on.
pub(crate) fn cpu_accounting_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn counter(name: &'static str) -> Arc<Counter> {
    let map = COUNTERS.get_or_init(Mutex::default);
    let mut map = map.locked();
    map.entry(name).or_default().clone()
}

/// This thread's CPU time in ns.
fn thread_cpu_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// A future whose polls are charged to a name.
pub(crate) struct Metered<F> {
    inner: Pin<Box<F>>,
    counter: Option<Arc<Counter>>,
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(counter) = self.counter.clone() else {
            return self.inner.as_mut().poll(cx);
        };
        let start = thread_cpu_nanos();
        let out = self.inner.as_mut().poll(cx);
        counter.add(thread_cpu_nanos().saturating_sub(start));
        out
    }
}

/// `fut`, charged to `name` when accounting is on (else passed through).
pub(crate) fn metered<F: Future>(name: &'static str, fut: F) -> Metered<F> {
    Metered {
        inner: Box::pin(fut),
        counter: cpu_accounting_enabled().then(|| counter(name)),
    }
}

/// Runs a synchronous job (a blocking-pool job, or one step of a task), charged to
/// `name` when on.
pub(crate) fn metered_sync<T>(name: &'static str, job: impl FnOnce() -> T) -> T {
    if !cpu_accounting_enabled() {
        return job();
    }
    let start = thread_cpu_nanos();
    let out = job();
    counter(name).add(thread_cpu_nanos().saturating_sub(start));
    out
}

/// A `'static` name for `name`, made once per distinct name (a collector's
/// `advisor/<name>`): the names are few and fixed, so the leak is bounded.
pub(crate) fn intern_task_name(name: String) -> &'static str {
    static NAMES: OnceLock<Mutex<std::collections::BTreeSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Mutex::default).locked();
    if let Some(n) = names.get(name.as_str()) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// One name's totals, as `/debug/tasks` shows them.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskCpu {
    pub name: &'static str,
    pub cpu_seconds: f64,
    pub polls: u64,
}

/// Every name's totals since start, by name.
pub(crate) fn cpu_snapshot() -> Vec<TaskCpu> {
    let Some(map) = COUNTERS.get() else {
        return Vec::new();
    };
    let map = map.locked();
    map.iter()
        .map(|(name, c)| TaskCpu {
            name,
            cpu_seconds: c.nanos.load(Ordering::Relaxed) as f64 / 1e9,
            polls: c.polls.load(Ordering::Relaxed),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns about `ms` of this thread's CPU.
    fn burn(ms: u64) {
        let start = thread_cpu_nanos();
        let mut x = 0u64;
        while thread_cpu_nanos() - start < ms * 1_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[tokio::test]
    async fn polls_are_charged_to_their_name_only_when_enabled() {
        // Off: passed through, nothing counted.
        metered("test_cpu_off", async { burn(5) }).await;
        assert!(cpu_snapshot().iter().all(|t| t.name != "test_cpu_off"));

        enable_cpu_accounting();
        metered("test_cpu_on", async {
            burn(20);
            tokio::task::yield_now().await;
            burn(20);
        })
        .await;
        metered_sync("test_cpu_blocking", || burn(10));
        let all = cpu_snapshot();
        let on = all.iter().find(|t| t.name == "test_cpu_on").unwrap();
        assert_eq!(on.polls, 2, "two polls: before and after the yield");
        assert!(on.cpu_seconds >= 0.039, "{on:?}");
        let blocking = all.iter().find(|t| t.name == "test_cpu_blocking").unwrap();
        assert!(blocking.cpu_seconds >= 0.0095, "{blocking:?}");
    }
}
