//! Pod worker semantics against a fake syncer.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;

#[derive(Default)]
struct Fake {
    log: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    sync_delay: Duration,
    terminate_delay: Duration,
    terminal_after: Option<usize>,
    syncs: AtomicUsize,
    /// `sync_pod` panics for this UID, every time.
    panic_sync: Option<&'static str>,
    /// `sync_pod` fails for this UID, every time.
    fail_sync: Option<&'static str>,
    /// The error `fail_sync` returns (a CRI error when None).
    fail_with: Option<fn() -> PodSyncError>,
    /// `sync_terminating_pod` panics this many times before it works.
    panic_terminating: AtomicUsize,
    /// When each `sync_pod` call started.
    sync_times: Mutex<Vec<Instant>>,
    /// Each `sync_pod` says it changed nothing in the runtime.
    unchanged: bool,
    /// The last sync each `sync_pod` call was given.
    last_syncs: Mutex<Vec<Option<Instant>>>,
}

impl Fake {
    fn record(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    /// Seconds between consecutive `sync_pod` calls.
    fn sync_gaps(&self) -> Vec<f64> {
        let t = self.sync_times.lock().unwrap();
        t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect()
    }
}

impl PodSyncer for Fake {
    async fn sync_pod(
        &self,
        _u: UpdateType,
        pod: Arc<Pod>,
        last: Option<Instant>,
    ) -> Result<SyncResult, PodSyncError> {
        self.sync_times.lock().unwrap().push(Instant::now());
        self.last_syncs.lock().unwrap().push(last);
        if self.panic_sync == Some(pod_uid(&pod)) {
            self.record(format!("sync-panic {}", pod_uid(&pod)));
            panic!("fake syncer panics for {}", pod_uid(&pod));
        }
        if self.fail_sync == Some(pod_uid(&pod)) {
            self.record(format!("sync-error {}", pod_uid(&pod)));
            return Err(self.fail_with.map_or_else(cri_failure, |f| f()));
        }
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(self.sync_delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let count = self.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        let img = pod
            .spec
            .as_ref()
            .unwrap()
            .containers
            .first()
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        self.record(format!("sync {} {img}", pod_uid(&pod)));
        Ok(SyncResult {
            terminal: self.terminal_after.is_some_and(|t| count >= t),
            retry_after: None,
            unchanged: self.unchanged,
        })
    }
    async fn sync_terminating_pod(
        &self,
        pod: Arc<Pod>,
        grace: i64,
        status: Option<KillStatus>,
    ) -> Result<(), PodSyncError> {
        let set = status.map(|s| format!(" {} {}", s.phase, s.reason));
        self.record(format!(
            "terminating {} {grace}{}",
            pod_uid(&pod),
            set.unwrap_or_default()
        ));
        let panics = &self.panic_terminating;
        if panics
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("fake syncer panics terminating {}", pod_uid(&pod));
        }
        tokio::time::sleep(self.terminate_delay).await;
        self.record(format!("killed {} {grace}", pod_uid(&pod)));
        Ok(())
    }
    async fn sync_terminating_runtime_pod(&self, pod: RuntimePod) -> Result<(), PodSyncError> {
        self.record(format!("terminating-runtime {}", pod.uid));
        Ok(())
    }
    async fn sync_terminated_pod(
        &self,
        pod: Option<Arc<Pod>>,
        rp: Option<RuntimePod>,
    ) -> Result<(), PodSyncError> {
        let uid = pod
            .as_deref()
            .map(|p| pod_uid(p).to_string())
            .or(rp.map(|r| r.uid))
            .unwrap_or_default();
        self.record(format!("terminated {uid}"));
        Ok(())
    }
    async fn clear_previous_life(&self, pod: Arc<Pod>) -> Result<(), PodSyncError> {
        self.record(format!("clear {}", pod_uid(&pod)));
        Ok(())
    }
}

fn pod(uid: &str, name: &str, image: &str, grace: Option<i64>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            annotations: Some(
                [(
                    "kubernetes.io/config.source".to_string(),
                    "file".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            termination_grace_period_seconds: grace,
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn cri_failure() -> PodSyncError {
    PodSyncError::Cri(CriError::Status {
        call: "RunPodSandbox",
        code: tonic::Code::Unavailable,
        message: "fake failure".into(),
    })
}

fn work(p: &Arc<Pod>, t: UpdateType) -> PodWork {
    PodWork::Sync {
        update: t,
        pod: p.clone(),
    }
}

fn kill(p: &Arc<Pod>, grace: Option<i64>) -> PodWork {
    PodWork::Kill {
        pod: p.clone(),
        kill: KillRequest {
            grace_override: grace,
            ..KillRequest::new(KillReason::RemovedFromConfig)
        },
    }
}

fn workers(fake: Fake) -> (PodWorkers<Fake>, Arc<Fake>) {
    let fake = Arc::new(fake);
    let w = PodWorkers::new(
        fake.clone(),
        Arc::default(),
        Duration::from_secs(60),
        Tasks::new(),
    );
    (w, fake)
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn grace_selection_follows_kubelet() {
    let p = pod("u", "p", "i", Some(20));
    assert_eq!(effective_grace(Some(&p), None), 20);
    assert_eq!(effective_grace(Some(&pod("u", "p", "i", None)), None), 30);
    let k = KillRequest {
        grace_override: Some(0),
        ..KillRequest::new(KillReason::RemovedFromConfig)
    };
    assert_eq!(effective_grace(Some(&p), Some(&k)), 1, "minimum is 1s");
    let k = KillRequest {
        grace_override: Some(5),
        ..KillRequest::new(KillReason::RemovedFromConfig)
    };
    assert_eq!(effective_grace(Some(&p), Some(&k)), 5);
    let mut deleting = (*p).clone();
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    deleting.metadata.deletion_grace_period_seconds = Some(3);
    assert_eq!(effective_grace(Some(&deleting), None), 3);
    assert_eq!(merge_grace(None, 30), 30);
    assert_eq!(merge_grace(Some(10), 30), 10, "never lengthens");
    assert_eq!(merge_grace(Some(30), 10), 10);
}

#[tokio::test(start_paused = true)]
async fn latest_update_wins_and_syncs_never_overlap() {
    let (w, fake) = workers(Fake {
        sync_delay: Duration::from_millis(100),
        ..Default::default()
    });
    w.update_pod(work(&pod("u1", "p", "v1", None), UpdateType::Create));
    settle().await;
    for v in ["v2", "v3", "v4"] {
        w.update_pod(work(&pod("u1", "p", v, None), UpdateType::Update));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fake.log(), vec!["sync u1 v1", "sync u1 v4"]);
    assert_eq!(fake.max_in_flight.load(Ordering::SeqCst), 1);
}

/// A sync that acted raises the bar the next one's runtime view must pass; one that
/// changed nothing leaves it where it was.
#[tokio::test(start_paused = true)]
async fn only_a_sync_that_acted_moves_the_last_sync() {
    for unchanged in [false, true] {
        let (w, fake) = workers(Fake {
            unchanged,
            ..Default::default()
        });
        for v in ["v1", "v2", "v3"] {
            let kind = if v == "v1" {
                UpdateType::Create
            } else {
                UpdateType::Update
            };
            w.update_pod(work(&pod("u1", "p", v, None), kind));
            settle().await;
        }
        let seen = fake.last_syncs.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        if unchanged {
            assert!(seen.iter().all(Option::is_none), "{seen:?}");
        } else {
            let times = fake.sync_times.lock().unwrap().clone();
            assert_eq!(seen, vec![None, Some(times[0]), Some(times[1])]);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn kill_runs_terminating_then_terminated_once() {
    let (w, fake) = workers(Fake::default());
    let p = pod("u1", "p", "v1", Some(7));
    w.update_pod(work(&p, UpdateType::Create));
    settle().await;
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 7",
            "killed u1 7",
            "terminated u1"
        ]
    );
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Finished));
    // A finished pod is never synced again.
    w.update_pod(work(&p, UpdateType::Sync));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(fake.log().len(), 4);
    // Housekeeping forgets it once it is no longer desired.
    assert!(w.sync_known_pods(&|_| false).is_empty());
    assert!(w.known().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shorter_grace_restarts_termination_longer_is_ignored() {
    let (w, fake) = workers(Fake {
        terminate_delay: Duration::from_secs(5),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(30));
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.update_pod(kill(&p, Some(60)));
    w.update_pod(kill(&p, Some(2)));
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        fake.log(),
        vec![
            "terminating u1 30",
            "terminating u1 2",
            "killed u1 2",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn terminal_pod_moves_to_terminating_by_itself() {
    let (w, fake) = workers(Fake {
        terminal_after: Some(1),
        ..Default::default()
    });
    w.update_pod(work(&pod("u1", "p", "v1", Some(4)), UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 4",
            "killed u1 4",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn static_pods_with_one_name_run_one_at_a_time() {
    let (w, fake) = workers(Fake {
        terminate_delay: Duration::from_secs(3),
        ..Default::default()
    });
    let old = pod("old", "web-n1", "v1", Some(3));
    let new = pod("new", "web-n1", "v2", Some(3));
    w.update_pod(work(&old, UpdateType::Create));
    settle().await;
    // Manifest edited: REMOVE old, ADD new.
    w.update_pod(kill(&old, None));
    w.update_pod(work(&new, UpdateType::Create));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !fake.log().iter().any(|l| l.contains("new")),
        "new waits: {:?}",
        fake.log()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync old v1",
            "terminating old 3",
            "killed old 3",
            "terminated old",
            "sync new v2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn runtime_only_pod_is_killed_and_cleaned() {
    let (w, fake) = workers(Fake::default());
    w.update_pod(PodWork::KillRuntimePod {
        pod: RuntimePod {
            uid: "r1".into(),
            ..Default::default()
        },
        kill: KillRequest {
            grace_override: Some(1),
            ..KillRequest::new(KillReason::RuntimeOnly)
        },
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(fake.log(), vec!["terminating-runtime r1", "terminated r1"]);
}

#[tokio::test(start_paused = true)]
async fn recreated_pod_restarts_after_housekeeping() {
    let (w, _fake) = workers(Fake::default());
    let p = pod("u1", "p", "v1", Some(1));
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    w.update_pod(work(&p, UpdateType::Create));
    assert_eq!(w.sync_known_pods(&|_| true), vec!["u1".to_string()]);
    assert!(w.known().is_empty());
}

#[test]
fn failure_back_off_is_flat_for_syncs_and_doubles_for_kills() {
    let secs = |l, n| failure_back_off(l, n).as_secs();
    // kubelet's completeWork: every failed sync is requeued after backOffPeriod.
    let sync: Vec<u64> = (1..=7).map(|n| secs(Lifecycle::Syncing, n)).collect();
    assert_eq!(sync, vec![10; 7]);
    let kill: Vec<u64> = (1..=6).map(|n| secs(Lifecycle::Terminating, n)).collect();
    assert_eq!(kill, vec![1, 2, 4, 8, 10, 10]);
    assert_eq!(secs(Lifecycle::Terminating, u32::MAX), 10, "no overflow");
}

#[tokio::test(start_paused = true)]
async fn pod_re_added_while_terminating_runs_again_once_terminated() {
    let (w, fake) = workers(Fake {
        terminate_delay: Duration::from_secs(5),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(5));
    w.update_pod(work(&p, UpdateType::Create));
    settle().await;
    // Removed, then restored with the same UID within the grace period.
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        w.sync_known_pods(&|_| true).is_empty(),
        "still terminating: not restarted yet"
    );
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Terminating));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Finished));
    // Housekeeping purges the finished worker and asks for the restart.
    assert_eq!(w.sync_known_pods(&|_| true), vec!["u1".to_string()]);
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 5",
            "killed u1 5",
            "terminated u1",
            "clear u1",
            "sync u1 v1"
        ]
    );
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Syncing));
}

#[tokio::test(start_paused = true)]
async fn finished_pod_removed_is_cleaned_and_a_re_add_is_a_new_life() {
    let (w, fake) = workers(Fake {
        terminal_after: Some(1),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(2));
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Finished));
    // Removed from its source: the worker cleans up what the terminal pod kept.
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 2",
            "killed u1 2",
            "terminated u1",
            "terminated u1"
        ]
    );
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Finished));
    // Restored before housekeeping ran: restarted as a new life.
    w.update_pod(work(&p, UpdateType::Create));
    assert_eq!(w.sync_known_pods(&|_| true), vec!["u1".to_string()]);
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // (The fake's pod completes again at once, as a Never pod would.)
    assert_eq!(fake.log()[5..7], ["clear u1", "sync u1 v1"]);
}

#[tokio::test(start_paused = true)]
async fn forgotten_pod_added_again_is_a_plain_new_pod() {
    let (w, fake) = workers(Fake::default());
    let p = pod("u1", "p", "v1", Some(1));
    w.update_pod(work(&p, UpdateType::Create));
    settle().await;
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Housekeeping while it is not desired forgets it; nothing asks for a restart.
    assert!(w.sync_known_pods(&|_| false).is_empty());
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 1",
            "killed u1 1",
            "terminated u1",
            "sync u1 v1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn syncer_that_errors_is_retried_every_ten_seconds_jittered() {
    let (w, fake) = workers(Fake {
        fail_sync: Some("u1"),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(3));
    w.update_pod(work(&p, UpdateType::Create));
    // Syncs asked for every second (as PLEG events would) do not cut the back-off short.
    for _ in 0..160 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.update_pod(work(&p, UpdateType::Sync));
    }
    let gaps = fake.sync_gaps();
    assert!(gaps.len() >= 3, "{gaps:?}");
    // kubelet's backOffPeriod jittered by 0.5: [10, 15) s each time, never growing.
    assert!(gaps.len() >= 10, "{gaps:?}");
    for gap in &gaps {
        assert!(*gap >= 10.0 && *gap < 16.0, "gap {gap}: {gaps:?}");
    }
    // A kill is not held back by the sync back-off.
    w.update_pod(kill(&p, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(fake.log().last().map(String::as_str), Some("terminated u1"));
    assert_eq!(w.lifecycle("u1"), Some(Lifecycle::Finished));
}

#[tokio::test(start_paused = true)]
async fn panicking_syncer_is_retried_and_its_full_name_is_released() {
    let (w, fake) = workers(Fake {
        panic_sync: Some("old"),
        ..Default::default()
    });
    let old = pod("old", "web-n1", "v1", Some(3));
    let new = pod("new", "web-n1", "v2", Some(3));
    w.update_pod(work(&old, UpdateType::Create));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fake.log(), vec!["sync-panic old"]);
    assert_eq!(
        w.lifecycle("old"),
        Some(Lifecycle::Syncing),
        "still supervised"
    );
    // The supervisor retries the panicked step after kubelet's back-off: 10 s
    // jittered up to ×1.5 each time, so the second retry lands by 15 + 15 = 30 s.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let gaps = fake.sync_gaps();
    assert!(gaps.len() >= 2, "retried: {:?}", fake.log());
    assert!(
        gaps.iter().all(|g| *g >= 10.0 && *g < 16.0),
        "flat: {gaps:?}"
    );
    // Manifest edited: REMOVE old, ADD new with the same full name.
    w.update_pod(kill(&old, None));
    w.update_pod(work(&new, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let log = fake.log();
    let tail: Vec<&str> = log
        .iter()
        .map(String::as_str)
        .skip_while(|l| *l == "sync-panic old")
        .collect();
    assert_eq!(
        tail,
        vec![
            "terminating old 3",
            "killed old 3",
            "terminated old",
            "sync new v2"
        ]
    );
    assert_eq!(w.lifecycle("new"), Some(Lifecycle::Syncing));
}

#[tokio::test(start_paused = true)]
async fn panic_while_terminating_is_retried_then_the_next_pod_starts() {
    let (w, fake) = workers(Fake {
        panic_terminating: AtomicUsize::new(2),
        ..Default::default()
    });
    let old = pod("old", "web-n1", "v1", Some(3));
    let new = pod("new", "web-n1", "v2", Some(3));
    w.update_pod(work(&old, UpdateType::Create));
    settle().await;
    w.update_pod(kill(&old, None));
    w.update_pod(work(&new, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.log(), vec!["sync old v1", "terminating old 3"]);
    // Retried after 1 s, then 2 s more; the third attempt works.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync old v1",
            "terminating old 3",
            "terminating old 3",
            "terminating old 3",
            "killed old 3",
            "terminated old",
            "sync new v2"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_static_pod_that_is_removed_never_waits_for_its_turn() {
    let (w, fake) = workers(Fake::default());
    let first = pod("first", "web-n1", "v1", Some(3));
    let second = pod("second", "web-n1", "v2", Some(3));
    w.update_pod(work(&first, UpdateType::Create));
    w.update_pod(work(&second, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(fake.log(), vec!["sync first v1"], "second waits its turn");
    // The waiting pod is removed: it terminates now, though the first still runs.
    w.update_pod(kill(&second, None));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync first v1",
            "terminating second 3",
            "killed second 3",
            "terminated second"
        ]
    );
    assert_eq!(w.lifecycle("second"), Some(Lifecycle::Finished));
    assert_eq!(w.lifecycle("first"), Some(Lifecycle::Syncing));
    // And the first keeps its slot: a third pod with the name still waits.
    let third = pod("third", "web-n1", "v3", Some(3));
    w.update_pod(work(&third, UpdateType::Create));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!fake.log().iter().any(|l| l.contains("third")));
}

fn evicted() -> KillStatus {
    KillStatus {
        phase: crate::pod::Phase::Failed,
        reason: "Evicted".into(),
        message: "The node was low on resource: memory.".into(),
        condition: None,
        keep_succeeded: false,
    }
}

#[tokio::test(start_paused = true)]
async fn kill_status_reaches_termination_and_a_later_kill_keeps_it() {
    let (w, fake) = workers(Fake {
        terminate_delay: Duration::from_secs(5),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(30));
    w.update_pod(work(&p, UpdateType::Create));
    settle().await;
    w.update_pod(PodWork::Kill {
        pod: p.clone(),
        kill: KillRequest {
            grace_override: Some(10),
            status: Some(evicted()),
            ..KillRequest::new(KillReason::RemovedFromConfig)
        },
    });
    settle().await;
    // A later kill with a shorter grace and no status of its own restarts
    // termination; the eviction's status still goes with it.
    w.update_pod(kill(&p, Some(3)));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        fake.log(),
        vec![
            "sync u1 v1",
            "terminating u1 10 Failed Evicted",
            "terminating u1 3 Failed Evicted",
            "killed u1 3",
            "terminated u1"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_sync_error_that_cannot_pass_waits_the_longest_back_off() {
    let (w, fake) = workers(Fake {
        fail_sync: Some("u1"),
        fail_with: Some(|| {
            PodSyncError::Runtime(SyncError::Path(crate::safe_path::PathError::NotAComponent(
                "..".into(),
            )))
        }),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(3));
    w.update_pod(work(&p, UpdateType::Create));
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        w.update_pod(work(&p, UpdateType::Sync));
    }
    let gaps = fake.sync_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(gaps[0] >= 300.0 && gaps[0] < 451.0, "{gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn a_sync_error_with_a_back_off_ending_sooner_is_retried_then() {
    let (w, fake) = workers(Fake {
        fail_sync: Some("u1"),
        fail_with: Some(|| {
            PodSyncError::Runtime(SyncError::Containers {
                errors: vec![crate::kuberuntime::ContainerStartError {
                    container: "app".into(),
                    reason: WaitingReason::RunContainerError,
                    message: "exec failed".into(),
                }],
                retry_after: Some(Duration::from_secs(2)),
            })
        }),
        ..Default::default()
    });
    let p = pod("u1", "p", "v1", Some(3));
    w.update_pod(work(&p, UpdateType::Create));
    tokio::time::sleep(Duration::from_secs(7)).await;
    let gaps = fake.sync_gaps();
    assert_eq!(
        gaps,
        [2.0, 2.0, 2.0],
        "retried as the back-off ends, not after 10 s"
    );
}

#[test]
fn sync_errors_say_their_kind() {
    let path = PodSyncError::Runtime(SyncError::Path(crate::safe_path::PathError::NotAComponent(
        "..".into(),
    )));
    assert!(!path.retryable());
    assert_eq!(path.back_off(), None);
    let cri = cri_failure();
    assert!(cri.retryable());
    assert_eq!(cri.waiting_reason(), None);
    let start = PodSyncError::Runtime(SyncError::Containers {
        errors: vec![crate::kuberuntime::ContainerStartError {
            container: "app".into(),
            reason: WaitingReason::CreateContainerConfigError,
            message: "bad subPath".into(),
        }],
        retry_after: Some(Duration::from_secs(20)),
    });
    assert!(start.retryable());
    assert_eq!(start.back_off(), Some(Duration::from_secs(20)));
    assert_eq!(
        start.waiting_reason(),
        Some(WaitingReason::CreateContainerConfigError)
    );
    assert_eq!(
        start.to_string(),
        "app: CreateContainerConfigError: bad subPath"
    );
}
