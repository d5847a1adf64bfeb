//! The sync loop's handlers, the pod workers and the real [`Syncer`] end to end over
//! the in-memory runtime, with the PLEG relisting it, on tokio's paused clock.

use std::time::Duration;

use super::*;
use crate::config::PodOperation;
use crate::cri::support::{FakeNode, pod};
use crate::pleg::{EVENT_CHANNEL_CAPACITY, GenericPleg, PodCache};

struct Agent {
    node: FakeNode,
    statuses: Arc<StatusManager>,
    workers: PodWorkers<Syncer>,
    updates: mpsc::Sender<PodUpdate>,
    tasks: Tasks,
    probes: Arc<crate::prober::ProbeManager>,
}

/// Wires the agent as `agent::start` does, without sources: updates come from the test.
async fn agent(max_pods: u32) -> Agent {
    agent_with(max_pods, |_| {}).await
}

/// [`agent`], with `setup` given the sync loop before it runs (to extend its seams).
async fn agent_with(max_pods: u32, setup: impl FnOnce(&mut SyncLoop)) -> Agent {
    agent_on(FakeNode::new(), max_pods, setup).await
}

/// [`agent_with`] over a given node (e.g. one whose runtime records events).
async fn agent_on(node: FakeNode, max_pods: u32, setup: impl FnOnce(&mut SyncLoop)) -> Agent {
    let runtime = node.manager.clone();
    let cache = Arc::new(PodCache::default());
    let statuses = Arc::new(StatusManager::default());
    let pods = Arc::new(PodManager::default());
    let queue = Arc::new(WorkQueue::default());
    let pleg_stats = Arc::new(PlegStats::default());
    let health = Arc::new(RuntimeHealth::default());
    health.set(true);
    let tasks = Tasks::new();
    let (pleg_tx, pleg_rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    let mut pleg = GenericPleg::new(runtime.reader(), cache.clone(), pleg_tx, pleg_stats.clone());
    pleg.relist().await;
    tasks.track("pleg", pleg.run(tasks.token()));
    let (probe_results, probe_rx) = crate::prober::ProbeResults::new(16);
    let probes = Arc::new(crate::prober::ProbeManager::new(
        crate::prober::WorkerDeps {
            results: Arc::new(probe_results),
            statuses: statuses.clone(),
            cri: node.fake.clone(),
            events: crate::events::EventRecorder::log_only(),
        },
        tasks.child(),
    ));
    let syncer = Arc::new(Syncer {
        runtime: runtime.clone(),
        cache,
        statuses: statuses.clone(),
        pods: pods.clone(),
        runtime_name: "fake".into(),
        startup: Default::default(),
        probes: probes.clone(),
        cm: Arc::new(crate::cm::fake_manager(true).0),
        allocation: test_allocation(),
        grants: None,
    });
    let mut sync_loop = SyncLoop::new(SyncLoopDeps {
        pods,
        syncer,
        statuses: statuses.clone(),
        runtime,
        queue,
        pleg: pleg_stats,
        health,
        resync: Duration::from_secs(10),
        admission: crate::contracts::AdmissionChain::standard(max_pods),
        sources: vec!["file"],
        tasks: tasks.clone(),
        mirror_hook: None,
        sources_ready: tokio::sync::watch::channel(false).0,
    });
    setup(&mut sync_loop);
    let workers = sync_loop.workers.clone();
    let (updates, update_rx) = mpsc::channel(16);
    tasks.track(
        "sync_loop",
        sync_loop.run(
            LoopInputs::new(update_rx, pleg_rx).with_probes(probe_rx),
            tasks.token(),
        ),
    );
    Agent {
        node,
        statuses,
        workers,
        updates,
        tasks,
        probes,
    }
}

impl Agent {
    async fn send(&self, op: PodOperation, pods: Vec<Pod>) {
        self.updates
            .send(PodUpdate {
                op,
                source: "file",
                pods,
            })
            .await
            .unwrap();
    }

    fn phase(&self, uid: &str) -> Option<String> {
        self.statuses.get(uid).and_then(|s| s.phase)
    }

    /// Lets the agent run (in 100 ms steps of paused time) until `done`, at most `limit`.
    async fn until(&self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let start = tokio::time::Instant::now();
        while !done(self) {
            assert!(start.elapsed() < limit, "{what} within {limit:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the agent; every task, pod workers included, must end within 10 s.
    async fn stop(self) {
        assert!(self.tasks.shutdown(Duration::from_secs(10)).await);
    }
}

fn running(a: &Agent, pod: &str, container: &str) -> bool {
    a.node.fake.container_id(pod, container).is_some_and(|id| {
        a.node
            .fake
            .calls_of("StartContainer")
            .contains(&format!("{pod}/{container}"))
            && a.node.fake.container_metadata(&id).is_some()
    })
}

#[tokio::test(start_paused = true)]
async fn a_pod_is_added_runs_and_is_removed_without_a_trace() {
    let a = agent(110).await;
    let p = pod("web", &["init"], &["app"], "Always");
    a.send(PodOperation::Add, vec![p.clone()]).await;
    a.until(Duration::from_secs(5), "init started", |a| {
        running(a, "web", "init")
    })
    .await;
    let init = a.node.fake.container_id("web", "init").unwrap();
    a.node.fake.exit_container(&init, 0);
    a.until(Duration::from_secs(5), "pod Running", |a| {
        a.phase("uid-web").as_deref() == Some("Running")
    })
    .await;
    assert!(running(&a, "web", "app"));

    a.send(PodOperation::Remove, vec![p]).await;
    a.until(Duration::from_secs(10), "pod gone", |a| {
        a.node.fake.object_counts() == (0, 0) && a.statuses.get("uid-web").is_none()
    })
    .await;
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_crashing_container_restarts_after_its_back_off() {
    let a = agent(110).await;
    a.send(
        PodOperation::Add,
        vec![pod("crash", &[], &["app"], "Always")],
    )
    .await;
    a.until(Duration::from_secs(5), "app started", |a| {
        running(a, "crash", "app")
    })
    .await;
    for _ in 0..2 {
        let id = a.node.fake.container_id("crash", "app").unwrap();
        a.node.fake.exit_container(&id, 1);
        a.until(Duration::from_secs(30), "app restarted", |a| {
            a.node.fake.container_id("crash", "app").unwrap() != id
        })
        .await;
    }
    // Two crashes: the first restarts at once, the second after 10 s (give or take
    // the sync tick and relist period).
    let starts = a.node.fake.calls_of("StartContainer").len();
    assert_eq!(starts, 3);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_runtime_calls_fail_does_not_hold_up_another() {
    let a = agent(110).await;
    a.node.fake.fail_next(
        "RunPodSandbox",
        Some("bad"),
        usize::MAX,
        tonic::Code::Unavailable,
    );
    a.send(
        PodOperation::Add,
        vec![
            pod("bad", &[], &["app"], "Always"),
            pod("good", &[], &["app"], "Always"),
        ],
    )
    .await;
    a.until(Duration::from_secs(5), "good Running", |a| {
        a.phase("uid-good").as_deref() == Some("Running")
    })
    .await;
    assert_eq!(a.phase("uid-bad").as_deref(), Some("Pending"));
    // The failing pod keeps being retried (with back-off), the other keeps running.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        a.node
            .fake
            .calls_of("RunPodSandbox")
            .iter()
            .filter(|p| *p == "bad")
            .count()
            > 1
    );
    assert_eq!(a.phase("uid-good").as_deref(), Some("Running"));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pods_beyond_max_pods_are_rejected_by_the_addition_handler() {
    let a = agent(1).await;
    a.send(
        PodOperation::Add,
        vec![
            pod("first", &[], &["app"], "Always"),
            pod("second", &[], &["app"], "Always"),
        ],
    )
    .await;
    a.until(
        Duration::from_secs(5),
        "first Running, second Failed",
        |a| {
            a.phase("uid-first").as_deref() == Some("Running")
                && a.phase("uid-second").as_deref() == Some("Failed")
        },
    )
    .await;
    assert_eq!(
        a.statuses.get("uid-second").unwrap().reason.as_deref(),
        Some(OUT_OF_PODS)
    );
    assert!(a.node.fake.container_id("second", "app").is_none());
    a.stop().await;
}

/// Refuses pods named "refused", as cm's resource fit will refuse pods that do not fit.
struct RefuseByName;

impl crate::contracts::PodAdmitHandler for RefuseByName {
    fn name(&self) -> &'static str {
        "test"
    }
    fn admit(
        &self,
        attrs: &crate::contracts::PodAdmitAttributes<'_>,
    ) -> Result<(), crate::contracts::Rejection> {
        if attrs.pod.metadata.name.as_deref() == Some("refused") {
            return Err(crate::contracts::Rejection {
                reason: "OutOfcpu".into(),
                message: format!("{} other pods hold the cpu", attrs.other_pods.len()),
            });
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_added_to_the_admission_chain_rejects_and_the_pod_never_starts() {
    let (events, mut recorded) = crate::events::EventRecorder::queued(64);
    let node = FakeNode::with_events(events);
    let a = agent_on(node, 110, |l| l.admission.push(Box::new(RefuseByName))).await;
    a.send(PodOperation::Add, vec![pod("ok", &[], &["app"], "Always")])
        .await;
    a.until(Duration::from_secs(5), "ok Running", |a| {
        a.phase("uid-ok").as_deref() == Some("Running")
    })
    .await;
    let refused = pod("refused", &[], &["app"], "Always");
    a.send(PodOperation::Add, vec![refused.clone()]).await;
    a.until(Duration::from_secs(5), "refused Failed", |a| {
        a.phase("uid-refused").as_deref() == Some("Failed")
    })
    .await;
    let s = a.statuses.get("uid-refused").unwrap();
    assert_eq!(s.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was rejected: 1 other pods hold the cpu")
    );
    // kubelet's rejectPod records a Warning event with the rejection's reason.
    let mut rejections = Vec::new();
    while let Ok(e) = recorded.try_recv() {
        if e.object.name == "refused" {
            rejections.push((e.kind, e.reason.to_string(), e.message));
        }
    }
    assert_eq!(
        rejections,
        [(
            crate::events::EventType::Warning,
            "OutOfcpu".to_string(),
            "1 other pods hold the cpu".to_string()
        )]
    );
    // An update of a rejected pod is not dispatched either, and the rejection stays.
    a.send(PodOperation::Update, vec![refused]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(a.node.fake.container_id("refused", "app").is_none());
    assert_eq!(a.phase("uid-refused").as_deref(), Some("Failed"));
    // A rejected pod does not count against maxPods.
    assert_eq!(a.phase("uid-ok").as_deref(), Some("Running"));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_status_subscriber_hears_every_version_the_pod_worker_writes() {
    let a = agent(110).await;
    let mut changes = a.statuses.subscribe();
    a.send(PodOperation::Add, vec![pod("web", &[], &["app"], "Always")])
        .await;
    a.until(Duration::from_secs(5), "web Running", |a| {
        a.phase("uid-web").as_deref() == Some("Running")
    })
    .await;
    let mut versions = Vec::new();
    while let Ok(c) = changes.try_recv() {
        assert_eq!(c.uid, "uid-web");
        versions.push(c.version);
    }
    let last = a.statuses.version("uid-web");
    assert!(last >= 2, "Pending then Running at least: {versions:?}");
    assert_eq!(versions, (1..=last).collect::<Vec<_>>());
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_kill_with_a_status_sets_it_before_stopping_and_it_stays() {
    let a = agent(110).await;
    let p = pod("web", &[], &["app"], "Always");
    a.send(PodOperation::Add, vec![p.clone()]).await;
    a.until(Duration::from_secs(5), "pod Running", |a| {
        a.phase("uid-web").as_deref() == Some("Running")
    })
    .await;
    a.workers.update_pod(PodWork::Kill {
        pod: Arc::new(p),
        kill: KillRequest {
            grace_override: Some(1),
            status: Some(pod_workers::KillStatus {
                phase: crate::pod::Phase::Failed,
                reason: "Evicted".into(),
                message: "The node was low on resource: memory.".into(),
                condition: None,
                keep_succeeded: false,
            }),
            ..KillRequest::new(KillReason::RemovedFromConfig)
        },
    });
    a.until(Duration::from_secs(5), "app stopped", |a| {
        let cs = a.statuses.get("uid-web").and_then(|s| s.container_statuses);
        cs.is_some_and(|cs| {
            cs.iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
        })
    })
    .await;
    // Still desired, yet it stays down and keeps the status the kill set.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let st = a.statuses.get("uid-web").unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        st.message.as_deref(),
        Some("The node was low on resource: memory.")
    );
    assert_eq!(a.node.fake.calls_of("StartContainer").len(), 1);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_a_sidecar_succeeds_once_its_app_exits_0_and_the_sidecar_is_stopped() {
    let a = agent(110).await;
    let mut p = pod("job", &["side"], &["app"], "OnFailure");
    p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].restart_policy =
        Some("Always".into());
    a.send(PodOperation::Add, vec![p.clone()]).await;
    a.until(
        Duration::from_secs(5),
        "app started behind the sidecar",
        |a| running(a, "job", "app"),
    )
    .await;
    assert_eq!(a.phase("uid-job").as_deref(), Some("Running"));
    let app = a.node.fake.container_id("job", "app").unwrap();
    a.node.fake.exit_container(&app, 0);
    a.until(Duration::from_secs(5), "pod Succeeded", |a| {
        a.phase("uid-job").as_deref() == Some("Succeeded")
    })
    .await;
    assert_eq!(a.node.fake.calls_of("StopContainer"), ["job/side"]);
    assert_eq!(
        a.node.fake.calls_of("StartContainer"),
        ["job/side", "job/app"],
        "the sidecar was stopped, not restarted"
    );
    a.stop().await;
}

/// A container with the given probes (exec `cat /tmp/healthy`, period 1 s).
fn probed_pod(liveness: bool, readiness: bool) -> Pod {
    let mut p = pod("probed", &[], &["app"], "Always");
    let probe: k8s_openapi::api::core::v1::Probe = serde_json::from_value(serde_json::json!({
        "exec": {"command": ["cat", "/tmp/healthy"]},
        "periodSeconds": 1, "failureThreshold": 2, "terminationGracePeriodSeconds": 3,
    }))
    .unwrap();
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.liveness_probe = liveness.then(|| probe.clone());
    c.readiness_probe = readiness.then_some(probe);
    p
}

fn container_status(a: &Agent) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    a.statuses
        .get("uid-probed")
        .and_then(|s| s.container_statuses?.into_iter().next())
}

fn pod_ready(a: &Agent) -> Option<String> {
    a.statuses.get("uid-probed").and_then(|s| {
        s.conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
    })
}

#[tokio::test(start_paused = true)]
async fn a_failing_liveness_probe_restarts_the_container_once() {
    let a = agent(110).await;
    a.send(PodOperation::Add, vec![probed_pod(true, false)])
        .await;
    a.until(Duration::from_secs(5), "app running", |a| {
        running(a, "probed", "app")
    })
    .await;
    let first = a.node.fake.container_id("probed", "app").unwrap();
    a.until(Duration::from_secs(5), "worker started", |a| {
        a.probes.worker_count() == 1
    })
    .await;
    a.node.fake.set_exec_result(
        &first,
        Ok(crate::cri::ExecOutput {
            exit_code: 1,
            ..Default::default()
        }),
    );
    a.until(Duration::from_secs(10), "container restarted", |a| {
        container_status(a).is_some_and(|c| c.restart_count == 1)
            && a.node.fake.container_id("probed", "app").as_deref() != Some(first.as_str())
    })
    .await;
    let stops = a
        .node
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.call == "StopContainer")
        .count();
    assert_eq!(stops, 1, "killed once");
    // The new instance probes healthy (default exec result): it stays.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(container_status(&a).unwrap().restart_count, 1);
    assert!(container_status(&a).unwrap().ready);
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_drives_ready_and_never_restarts() {
    let a = agent(110).await;
    a.send(PodOperation::Add, vec![probed_pod(false, true)])
        .await;
    a.until(Duration::from_secs(5), "app running", |a| {
        running(a, "probed", "app")
    })
    .await;
    let id = a.node.fake.container_id("probed", "app").unwrap();
    a.until(Duration::from_secs(5), "ready", |a| {
        container_status(a).is_some_and(|c| c.ready) && pod_ready(a).as_deref() == Some("True")
    })
    .await;
    a.node.fake.set_exec_result(
        &id,
        Ok(crate::cri::ExecOutput {
            exit_code: 1,
            ..Default::default()
        }),
    );
    a.until(Duration::from_secs(10), "not ready", |a| {
        container_status(a).is_some_and(|c| !c.ready && c.started == Some(true))
            && pod_ready(a).as_deref() == Some("False")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(container_status(&a).unwrap().restart_count, 0);
    assert!(a.node.fake.calls_of("StopContainer").is_empty());
    a.stop().await;
}

/// A mirror pod from the apiserver: the static pod `of`'s name, another UID.
fn mirror_of(of: &Pod, uid: &str) -> Pod {
    let mut m = of.clone();
    m.metadata.uid = Some(uid.into());
    m.metadata.annotations = Some(
        [
            (crate::pod::CONFIG_SOURCE_ANNOTATION, "api"),
            (crate::pod::CONFIG_MIRROR_ANNOTATION, "hash"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    m
}

#[tokio::test(start_paused = true)]
async fn mirror_pods_are_never_run_and_never_touch_their_static_pod() {
    let a = agent(110).await;
    // A mirror pod whose static pod is not here: nothing at all happens.
    let lonely = mirror_of(&pod("lonely", &[], &["app"], "Always"), "m-lonely");
    for op in [PodOperation::Add, PodOperation::Update] {
        a.send(op, vec![lonely.clone()]).await;
    }
    let web = pod("web", &[], &["app"], "Always");
    let mirror = mirror_of(&web, "m-web");
    a.send(PodOperation::Add, vec![web.clone()]).await;
    a.until(Duration::from_secs(5), "static pod running", |a| {
        running(a, "web", "app")
    })
    .await;
    // Its mirror pod comes, changes, goes: the static pod's one sandbox and one
    // container stay, and no worker or status ever exists for a mirror UID.
    for op in [
        PodOperation::Add,
        PodOperation::Update,
        PodOperation::Delete,
        PodOperation::Reconcile,
        PodOperation::Remove,
    ] {
        a.send(op, vec![mirror.clone()]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    a.send(PodOperation::Remove, vec![lonely]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a.node.fake.calls_of("RunPodSandbox"), ["web"]);
    assert_eq!(a.node.fake.calls_of("StartContainer"), ["web/app"]);
    assert!(a.node.fake.calls_of("StopContainer").is_empty());
    for uid in ["m-web", "m-lonely"] {
        assert!(a.workers.lifecycle(uid).is_none(), "{uid} has no worker");
        assert!(a.statuses.get(uid).is_none(), "{uid} has no status");
    }
    assert_eq!(a.phase("uid-web").as_deref(), Some("Running"));
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_mirror_pod_update_syncs_its_static_pod() {
    let web = pod("web", &[], &["app"], "Always");
    let mirror = mirror_of(&web, "m-web");
    let (w, m) = (web.clone(), mirror.clone());
    let a = agent_with(110, move |l| {
        l.handle_pod_additions(vec![Arc::new(w.clone())]);
        assert_eq!(
            l.handle_mirror_pod(&m).map(|p| pod_uid(&p).to_string()),
            Some("uid-web".to_string()),
            "the static pod of the mirror pod is synced"
        );
        // A mirror pod is found among the pods only as a mirror.
        l.handle_pod_additions(vec![Arc::new(m.clone())]);
        assert!(!l.pods.contains("m-web"));
        assert!(!l.workers.is_active("m-web"));
        let other = mirror_of(&pod("other", &[], &["app"], "Always"), "m-other");
        assert!(l.handle_mirror_pod(&other).is_none(), "no static pod");
    })
    .await;
    a.until(Duration::from_secs(5), "static pod running", |a| {
        running(a, "web", "app")
    })
    .await;
    a.stop().await;
}

/// Whether `hook` is notified within 1 s of paused time.
async fn poked(hook: &Notify) -> bool {
    tokio::time::timeout(Duration::from_secs(1), hook.notified())
        .await
        .is_ok()
}

fn with_source(mut p: Pod, source: &str) -> Pod {
    p.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::pod::CONFIG_SOURCE_ANNOTATION.into(), source.into());
    p
}

#[tokio::test(start_paused = true)]
async fn static_and_mirror_pod_changes_poke_the_mirror_hook() {
    let hook = Arc::new(Notify::new());
    let h = hook.clone();
    let a = agent_with(110, move |l| l.mirror_hook = Some(h)).await;
    let web = with_source(pod("web", &[], &["app"], "Always"), "file");
    a.send(PodOperation::Add, vec![web.clone()]).await;
    assert!(poked(&hook).await, "static pod added");
    // A status-only change and a pod of the apiserver that is no mirror: no pass.
    a.send(PodOperation::Reconcile, vec![web.clone()]).await;
    let api = with_source(pod("api", &[], &["app"], "Always"), crate::pod::API_SOURCE);
    a.send(PodOperation::Add, vec![api]).await;
    assert!(!poked(&hook).await, "neither static nor mirror");
    let mut mirror = with_source(pod("web", &[], &["app"], "Always"), crate::pod::API_SOURCE);
    mirror.metadata.uid = Some("mirror-uid".into());
    mirror
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(crate::pod::CONFIG_MIRROR_ANNOTATION.into(), "h".into());
    a.send(PodOperation::Remove, vec![mirror]).await;
    assert!(poked(&hook).await, "mirror pod removed");
    a.send(PodOperation::Remove, vec![web]).await;
    assert!(poked(&hook).await, "static pod removed");
    a.stop().await;
}

/// A running pod `web`, and the one evictor over it (its pod manager holds the pod),
/// with the receiving end of its events.
async fn running_web_and_evictor() -> (
    Agent,
    Pod,
    super::WorkerEvictor<super::Syncer>,
    crate::events::EventQueue,
) {
    let a = agent(110).await;
    let p = pod("web", &[], &["app"], "Always");
    a.send(PodOperation::Add, vec![p.clone()]).await;
    a.until(Duration::from_secs(5), "pod Running", |a| {
        a.phase("uid-web").as_deref() == Some("Running")
    })
    .await;
    let (events, rx) = crate::events::EventRecorder::queued(8);
    let pods = Arc::new(PodManager::default());
    pods.add_or_update(Arc::new(p.clone()));
    let evictor = super::WorkerEvictor {
        pods,
        workers: a.workers.clone(),
        events,
        allocation: test_allocation(),
    };
    (a, p, evictor, rx)
}

/// The QoS manager's evictor (and kubelet's eviction manager after it): a syncing
/// pod ends Failed/Evicted with a DisruptionTarget and a Warning event; a pod that
/// is already stopping is left alone.
#[tokio::test(start_paused = true)]
async fn an_eviction_through_the_pod_workers_fails_the_pod_with_a_disruption_target() {
    use crate::contracts::{Eviction, Evictor};
    let (a, p, evictor, mut rx) = running_web_and_evictor().await;
    assert!(evictor.evict(
        Arc::new(p.clone()),
        Eviction::new("node memory usage 80%".into())
    ));
    a.until(Duration::from_secs(5), "pod Failed", |a| {
        a.phase("uid-web").as_deref() == Some("Failed")
    })
    .await;
    assert!(
        !evictor.evict(Arc::new(p), Eviction::new("again".into())),
        "a stopping or stopped pod is not evicted twice"
    );
    let st = a.statuses.get("uid-web").unwrap();
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert_eq!(st.message.as_deref(), Some("node memory usage 80%"));
    let conditions = st.conditions.unwrap_or_default();
    let d = conditions
        .iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("DisruptionTarget");
    assert_eq!(d.reason.as_deref(), Some("TerminationByKubelet"));
    let e = rx.try_recv().unwrap();
    assert_eq!(
        (&*e.reason, e.kind),
        ("Evicted", crate::events::EventType::Warning)
    );
    assert!(rx.try_recv().is_err(), "one event");
    a.stop().await;
}

/// The node shutdown manager's terminator: a running pod is listed, stopped with the
/// shutdown's status and no event, then reported terminated and no longer listed.
#[tokio::test(start_paused = true)]
async fn a_node_shutdown_kill_fails_the_pod_as_terminated_without_an_event() {
    use crate::contracts::{PodTerminator, Termination};
    let (a, p, terminator, mut rx) = running_web_and_evictor().await;
    assert_eq!(terminator.running_pods().len(), 1);
    assert!(!terminator.terminated("uid-web"));
    let message = "Pod was terminated in response to imminent node shutdown.";
    assert!(terminator.terminate(
        Arc::new(p.clone()),
        Termination {
            reason: "Terminated".into(),
            message: message.into(),
            grace_seconds: 2,
        }
    ));
    a.until(Duration::from_secs(5), "pod terminated", |_| {
        terminator.terminated("uid-web")
    })
    .await;
    assert!(terminator.running_pods().is_empty());
    let st = a.statuses.get("uid-web").unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(
        (st.reason.as_deref(), st.message.as_deref()),
        (Some("Terminated"), Some(message))
    );
    let conditions = st.conditions.unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    assert!(rx.try_recv().is_err(), "no event");
    a.stop().await;
}

/// An allocation manager in memory, for a 4-CPU, 8 GiB node.
fn test_allocation() -> Arc<super::AllocationManager> {
    Arc::new(super::AllocationManager::new(
        crate::allocation::ResourceState::in_memory(),
        crate::cm::NodeResources {
            cpu_milli: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
            pods: 110,
        },
        crate::cm::MemoryPolicy::NONE,
        crate::events::EventRecorder::log_only(),
    ))
}
