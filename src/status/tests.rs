//! Unit tests of status generation: phases, conditions, container states.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};

use super::generate::{StatusInputs, generate_pod_status};
use crate::kuberuntime::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
use crate::pod::WaitingReason;

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
        user: None,
        resources: None,
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
    reason: Option<(WaitingReason, &str)>,
    terminating: bool,
) -> PodStatus {
    let lookup = move |_: &str| reason.map(|(r, m)| (r, m.to_string()));
    generate_pod_status(&StatusInputs {
        pod: p,
        runtime: rt,
        waiting_reason: &lookup,
        old,
        host_ips: &["192.0.2.10".to_string()],
        runtime_name: "containerd",
        terminating,
        now: jiff::Timestamp::from_second(1_700_000_100).unwrap(),
        probed: &|_, _| None,
        supports_rro: false,
        resize: None,
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

/// Sets container `name`'s own restart policy, and a rule restarting it on `codes`.
fn with_container_policy(mut p: Pod, name: &str, policy: &str, codes: &[i32]) -> Pod {
    let spec = p.spec.as_mut().unwrap();
    let all = spec.init_containers.iter_mut().flatten();
    let c = all
        .chain(spec.containers.iter_mut())
        .find(|c| c.name == name)
        .unwrap();
    c.restart_policy = Some(policy.into());
    if !codes.is_empty() {
        c.restart_policy_rules = Some(vec![crate::pod::restart_on(codes)]);
    }
    p
}

#[test]
fn phases_follow_the_containers_own_restart_rules_and_policy() {
    // (pod policy, the container's policy, its restart codes, exit code, phase)
    for (pod_policy, own, codes, exit, phase) in [
        ("Never", "Never", &[42][..], 42, "Running"),
        ("Never", "Never", &[42][..], 0, "Succeeded"),
        ("Never", "Never", &[42][..], 1, "Failed"),
        ("Always", "Never", &[][..], 0, "Succeeded"),
        ("Always", "Never", &[][..], 2, "Failed"),
        ("Never", "OnFailure", &[][..], 2, "Running"),
        ("Never", "Always", &[][..], 0, "Running"),
    ] {
        let p = with_container_policy(pod(pod_policy, &["a"], &[]), "a", own, codes);
        let rt = runtime(vec![ctr("a", ContainerState::Exited, exit, 1, 0)]);
        let s = status_of(&p, &rt);
        assert_eq!(
            s.phase.as_deref(),
            Some(phase),
            "pod {pod_policy}, container {own} {codes:?}, exit {exit}"
        );
    }
    // One container that stays exited does not end the pod while another restarts.
    let p = with_container_policy(pod("Always", &["a", "b"], &[]), "a", "Never", &[]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Exited, 0, 1, 0),
        ctr("b", ContainerState::Exited, 1, 2, 0),
    ]);
    assert_eq!(status_of(&p, &rt).phase.as_deref(), Some("Running"));
}

#[test]
fn an_init_container_that_may_not_rerun_fails_the_pod() {
    let p = with_container_policy(pod("Always", &["a"], &["init"]), "init", "Never", &[]);
    let rt = runtime(vec![ctr("init", ContainerState::Exited, 1, 1, 0)]);
    assert_eq!(status_of(&p, &rt).phase.as_deref(), Some("Failed"));
    let p = with_container_policy(pod("Never", &["a"], &["init"]), "init", "Never", &[1]);
    assert_eq!(status_of(&p, &rt).phase.as_deref(), Some("Pending"));
}

#[test]
fn created_containers_report_their_mounts_and_which_are_recursively_read_only() {
    let mut p = pod("Always", &["a"], &[]);
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    let mount = |name: &str, ro: bool, rro: Option<&str>| k8s_openapi::api::core::v1::VolumeMount {
        name: name.into(),
        mount_path: format!("/{name}"),
        read_only: Some(ro),
        recursive_read_only: rro.map(Into::into),
        ..Default::default()
    };
    c.volume_mounts = Some(vec![
        mount("rw", false, None),
        mount("ro", true, None),
        mount("rro", true, Some("IfPossible")),
    ]);
    let rt = runtime(vec![ctr("a", ContainerState::Running, 0, 1, 0)]);
    let status = |supported: bool| {
        let lookup = |_: &str| None;
        generate_pod_status(&StatusInputs {
            pod: &p,
            runtime: &rt,
            waiting_reason: &lookup,
            old: None,
            host_ips: &["192.0.2.10".to_string()],
            runtime_name: "containerd",
            terminating: false,
            now: jiff::Timestamp::from_second(1_700_000_100).unwrap(),
            probed: &|_, _| None,
            supports_rro: supported,
            resize: None,
        })
    };
    let mounts = |s: PodStatus| {
        serde_json::to_value(&s.container_statuses.unwrap()[0].volume_mounts).unwrap()
    };
    assert_eq!(
        mounts(status(true)),
        serde_json::json!([
            {"name": "rw", "mountPath": "/rw"},
            {"name": "ro", "mountPath": "/ro", "readOnly": true, "recursiveReadOnly": "Disabled"},
            {"name": "rro", "mountPath": "/rro", "readOnly": true, "recursiveReadOnly": "Enabled"},
        ])
    );
    assert_eq!(mounts(status(false))[2]["recursiveReadOnly"], "Disabled");
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
        Some((WaitingReason::CrashLoopBackOff, "back-off 10s")),
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

fn state_reason(cs: &k8s_openapi::api::core::v1::ContainerStatus) -> Option<&str> {
    cs.state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .and_then(|w| w.reason.as_deref())
}

fn cond_full(s: &PodStatus, kind: &str) -> k8s_openapi::api::core::v1::PodCondition {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no {kind} condition"))
        .clone()
}

fn init_ctr(name: &str, state: ContainerState, exit: i32, created: i64) -> ContainerStatus {
    ContainerStatus {
        is_init: true,
        user: None,
        ..ctr(name, state, exit, created, 0)
    }
}

#[test]
fn container_statuses_are_sorted_by_name_and_init_statuses_keep_spec_order() {
    let p = pod("Always", &["web", "app", "db"], &["z-init", "a-init"]);
    let s = status_of(
        &p,
        &runtime(vec![
            ctr("web", ContainerState::Running, 0, 5, 0),
            ctr("db", ContainerState::Running, 0, 4, 0),
            ctr("app", ContainerState::Running, 0, 3, 0),
            init_ctr("a-init", ContainerState::Exited, 0, 2),
            init_ctr("z-init", ContainerState::Exited, 0, 1),
        ]),
    );
    let names = |l: &Option<Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
        l.as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&s.container_statuses), ["app", "db", "web"]);
    assert_eq!(names(&s.init_container_statuses), ["z-init", "a-init"]);
}

#[test]
fn completed_init_container_is_ready_and_running_one_is_not() {
    let p = pod("Always", &["a"], &["i1", "i2"]);
    let s = status_of(
        &p,
        &runtime(vec![
            init_ctr("i2", ContainerState::Running, 0, 2),
            init_ctr("i1", ContainerState::Exited, 0, 1),
        ]),
    );
    let inits = s.init_container_statuses.as_ref().unwrap();
    assert!(inits[0].ready, "completed init container is ready");
    assert_eq!(inits[0].started, Some(false));
    assert!(!inits[1].ready, "a running init container is not ready");
    assert_eq!(inits[1].started, Some(true));
    let c = cond_full(&s, "Initialized");
    assert_eq!(c.status, "False");
    assert_eq!(
        c.message.as_deref(),
        Some("containers with incomplete status: [i2]")
    );
    // A failed init container is not ready either.
    let s = status_of(
        &p,
        &runtime(vec![init_ctr("i1", ContainerState::Exited, 1, 1)]),
    );
    assert!(!s.init_container_statuses.as_ref().unwrap()[0].ready);
}

#[test]
fn failed_pod_conditions_say_pod_failed() {
    let p = pod("Never", &["a", "b"], &["init"]);
    let s = status_of(
        &p,
        &runtime(vec![
            ctr("b", ContainerState::Exited, 0, 4, 0),
            ctr("a", ContainerState::Exited, 3, 3, 0),
            init_ctr("init", ContainerState::Exited, 0, 1),
        ]),
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(cond(&s, "Ready"), ("False", Some("PodFailed")));
    assert_eq!(cond(&s, "ContainersReady"), ("False", Some("PodFailed")));
    // Only Succeeded says PodCompleted; a failed pod that ran was initialized.
    assert_eq!(cond(&s, "Initialized"), ("True", None));
    assert!(s.init_container_statuses.as_ref().unwrap()[0].ready);

    let s = status_of(
        &p,
        &runtime(vec![
            ctr("b", ContainerState::Exited, 0, 4, 0),
            ctr("a", ContainerState::Exited, 0, 3, 0),
            init_ctr("init", ContainerState::Exited, 0, 1),
        ]),
    );
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&s, "Ready"), ("False", Some("PodCompleted")));
    assert_eq!(cond(&s, "ContainersReady"), ("False", Some("PodCompleted")));
    assert_eq!(cond(&s, "Initialized"), ("True", Some("PodCompleted")));

    // A failed init container under Never fails the pod before anything ran.
    let s = status_of(
        &p,
        &runtime(vec![init_ctr("init", ContainerState::Exited, 1, 1)]),
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(cond(&s, "Ready"), ("False", Some("PodFailed")));
    assert_eq!(
        cond(&s, "Initialized"),
        ("False", Some("ContainersNotInitialized"))
    );
}

#[test]
fn app_containers_of_a_pod_with_init_containers_wait_as_pod_initializing() {
    let p = pod("Always", &["a"], &["init"]);
    // Init done, app container not created yet: still PodInitializing (kubelet's
    // default waiting reason for every container of a pod with init containers).
    let s = status_of(
        &p,
        &runtime(vec![init_ctr("init", ContainerState::Exited, 0, 1)]),
    );
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(state_reason(cs), Some("PodInitializing"));
    let s = status_of(&p, &PodRuntimeStatus::default());
    assert_eq!(
        state_reason(&s.init_container_statuses.as_ref().unwrap()[0]),
        Some("PodInitializing")
    );
    // Without init containers it is ContainerCreating.
    let p = pod("Always", &["a"], &[]);
    let s = status_of(&p, &runtime(vec![]));
    assert_eq!(
        state_reason(&s.container_statuses.as_ref().unwrap()[0]),
        Some("ContainerCreating")
    );
}

#[test]
fn created_but_not_started_container_waits_without_a_reason() {
    let p = pod("Always", &["a"], &[]);
    let s = status_of(
        &p,
        &runtime(vec![ctr("a", ContainerState::Created, 0, 1, 0)]),
    );
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    let w = cs.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(w.reason, None);
    assert!(!cs.ready);
}

#[test]
fn image_is_what_the_runtime_reports() {
    let p = pod("Always", &["a", "b"], &[]);
    let mut a = ctr("a", ContainerState::Running, 0, 1, 0);
    a.image = "docker.io/library/img:1".into();
    let s = status_of(&p, &runtime(vec![a]));
    let cs = s.container_statuses.as_ref().unwrap();
    assert_eq!(cs[0].image, "docker.io/library/img:1");
    assert_eq!(cs[0].image_id, "sha256:abc");
    // No runtime record yet: the spec's image.
    assert_eq!(cs[1].image, "img:1");
}

#[test]
fn readiness_gates_are_honoured() {
    use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate};
    let gated = |conditions: Option<Vec<PodCondition>>| {
        let mut p = pod("Always", &["a"], &[]);
        p.spec.as_mut().unwrap().readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "example.com/lb".into(),
        }]);
        p.status = Some(PodStatus {
            conditions,
            ..Default::default()
        });
        p
    };
    let rt = runtime(vec![ctr("a", ContainerState::Running, 0, 1, 0)]);
    let s = status_of(&gated(None), &rt);
    assert_eq!(cond(&s, "ContainersReady"), ("True", None));
    let ready = cond_full(&s, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("ReadinessGatesNotReady"))
    );
    assert_eq!(
        ready.message.as_deref(),
        Some("corresponding condition of pod readiness gate \"example.com/lb\" does not exist.")
    );
    let gate = |status: &str| PodCondition {
        type_: "example.com/lb".into(),
        status: status.into(),
        ..Default::default()
    };
    let s = status_of(&gated(Some(vec![gate("False")])), &rt);
    assert_eq!(
        cond_full(&s, "Ready").message.as_deref(),
        Some("the status of pod readiness gate \"example.com/lb\" is not \"True\", but False")
    );
    let s = status_of(&gated(Some(vec![gate("True")])), &rt);
    assert_eq!(cond(&s, "Ready"), ("True", None));
    // The gate's condition is someone else's: it is kept in the status.
    assert_eq!(cond(&s, "example.com/lb"), ("True", None));
}

#[test]
fn garbage_collected_init_container_of_an_initialized_pod_completed() {
    let p = pod("Always", &["a"], &["init"]);
    let s = status_of(
        &p,
        &runtime(vec![ctr("a", ContainerState::Running, 0, 2, 0)]),
    );
    let init = &s.init_container_statuses.as_ref().unwrap()[0];
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(init.ready);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized"), ("True", None));
}

#[test]
fn vanished_running_container_is_reported_as_ended() {
    let p = pod("Always", &["a"], &[]);
    let before = status_of(
        &p,
        &runtime(vec![ctr("a", ContainerState::Running, 0, 1, 0)]),
    );
    let after = gen_with(&p, &runtime(vec![]), Some(&before), None, false);
    let cs = &after.container_statuses.as_ref().unwrap()[0];
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (last.exit_code, last.reason.as_deref()),
        (137, Some("ContainerStatusUnknown"))
    );
    assert_eq!(cs.restart_count, 1);
    // Stopped, not waiting: the pod stays Running rather than going back to Pending.
    assert_eq!(after.phase.as_deref(), Some("Running"));
}

#[test]
fn reason_and_message_stay_with_their_phase() {
    let p = pod("Always", &["a"], &[]);
    let rt = runtime(vec![ctr("a", ContainerState::Running, 0, 1, 0)]);
    let mut old = status_of(&p, &rt);
    old.reason = Some("Because".into());
    old.message = Some("why".into());
    let s = gen_with(&p, &rt, Some(&old), None, false);
    assert_eq!(s.reason.as_deref(), Some("Because"));
    assert_eq!(s.message.as_deref(), Some("why"));
}

#[test]
fn rejected_pod_has_qos_class_and_start_time() {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut p = pod("Always", &["a"], &[]);
    p.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
        requests: Some([("cpu".to_string(), Quantity("100m".into()))].into()),
        ..Default::default()
    });
    let now = jiff::Timestamp::from_second(1_700_000_123).unwrap();
    let s = super::generate::rejected(
        &p,
        "OutOfpods",
        "Node didn't have enough resource: pods",
        now,
    );
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some("OutOfpods"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was rejected: Node didn't have enough resource: pods")
    );
    assert_eq!(s.qos_class.as_deref(), Some("Burstable"));
    assert!(super::generate::was_rejected(&s));
    assert_eq!(s.start_time.map(|t| t.0.as_second()), Some(1_700_000_123));
    let failed = PodStatus {
        phase: Some("Failed".into()),
        message: Some("container app exited".into()),
        ..Default::default()
    };
    assert!(!super::generate::was_rejected(&failed));
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

fn phase(p: &str) -> PodStatus {
    PodStatus {
        phase: Some(p.into()),
        ..Default::default()
    }
}

#[test]
fn each_change_is_announced_with_the_pods_version_and_no_change_is_silent() {
    use super::StatusChange;
    let m = super::StatusManager::default();
    // No subscriber yet: setting still works.
    assert!(m.set("a", phase("Pending")));
    let mut rx = m.subscribe();
    assert!(m.set("a", phase("Running")));
    assert!(!m.set("a", phase("Running")));
    assert!(m.set("b", phase("Pending")));
    assert!(m.set("a", phase("Succeeded")));
    let got: Vec<StatusChange> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    let change = |uid: &str, version| StatusChange {
        uid: uid.into(),
        version,
    };
    assert_eq!(got, vec![change("a", 2), change("b", 1), change("a", 3)]);
    assert_eq!(m.version("a"), 3);
    // A pod forgotten and added again starts a new life at version 1.
    m.remove("a");
    assert!(m.set("a", phase("Pending")));
    assert_eq!(rx.try_recv().unwrap(), change("a", 1));
}

#[test]
fn a_lagging_subscriber_never_blocks_the_writer_and_learns_it_lagged() {
    use tokio::sync::broadcast::error::TryRecvError;
    let m = super::StatusManager::default();
    let mut slow = m.subscribe();
    let mut fast = m.subscribe();
    let n = super::CHANGES_CAPACITY as u64 + 10;
    for i in 0..n {
        // Each set returns at once although `slow` reads nothing.
        assert!(m.set("a", phase(&format!("P{i}"))));
        assert_eq!(fast.try_recv().unwrap().version, i + 1);
    }
    assert_eq!(slow.try_recv(), Err(TryRecvError::Lagged(10)));
    // After the lag it reads on from the oldest change still held.
    assert_eq!(slow.try_recv().unwrap().version, 11);
    assert_eq!(m.version("a"), n);
}

/// `pod` with the init containers named `s*` made sidecars.
fn sidecar_pod(policy: &str, names: &[&str], inits: &[&str]) -> Pod {
    let mut p = pod(policy, names, inits);
    for c in p.spec.as_mut().unwrap().init_containers.as_mut().unwrap() {
        if c.name.starts_with('s') {
            c.restart_policy = Some("Always".into());
        }
    }
    p
}

fn init_status<'a>(
    s: &'a PodStatus,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    s.init_container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == name)
        .unwrap()
}

#[test]
fn a_running_sidecar_is_started_and_ready_and_initializes_the_pod() {
    let p = sidecar_pod("Always", &["a"], &["s1", "i1"]);
    // Only the sidecar runs: the pod is still initializing (i1 pending).
    let s = status_of(
        &p,
        &runtime(vec![init_ctr("s1", ContainerState::Running, 0, 1)]),
    );
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let side = init_status(&s, "s1");
    assert_eq!((side.started, side.ready), (Some(true), true));
    let c = cond_full(&s, "Initialized");
    assert_eq!(c.status, "False");
    assert_eq!(
        c.message.as_deref(),
        Some("containers with incomplete status: [i1]")
    );
    // i1 done, the app runs: Running, initialized, and the sidecar counts for readiness.
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 3, 0),
        init_ctr("i1", ContainerState::Exited, 0, 2),
        init_ctr("s1", ContainerState::Running, 0, 1),
    ]);
    let s = status_of(&p, &rt);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Initialized").0, "True");
    assert_eq!(cond(&s, "ContainersReady").0, "True");
    // The sidecar exits: ContainersReady names it, the pod stays Running.
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 3, 0),
        init_ctr("i1", ContainerState::Exited, 0, 2),
        init_ctr("s1", ContainerState::Exited, 1, 1),
    ]);
    let s = status_of(&p, &rt);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let side = init_status(&s, "s1");
    assert_eq!((side.started, side.ready), (Some(false), false));
    let c = cond_full(&s, "ContainersReady");
    assert_eq!(
        c.message.as_deref(),
        Some("containers with unready status: [s1]")
    );
}

#[test]
fn a_sidecar_not_yet_started_keeps_the_pod_pending() {
    let p = sidecar_pod("Always", &["a"], &["s1"]);
    let s = status_of(&p, &runtime(vec![]));
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(cond(&s, "Initialized").0, "False");
}

#[test]
fn sidecars_do_not_decide_the_phase_of_a_finished_pod() {
    for (policy, exit, phase) in [
        ("OnFailure", 0, "Succeeded"),
        ("Never", 0, "Succeeded"),
        ("Never", 1, "Failed"),
    ] {
        let p = sidecar_pod(policy, &["a"], &["s1"]);
        // Stopped by the kill (137): a sidecar's exit does not count.
        let rt = runtime(vec![
            ctr("a", ContainerState::Exited, exit, 2, 0),
            init_ctr("s1", ContainerState::Exited, 137, 1),
        ]);
        let s = status_of(&p, &rt);
        assert_eq!(s.phase.as_deref(), Some(phase), "{policy} exit {exit}");
        // Still running beside a finished app: Running until the kill.
        let rt = runtime(vec![
            ctr("a", ContainerState::Exited, exit, 2, 0),
            init_ctr("s1", ContainerState::Running, 0, 1),
        ]);
        let s = status_of(&p, &rt);
        assert_eq!(s.phase.as_deref(), Some("Running"), "{policy} exit {exit}");
    }
}

#[test]
fn a_sidecar_in_back_off_waits_with_its_reason_under_any_policy() {
    let p = sidecar_pod("Never", &["a"], &["s1"]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 2, 0),
        init_ctr("s1", ContainerState::Exited, 0, 1),
    ]);
    let s = gen_with(
        &p,
        &rt,
        None,
        Some((WaitingReason::CrashLoopBackOff, "back-off 10s")),
        false,
    );
    let side = init_status(&s, "s1");
    let st = side.state.as_ref().unwrap();
    assert_eq!(
        st.waiting.as_ref().unwrap().reason.as_deref(),
        Some("CrashLoopBackOff")
    );
    assert!(side.last_state.as_ref().unwrap().terminated.is_some());
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn written_reports_the_oldest_unwritten_change_once() {
    let m = super::StatusManager::default();
    assert_eq!(m.written("u"), None);
    let mut st = PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    };
    m.set("u", st.clone());
    std::thread::sleep(std::time::Duration::from_millis(20));
    st.phase = Some("Running".into());
    m.set("u", st);
    let waited = m.written("u").expect("a change was pending");
    assert!(waited >= std::time::Duration::from_millis(20), "{waited:?}");
    assert_eq!(m.written("u"), None, "taken once");
}

/// A static pod's first status after a restart takes the mirror's times: unchanged
/// conditions keep theirs, changed ones keep the new one, the start time stays.
#[test]
fn the_mirrors_times_are_kept_for_unchanged_conditions() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let p = pod("Always", &["a"], &[]);
    let rt = runtime(vec![ctr("a", ContainerState::Running, 0, 1, 0)]);
    let mut fresh = status_of(&p, &rt);
    let mut mirror = fresh.clone();
    let then = Time(jiff::Timestamp::from_second(1_000).unwrap());
    for c in mirror.conditions.iter_mut().flatten() {
        c.last_transition_time = Some(then.clone());
        if c.type_ == "Ready" {
            c.status = "False".into();
        }
    }
    mirror.start_time = Some(then.clone());
    super::generate::keep_times_from(&mut fresh, &mirror);
    assert_eq!(fresh.start_time, Some(then.clone()));
    for c in fresh.conditions.iter().flatten() {
        if c.type_ == "Ready" {
            assert_ne!(c.last_transition_time, Some(then.clone()), "Ready changed");
        } else {
            assert_eq!(c.last_transition_time, Some(then.clone()), "{}", c.type_);
        }
    }
}

/// The status writer's adjustment never overwrites a newer sync.
#[test]
fn a_replacement_applies_only_to_the_status_it_was_made_from() {
    let m = super::StatusManager::default();
    let first = PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    };
    let newer = PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    };
    m.set("u", first.clone());
    m.set("u", newer.clone());
    let adjusted = PodStatus {
        message: Some("adjusted".into()),
        ..first.clone()
    };
    assert!(!m.replace_if_unchanged("u", &first, adjusted.clone()));
    assert_eq!(m.get("u"), Some(newer.clone()));
    assert!(m.replace_if_unchanged("u", &newer, adjusted.clone()));
    assert_eq!(m.get("u"), Some(adjusted));
}

#[test]
fn ephemeral_containers_get_their_own_list_and_move_neither_phase_nor_readiness() {
    let mut p = pod("Never", &["a"], &[]);
    let ec = |n: &str| k8s_openapi::api::core::v1::EphemeralContainer {
        name: n.into(),
        image: Some("busybox:1".into()),
        ..Default::default()
    };
    p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![ec("shell"), ec("debug")]);
    let rt = runtime(vec![
        ctr("a", ContainerState::Running, 0, 1, 0),
        ctr("debug", ContainerState::Exited, 1, 2, 0),
    ]);
    let s = status_of(&p, &rt);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready").0, "True");
    let eph = s.ephemeral_container_statuses.as_ref().unwrap();
    let names: Vec<&str> = eph.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["debug", "shell"], "sorted by name");
    let debug = &eph[0];
    let t = debug.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
    assert_eq!(debug.container_id.as_deref(), Some("containerd://debug-2"));
    assert!(!debug.ready && debug.started.is_none());
    let waiting = eph[1].state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    // Neither list holds the other's containers; a pod without any has no list.
    assert_eq!(s.container_statuses.as_ref().unwrap().len(), 1);
    let plain = status_of(&pod("Never", &["a"], &[]), &rt);
    assert!(plain.ephemeral_container_statuses.is_none());
}
