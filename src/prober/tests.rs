//! Probe workers over the fake runtime on tokio's paused clock: thresholds, the
//! initial delay, startup gating, error retries and exec timeouts.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, ExecAction, PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::worker::Worker;
use super::*;
use crate::cri::ExecOutput;
use crate::cri::support::{FakeNode, pod};
use crate::kuberuntime::PodRuntimeStatus;

struct Bed {
    node: FakeNode,
    deps: Arc<WorkerDeps>,
    updates: tokio::sync::mpsc::Receiver<ProbeUpdate>,
    pod: Arc<Pod>,
    id: String,
    started: jiff::Timestamp,
    events: crate::events::EventQueue,
}

fn exec_probe(threshold_fail: i32, threshold_ok: i32, delay: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["cat".into(), "/tmp/healthy".into()]),
        }),
        failure_threshold: Some(threshold_fail),
        success_threshold: Some(threshold_ok),
        initial_delay_seconds: Some(delay),
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        ..Default::default()
    }
}

/// A running pod "p" with one container "app" carrying `probes`, and its status as
/// the status manager would hold it.
async fn bed(set: impl FnOnce(&mut Container)) -> Bed {
    let node = FakeNode::new();
    let mut p = pod("p", &[], &["app"], "Always");
    set(&mut p.spec.as_mut().unwrap().containers[0]);
    node.manager
        .sync_pod(&p, &PodRuntimeStatus::default())
        .await
        .unwrap();
    let id = node.fake.container_id("p", "app").unwrap();
    let (results, updates) = ProbeResults::new(16);
    let (recorder, events) = crate::events::EventRecorder::queued(64);
    let deps = Arc::new(WorkerDeps {
        results: Arc::new(results),
        statuses: Arc::new(StatusManager::default()),
        cri: node.fake.clone(),
        events: recorder,
    });
    let started = jiff::Timestamp::from_second(1_700_000_000).unwrap();
    deps.statuses.set(
        "uid-p",
        PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("127.0.0.1".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some(format!("fake://{id}")),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(started)),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    Bed {
        node,
        deps,
        updates,
        pod: Arc::new(p),
        id,
        started,
        events,
    }
}

impl Bed {
    fn worker(&self, kind: ProbeKind) -> Worker {
        let c = self.pod.spec.as_ref().unwrap().containers[0].clone();
        let probe = kind.of(&c).unwrap().clone();
        Worker::new(kind, self.pod.clone(), c, probe, self.deps.clone())
    }

    fn at(&self, secs: i64) -> jiff::Timestamp {
        self.started + jiff::SignedDuration::from_secs(secs)
    }

    fn result(&self, kind: ProbeKind) -> Option<ProbeResult> {
        self.deps.results.get(kind, &self.id)
    }

    fn execs(&self) -> usize {
        self.node.fake.calls_of("ExecSync").len()
    }

    fn exec_exits(&self, code: i32) {
        self.node.fake.set_exec_result(
            &self.id,
            Ok(ExecOutput {
                exit_code: code,
                ..Default::default()
            }),
        );
    }
}

#[tokio::test(start_paused = true)]
async fn liveness_fails_only_after_failure_threshold_consecutive_failures_then_holds() {
    let mut b = bed(|c| c.liveness_probe = Some(exec_probe(3, 1, 0))).await;
    let mut w = b.worker(ProbeKind::Liveness);
    b.exec_exits(1);
    assert!(w.do_probe(b.at(5)).await);
    assert_eq!(
        b.result(ProbeKind::Liveness),
        Some(ProbeResult::Success),
        "initial result"
    );
    assert!(w.do_probe(b.at(6)).await);
    // A success in between starts the count again.
    b.exec_exits(0);
    assert!(w.do_probe(b.at(7)).await);
    b.exec_exits(1);
    assert!(w.do_probe(b.at(8)).await);
    assert!(w.do_probe(b.at(9)).await);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Success));
    assert!(w.do_probe(b.at(10)).await);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Failure));
    let update = b.updates.try_recv().unwrap();
    assert_eq!(
        update.result,
        ProbeResult::Success,
        "initial result announced first"
    );
    let update = b.updates.try_recv().unwrap();
    assert_eq!(
        (update.kind, update.result, update.pod_uid.as_str()),
        (ProbeKind::Liveness, ProbeResult::Failure, "uid-p")
    );
    // kubelet's Unhealthy warning for every failed probe (5: at 5, 6, 8, 9, 10 s), on
    // the container, including those below the threshold.
    let mut unhealthy = Vec::new();
    while let Ok(e) = b.events.try_recv() {
        unhealthy.push((e.reason, e.kind, e.message, e.object.field_path));
    }
    assert_eq!(unhealthy.len(), 5, "{unhealthy:?}");
    let (reason, kind, message, field_path) = &unhealthy[0];
    assert_eq!(
        (reason.as_ref(), *kind),
        ("Unhealthy", crate::events::EventType::Warning)
    );
    assert!(message.starts_with("Liveness probe failed: "), "{message}");
    assert_eq!(field_path, "spec.containers{app}");
    // On hold until a new container instance: no more probes.
    let execs = b.execs();
    assert!(w.do_probe(b.at(11)).await);
    assert_eq!(b.execs(), execs);
}

#[tokio::test(start_paused = true)]
async fn readiness_starts_failed_and_needs_success_threshold() {
    let b = bed(|c| c.readiness_probe = Some(exec_probe(3, 2, 0))).await;
    let mut w = b.worker(ProbeKind::Readiness);
    b.exec_exits(0);
    assert!(w.do_probe(b.at(1)).await);
    assert_eq!(b.result(ProbeKind::Readiness), Some(ProbeResult::Failure));
    assert!(w.do_probe(b.at(2)).await);
    assert_eq!(b.result(ProbeKind::Readiness), Some(ProbeResult::Success));
}

#[tokio::test(start_paused = true)]
async fn no_probe_runs_before_the_initial_delay_from_the_container_start() {
    let b = bed(|c| c.liveness_probe = Some(exec_probe(1, 1, 30))).await;
    let mut w = b.worker(ProbeKind::Liveness);
    b.exec_exits(1);
    assert!(w.do_probe(b.at(29)).await);
    assert_eq!(b.execs(), 0);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Success));
    assert!(w.do_probe(b.at(30)).await);
    assert_eq!(b.execs(), 1);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Failure));
}

#[tokio::test(start_paused = true)]
async fn startup_probe_gates_liveness_and_stops_after_success() {
    let b = bed(|c| {
        c.liveness_probe = Some(exec_probe(1, 1, 0));
        c.startup_probe = Some(exec_probe(10, 1, 0));
    })
    .await;
    let mut live = b.worker(ProbeKind::Liveness);
    let mut startup = b.worker(ProbeKind::Startup);
    b.exec_exits(1);
    assert!(live.do_probe(b.at(1)).await);
    assert_eq!(b.execs(), 0, "liveness waits for the startup probe");
    assert!(startup.do_probe(b.at(1)).await);
    assert_eq!(b.execs(), 1);
    assert_eq!(b.result(ProbeKind::Startup), Some(ProbeResult::Unknown));
    assert!(!b.deps.started(&live.container, &b.id));
    b.exec_exits(0);
    assert!(startup.do_probe(b.at(2)).await);
    assert_eq!(b.result(ProbeKind::Startup), Some(ProbeResult::Success));
    assert!(b.deps.started(&live.container, &b.id));
    assert!(startup.do_probe(b.at(3)).await);
    assert_eq!(b.execs(), 2, "the startup probe stops after its success");
    b.exec_exits(1);
    assert!(live.do_probe(b.at(4)).await);
    assert_eq!(b.execs(), 3);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Failure));
}

#[tokio::test(start_paused = true)]
async fn probe_errors_are_retried_three_times_and_not_counted() {
    let b = bed(|c| c.liveness_probe = Some(exec_probe(1, 1, 0))).await;
    let mut w = b.worker(ProbeKind::Liveness);
    b.node
        .fake
        .fail_next("ExecSync", None, 3, tonic::Code::Unavailable);
    assert!(w.do_probe(b.at(1)).await);
    assert_eq!(b.execs(), 3, "tried maxProbeRetries times");
    assert_eq!(
        b.result(ProbeKind::Liveness),
        Some(ProbeResult::Success),
        "discarded"
    );
    // Two errors then a failure within one run: the failure counts.
    b.node
        .fake
        .fail_next("ExecSync", None, 2, tonic::Code::Unavailable);
    b.exec_exits(1);
    assert!(w.do_probe(b.at(2)).await);
    assert_eq!(b.execs(), 6);
    assert_eq!(b.result(ProbeKind::Liveness), Some(ProbeResult::Failure));
}

#[tokio::test(start_paused = true)]
async fn an_exec_timeout_is_a_failure() {
    let mut b = bed(|c| c.readiness_probe = Some(exec_probe(1, 1, 0))).await;
    let mut w = b.worker(ProbeKind::Readiness);
    b.exec_exits(0);
    assert!(w.do_probe(b.at(1)).await);
    assert_eq!(b.result(ProbeKind::Readiness), Some(ProbeResult::Success));
    b.node
        .fake
        .set_exec_result(&b.id, Err(tonic::Code::DeadlineExceeded));
    let before = tokio::time::Instant::now();
    assert!(w.do_probe(b.at(2)).await);
    assert_eq!(
        before.elapsed(),
        Duration::from_secs(1),
        "waited timeoutSeconds"
    );
    assert_eq!(b.execs(), 2, "a timeout is not retried");
    assert_eq!(b.result(ProbeKind::Readiness), Some(ProbeResult::Failure));
    // kubelet's exec prober: the timeout error is the output.
    let e = b.events.try_recv().expect("Unhealthy event");
    assert_eq!(
        e.message,
        r#"Readiness probe failed: command "cat /tmp/healthy" timed out"#
    );
}

#[tokio::test(start_paused = true)]
async fn an_exec_failure_message_is_the_command_output() {
    let mut b = bed(|c| c.liveness_probe = Some(exec_probe(3, 1, 0))).await;
    let mut w = b.worker(ProbeKind::Liveness);
    b.node.fake.set_exec_result(
        &b.id,
        Ok(ExecOutput {
            stdout: b"not ready\n".to_vec(),
            stderr: b"oops".to_vec(),
            exit_code: 1,
        }),
    );
    assert!(w.do_probe(b.at(1)).await);
    let e = b.events.try_recv().expect("Unhealthy event");
    // As kubelet's prober: `<Kind> probe failed: <output>`, stdout then stderr.
    assert_eq!(e.message, "Liveness probe failed: not ready\noops");
}

#[tokio::test(start_paused = true)]
async fn a_terminal_pod_stops_its_workers() {
    let b = bed(|c| c.readiness_probe = Some(exec_probe(1, 1, 0))).await;
    let mut w = b.worker(ProbeKind::Readiness);
    let mut st = b.deps.statuses.get("uid-p").unwrap();
    st.phase = Some("Succeeded".into());
    b.deps.statuses.set("uid-p", st);
    assert!(!w.do_probe(b.at(1)).await);
}

#[test]
fn timing_defaults_follow_the_api() {
    let t = worker::Timing::of(&Probe::default());
    assert_eq!(
        (
            t.initial_delay,
            t.period,
            t.timeout,
            t.success_threshold,
            t.failure_threshold
        ),
        (0, Duration::from_secs(10), Duration::from_secs(1), 1, 3)
    );
}
