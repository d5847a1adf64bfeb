//! Unit tests of status generation: phases, conditions, container states.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};

use super::generate::{StatusInputs, generate};
use crate::runtime::types::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};

fn pod(policy: &str, names: &[&str], inits: &[&str]) -> Pod {
    let c = |n: &&str| Container {
        name: n.to_string(),
        image: Some("img:1".into()),
        ..Default::default()
    };
    Pod {
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            containers: names.iter().map(c).collect(),
            init_containers: (!inits.is_empty()).then(|| inits.iter().map(c).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ctr(
    name: &str,
    state: ContainerState,
    exit: i32,
    created: i64,
    restarts: i32,
) -> ContainerStatus {
    ContainerStatus {
        id: format!("{name}-{created}"),
        name: name.into(),
        state,
        created_at: created,
        started_at: 1_700_000_000_000_000_000,
        finished_at: if state == ContainerState::Exited {
            1_700_000_001_000_000_000
        } else {
            0
        },
        exit_code: exit,
        image: "img:1".into(),
        image_ref: "sha256:abc".into(),
        reason: String::new(),
        message: String::new(),
        hash: 0,
        restart_count: restarts,
        is_init: false,
    }
}

fn runtime(containers: Vec<ContainerStatus>) -> PodRuntimeStatus {
    PodRuntimeStatus {
        ips: vec!["10.1.0.2".into()],
        sandboxes: vec![SandboxStatus {
            id: "sb".into(),
            ready: true,
            attempt: 0,
            created_at: 0,
            ips: vec!["10.1.0.2".into()],
            host_network: false,
        }],
        containers,
        ..Default::default()
    }
}

fn gen_with(
    p: &Pod,
    rt: &PodRuntimeStatus,
    old: Option<&PodStatus>,
    reason: Option<(&str, &str)>,
    terminating: bool,
) -> PodStatus {
    let lookup = move |_: &str| reason.map(|(r, m)| (r.to_string(), m.to_string()));
    generate(&StatusInputs {
        pod: p,
        runtime: rt,
        waiting_reason: &lookup,
        old,
        host_ip: "192.0.2.10",
        runtime_name: "containerd",
        terminating,
        now: jiff::Timestamp::from_second(1_700_000_100).unwrap(),
    })
}

fn status_of(p: &Pod, rt: &PodRuntimeStatus) -> PodStatus {
    gen_with(p, rt, None, None, false)
}

fn cond<'a>(s: &'a PodStatus, kind: &str) -> (&'a str, Option<&'a str>) {
    let c = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap();
    (c.status.as_str(), c.reason.as_deref())
}

#[test]
fn new_pod_is_pending_with_container_creating() {
    let p = pod("Always", &["a"], &[]);
    let s = status_of(&p, &PodRuntimeStatus::default());
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("ContainerCreating")
    );
    assert_eq!(cond(&s, "PodReadyToStartContainers").0, "False");
    assert_eq!(cond(&s, "Ready"), ("False", Some("ContainersNotReady")));
    assert_eq!(cond(&s, "PodScheduled").0, "True");
}

#[test]
fn running_pod_is_ready() {
    let p = pod("Always", &["a", "b"], &[]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 2, 0),
        ctr("b", ContainerState::Running, 0, 1, 0),
    ]);
    let s = status_of(&p, &rt);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    for kind in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodScheduled",
    ] {
        assert_eq!(cond(&s, kind).0, "True", "{kind}");
    }
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert!(cs.ready && cs.started == Some(true));
    assert_eq!(cs.container_id.as_deref(), Some("containerd://a-2"));
    assert_eq!(cs.image_id, "sha256:abc");
    assert_eq!(s.pod_ip.as_deref(), Some("10.1.0.2"));
    assert_eq!(s.host_ip.as_deref(), Some("192.0.2.10"));
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert!(s.start_time.is_some());
}

#[test]
fn phases_by_restart_policy_and_exit_codes() {
    for (policy, exit, phase, reason) in [
        ("Never", 0, "Succeeded", "Completed"),
        ("Never", 3, "Failed", "Error"),
        ("OnFailure", 0, "Succeeded", "Completed"),
        ("Always", 0, "Running", "Completed"),
    ] {
        let p = pod(policy, &["a"], &[]);
        let rt = runtime(vec![ctr("a", ContainerState::Exited, exit, 1, 0)]);
        let s = status_of(&p, &rt);
        assert_eq!(s.phase.as_deref(), Some(phase), "{policy} exit {exit}");
        let term = s.container_statuses.as_ref().unwrap()[0]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(term.reason.as_deref(), Some(reason));
        assert_eq!(term.exit_code, exit);
    }
}

#[test]
fn crash_loop_shows_waiting_with_last_state() {
    let p = pod("Always", &["a"], &[]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Exited, 1, 2, 1),
        ctr("a", ContainerState::Exited, 1, 1, 0),
    ]);
    let s = gen_with(
        &p,
        &rt,
        None,
        Some(("CrashLoopBackOff", "back-off 10s")),
        false,
    );
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("CrashLoopBackOff")
    );
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert_eq!(cs.restart_count, 1);
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn restarted_container_reports_previous_instance() {
    let p = pod("Always", &["a"], &[]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 2, 1),
        ctr("a", ContainerState::Exited, 2, 1, 0),
    ]);
    let s = status_of(&p, &rt);
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert!(cs.state.as_ref().unwrap().running.is_some());
    assert_eq!(
        cs.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        2
    );
}

#[test]
fn init_containers_gate_the_pod() {
    let p = pod("Always", &["a"], &["init"]);
    let s = status_of(
        &p,
        &runtime(vec![ctr("init", ContainerState::Running, 0, 1, 0)]),
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        cond(&s, "Initialized"),
        ("False", Some("ContainersNotInitialized"))
    );
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        cs.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .reason
            .as_deref(),
        Some("PodInitializing")
    );
    let s = status_of(
        &p,
        &runtime(vec![
            ctr("a", ContainerState::Running, 0, 2, 0),
            ctr("init", ContainerState::Exited, 0, 1, 0),
        ]),
    );
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized").0, "True");
}

#[test]
fn terminal_phase_is_sticky_and_transition_times_are_kept() {
    let p = pod("Never", &["a"], &[]);
    let done = status_of(
        &p,
        &runtime(vec![ctr("a", ContainerState::Exited, 0, 1, 0)]),
    );
    assert_eq!(done.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&done, "Ready"), ("False", Some("PodCompleted")));
    // Even if the runtime forgets the container, the phase stays.
    let later = gen_with(&p, &PodRuntimeStatus::default(), Some(&done), None, false);
    assert_eq!(later.phase.as_deref(), Some("Succeeded"));
    assert_eq!(later.start_time, done.start_time);
    let t = |s: &PodStatus| {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "PodScheduled")
            .unwrap()
            .last_transition_time
            .clone()
    };
    assert_eq!(t(&later), t(&done));
}

#[test]
fn terminating_pod_with_stopped_containers_is_terminal() {
    let p = pod("Always", &["a"], &[]);
    let s = gen_with(
        &p,
        &runtime(vec![ctr("a", ContainerState::Exited, 137, 1, 0)]),
        None,
        None,
        true,
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
}

#[test]
fn retain_forgets_statuses_of_pods_that_are_gone() {
    let m = super::StatusManager::default();
    for uid in ["keep", "gone"] {
        m.set(
            uid,
            PodStatus {
                phase: Some("Succeeded".into()),
                ..Default::default()
            },
        );
    }
    assert_eq!(m.retain(|uid| uid == "keep"), vec!["gone".to_string()]);
    assert!(m.get("gone").is_none());
    assert!(m.get("keep").is_some());
}
