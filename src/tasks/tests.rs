use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

#[derive(Debug, thiserror::Error)]
#[error("boom")]
struct Boom;

/// A task that runs until cancelled, then takes `linger` to stop and counts itself.
async fn until_cancelled(
    token: CancellationToken,
    linger: Duration,
    stopped: Arc<AtomicUsize>,
) -> TaskResult {
    token.cancelled().await;
    tokio::time::sleep(linger).await;
    stopped.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_critical_task_that_fails_stops_the_tree_with_its_name() {
    let tasks = Tasks::new();
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    tasks.spawn_critical("bystander", move |t| until_cancelled(t, Duration::ZERO, s));
    tasks.spawn_critical("source", |_| async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Err(Box::new(Boom) as _)
    });
    let failure = tokio::time::timeout(Duration::from_secs(5), tasks.failed())
        .await
        .expect("the failure stops the tree");
    assert_eq!(failure.name, "source");
    assert!(matches!(failure.end, TaskEnd::Failed(_)));
    assert_eq!(failure.to_string(), "task source failed: boom");
    assert!(tasks.token().is_cancelled());
    assert!(tasks.shutdown(Duration::from_secs(1)).await);
    assert_eq!(stopped.load(Ordering::SeqCst), 1);
    // The bystander's end at shutdown is not a failure of its own.
    assert_eq!(tasks.failure().unwrap().name, "source");
}

#[tokio::test(start_paused = true)]
async fn a_critical_task_that_returns_or_panics_early_is_a_failure() {
    let tasks = Tasks::new();
    tasks.spawn_critical("merger", |_| async { Ok(()) });
    let f = tasks.failed().await;
    assert_eq!(
        (f.name, f.to_string().as_str()),
        ("merger", "task merger ended before shutdown")
    );

    let tasks = Tasks::new();
    tasks.spawn_critical("sync-loop", |_| async {
        if tasks_never() {
            return Ok(());
        }
        panic!("index out of range")
    });
    let f = tasks.failed().await;
    assert_eq!(f.name, "sync-loop");
    assert!(
        matches!(&f.end, TaskEnd::Panicked(m) if m == "index out of range"),
        "{f}"
    );
}

/// Keeps the panicking test task's return type a `TaskResult`.
fn tasks_never() -> bool {
    false
}

#[tokio::test(start_paused = true)]
async fn a_restarting_task_that_panics_is_restarted_with_back_off() {
    let tasks = Tasks::new();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = starts.clone();
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(4),
    };
    let t0 = Instant::now();
    tasks.spawn_restarting("pleg", backoff, move |token| {
        let s = s.clone();
        async move {
            let n = {
                let mut s = s.lock().unwrap();
                s.push(t0.elapsed().as_secs());
                s.len()
            };
            if n <= 4 {
                panic!("relist {n} panicked");
            }
            token.cancelled().await;
            Ok(())
        }
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    // Back-off 1, 2, 4, then capped at 4.
    assert_eq!(*starts.lock().unwrap(), [0, 1, 3, 7, 11]);
    assert!(tasks.failure().is_none());
    assert!(!tasks.token().is_cancelled());
    assert!(tasks.shutdown(Duration::from_secs(1)).await);
    assert_eq!(starts.lock().unwrap().len(), 5, "not restarted at shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_restarting_task_that_ran_long_starts_over_at_the_first_back_off() {
    let tasks = Tasks::new();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = starts.clone();
    let t0 = Instant::now();
    let backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(4),
    };
    tasks.spawn_restarting("file-source", backoff, move |_| {
        let s = s.clone();
        async move {
            let n = {
                let mut s = s.lock().unwrap();
                s.push(t0.elapsed().as_secs());
                s.len()
            };
            // Fails fast twice, then after a long run, then fast again.
            if n == 3 {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(Box::new(Boom) as _)
        }
    });
    tokio::time::sleep(Duration::from_secs(14) + Duration::from_millis(500)).await;
    // 0 → +1 → +2 (runs 10 s, ends at 13) → +1 (reset) = 14.
    assert_eq!(*starts.lock().unwrap(), [0, 1, 3, 14]);
    assert!(tasks.failure().is_none());
    tasks.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_every_task_in_every_scope() {
    let root = Tasks::new();
    let agent = root.child();
    let pods = agent.child();
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    root.spawn_critical("runtime-supervisor", move |t| {
        until_cancelled(t, Duration::from_millis(300), s)
    });
    let s = stopped.clone();
    agent.spawn_restarting("pleg", Backoff::default(), move |t| {
        until_cancelled(t, Duration::from_millis(200), s.clone())
    });
    let (s, t) = (stopped.clone(), pods.token());
    pods.track("test", async move {
        until_cancelled(t, Duration::from_millis(100), s).await
    });
    let s = stopped.clone();
    let t = agent.token();
    agent.spawn_pass("housekeeping", async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        until_cancelled(t, Duration::ZERO, s).await
    });
    // A scope counts its own tasks and those of the scopes inside it.
    assert_eq!((root.len(), agent.len(), pods.len()), (4, 3, 1));
    assert!(root.shutdown(Duration::from_secs(5)).await);
    // The pass was dropped; the three others stopped and were waited for.
    assert_eq!(stopped.load(Ordering::SeqCst), 3);
    assert!(root.is_empty() && agent.is_empty() && pods.is_empty());
    assert!(root.failure().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_scope_stops_first_and_its_parent_runs_on() {
    let root = Tasks::new();
    let agent = root.child();
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    root.spawn_critical("runtime-supervisor", move |t| {
        until_cancelled(t, Duration::ZERO, s)
    });
    for name in ["sync-loop", "merger"] {
        let s = stopped.clone();
        agent.spawn_critical(name, move |t| {
            until_cancelled(t, Duration::from_millis(50), s)
        });
    }
    assert!(agent.shutdown(Duration::from_secs(1)).await);
    assert_eq!(stopped.load(Ordering::SeqCst), 2);
    assert!(!root.token().is_cancelled());
    assert!(root.failure().is_none(), "a scope's shutdown is no failure");
    assert!(root.shutdown(Duration::from_secs(1)).await);
    assert_eq!(stopped.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failure_anywhere_cancels_every_scope() {
    let root = Tasks::new();
    let agent = root.child();
    let pods = agent.child();
    agent.spawn_critical("server", |_| async { Err(Box::new(Boom) as _) });
    let f = root.failed().await;
    assert_eq!(f.name, "server");
    for scope in [&root, &agent, &pods] {
        assert!(scope.token().is_cancelled());
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_reports_a_task_that_does_not_stop() {
    let tasks = Tasks::new();
    tasks.track("test", async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    });
    assert!(!tasks.shutdown(Duration::from_secs(3)).await);
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_panics_or_fails_is_contained_and_the_next_one_runs() {
    let tasks = Tasks::new();
    let h = tasks.spawn_pass("housekeeping", async { panic!("bad pod") });
    assert!(h.await.is_ok(), "the panic stays inside the pass");
    let h = tasks.spawn_pass("housekeeping", async { Err(Box::new(Boom) as _) });
    assert!(h.await.is_ok());
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let h = tasks.spawn_pass("housekeeping", async move {
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    h.await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(tasks.failure().is_none() && !tasks.token().is_cancelled());
}
