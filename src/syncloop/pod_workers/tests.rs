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
}

impl Fake {
    fn record(&self, s: String) {
        self.log.lock().unwrap().push(s);
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl PodSyncer for Fake {
    async fn sync_pod(
        &self,
        _u: UpdateType,
        pod: Arc<Pod>,
        _l: Option<Instant>,
    ) -> Result<SyncResult, String> {
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
        })
    }
    async fn sync_terminating_pod(&self, pod: Arc<Pod>, grace: i64) -> Result<(), String> {
        self.record(format!("terminating {} {grace}", pod_uid(&pod)));
        tokio::time::sleep(self.terminate_delay).await;
        self.record(format!("killed {} {grace}", pod_uid(&pod)));
        Ok(())
    }
    async fn sync_terminating_runtime_pod(&self, pod: RuntimePod) -> Result<(), String> {
        self.record(format!("terminating-runtime {}", pod.uid));
        Ok(())
    }
    async fn sync_terminated_pod(
        &self,
        pod: Option<Arc<Pod>>,
        rp: Option<RuntimePod>,
    ) -> Result<(), String> {
        let uid = pod
            .as_deref()
            .map(|p| pod_uid(p).to_string())
            .or(rp.map(|r| r.uid))
            .unwrap_or_default();
        self.record(format!("terminated {uid}"));
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

fn work(p: &Arc<Pod>, t: UpdateType) -> PodWork {
    PodWork {
        update_type: t,
        pod: Some(p.clone()),
        runtime_pod: None,
        kill: None,
    }
}

fn kill(p: &Arc<Pod>, grace: Option<i64>) -> PodWork {
    PodWork {
        update_type: UpdateType::Kill,
        pod: Some(p.clone()),
        runtime_pod: None,
        kill: Some(KillRequest {
            grace_override: grace,
            reason: "test".into(),
        }),
    }
}

fn workers(fake: Fake) -> (PodWorkers<Fake>, Arc<Fake>) {
    let fake = Arc::new(fake);
    let w = PodWorkers::new(
        fake.clone(),
        Arc::default(),
        Duration::from_secs(60),
        CancellationToken::new(),
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
        reason: String::new(),
    };
    assert_eq!(effective_grace(Some(&p), Some(&k)), 1, "minimum is 1s");
    let k = KillRequest {
        grace_override: Some(5),
        reason: String::new(),
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
    w.update_pod(PodWork {
        update_type: UpdateType::Kill,
        pod: None,
        runtime_pod: Some(RuntimePod {
            uid: "r1".into(),
            ..Default::default()
        }),
        kill: Some(KillRequest {
            grace_override: Some(1),
            reason: "runtime-only".into(),
        }),
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
