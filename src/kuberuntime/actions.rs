//! Deciding what to do to bring a pod's runtime state to its spec (kubelet's
//! `computePodActions`): whether the sandbox must be (re)created, which init container
//! runs next, which containers start, which are killed. Pure, so it is unit tested.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::labels::container_hash;
use super::sidecar::{Startup, StartupGate, is_sidecar};
use super::types::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::pod::ProbeKind;
use crate::pod::is_host_network;
use crate::pod::{
    RestartPolicy, TerminatedReason, container_should_restart, restarts_without_exit_code,
};

/// What one sync must do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodActions {
    /// Kill every container and sandbox of the pod first.
    pub kill_pod: bool,
    /// Create a new sandbox (with `attempt`).
    pub create_sandbox: bool,
    /// The sandbox to use when not creating one.
    pub sandbox_id: Option<String>,
    /// Attempt number of the sandbox to create.
    pub attempt: u32,
    /// Indices into `spec.initContainers` to start, in spec order: the next init
    /// container, and sidecars that must run again.
    pub start_init: Vec<usize>,
    /// Indices into `spec.containers` to start.
    pub start: Vec<usize>,
    /// Indices into `spec.ephemeralContainers` to start: those never started yet.
    pub start_ephemeral: Vec<usize>,
    /// Running containers to kill: (id, name, why).
    pub kill: Vec<(String, String, String)>,
    /// Kills a probe asked for with the probe's own grace period: (id, seconds).
    pub probe_grace: Vec<(String, i64)>,
    /// Running containers resized in place, and whether the pod cgroup follows
    /// (kubelet's `ContainersToUpdate` and `UpdatePodResources`).
    pub resize: super::resize::ResizeActions,
}

/// kubelet's `podActions.String()`: one line of named fields, the containers to kill
/// by name with the reason.
impl std::fmt::Display for PodActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[usize]| {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let kill = self
            .kill
            .iter()
            .map(|(_, name, why)| format!("{name}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        write!(
            f,
            "KillPod: {}, CreateSandbox: {}, SandboxID: {}, Attempt: {}, InitContainersToStart: [{}], ContainersToStart: [{}], EphemeralContainersToStart: [{}], ContainersToKill: [{kill}]",
            self.kill_pod,
            self.create_sandbox,
            self.sandbox_id.as_deref().unwrap_or(""),
            self.attempt,
            list(&self.start_init),
            list(&self.start),
            list(&self.start_ephemeral),
        )?;
        if self.resize.is_empty() {
            return Ok(());
        }
        let names = |v: &[super::resize::ContainerUpdate]| {
            v.iter()
                .map(|u| u.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        write!(
            f,
            ", ContainersToUpdate: [memory: [{}] cpu: [{}]], UpdatePodResources: {}",
            names(&self.resize.memory),
            names(&self.resize.cpu),
            self.resize.update_pod
        )
    }
}

impl PodActions {
    /// True when the sync has nothing to do.
    pub(crate) fn is_noop(&self) -> bool {
        !self.kill_pod
            && !self.create_sandbox
            && self.start_init.is_empty()
            && self.start.is_empty()
            && self.start_ephemeral.is_empty()
            && self.kill.is_empty()
            && self.resize.is_empty()
    }
}

/// Whether container `c`, not running now, should be (re)started (kubelet's
/// `ShouldContainerBeRestarted`): one that exited asks its restart rules and
/// policy, else the pod's.
pub(crate) fn should_restart(pod: &Pod, c: &Container, latest: Option<&ContainerStatus>) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = latest else {
        return true;
    };
    match status.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => pod
            .spec
            .as_ref()
            .is_some_and(|spec| container_should_restart(c, spec, status.exit_code)),
    }
}

/// Whether the pod needs a new sandbox, and with which attempt number; otherwise the
/// sandbox to keep using (kubelet's `podSandboxChanged`).
fn sandbox_changed(pod: &Pod, status: &PodRuntimeStatus) -> (bool, u32, Option<String>) {
    let Some(newest) = status.sandboxes.first() else {
        return (true, 0, None);
    };
    let next = newest.attempt + 1;
    let ready = status.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 || !newest.ready {
        return (true, next, None);
    }
    if newest.host_network != is_host_network(pod) {
        return (true, next, None);
    }
    if !newest.host_network && newest.ips.is_empty() {
        return (true, next, None);
    }
    (false, newest.attempt, Some(newest.id.clone()))
}

/// kubelet's `isInitContainerFailed`.
fn init_failed(s: &ContainerStatus) -> bool {
    s.reason == TerminatedReason::OomKilled.as_str()
        || (s.state == ContainerState::Exited && s.exit_code != 0)
        || s.state == ContainerState::Unknown
}

/// kubelet's `computeInitContainerActions`: adds the init containers to start (the
/// next one in order, and any sidecar that must run again), or sets `kill_pod` when a
/// regular one failed and will not run again (its exit code against its restart
/// rules and policy, else the pod's; one in an unknown state has no exit code, so
/// only the policy decides); returns whether the pod is
/// initialized. A sidecar counts as done once it runs and `gate` says it started.
///
/// Once an app container was created or runs, the pod was initialized in the past and
/// no regular init container is ever run again, even when its record was
/// garbage-collected or looks failed now; sidecars are kept running. Otherwise the scan
/// goes backwards and trusts the last init container the runtime still knows: the ones
/// before it are done, even if their records are gone.
fn init_container_actions(
    pod: &Pod,
    status: &PodRuntimeStatus,
    gate: &dyn StartupGate,
    failed_probe: &dyn Fn(&str) -> Option<ProbeKind>,
    actions: &mut PodActions,
) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return true;
    }
    // Exited app containers do not count: after a reboot every container has exited
    // and the new sandbox must be initialized again.
    let mut initialized = spec.containers.iter().any(|c| {
        status
            .latest(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously = initialized;
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let mut start = Vec::new();
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_sidecar(c);
        let Some(s) = status.latest(&c.name) else {
            // A sidecar of an initialized pod whose record is gone runs again.
            if previously && sidecar {
                start.push(i);
            }
            continue;
        };
        if previously && !sidecar {
            continue;
        }
        match s.state {
            // Created but never started (the start failed): start it again.
            ContainerState::Created => start.push(i),
            // A regular one is waited for until it finishes.
            ContainerState::Running if !sidecar => {}
            ContainerState::Running => match gate.startup(uid, c, s) {
                Startup::Pending => {}
                Startup::Failed => {
                    kill_for_probe(actions, c, s, ProbeKind::Startup);
                    start.push(i);
                }
                Startup::Succeeded => {
                    if i + 1 == inits.len() {
                        initialized = true;
                    } else if !previously {
                        start.push(i + 1);
                    }
                    if s.hash != container_hash(c) {
                        actions.kill.push((
                            s.id.clone(),
                            c.name.clone(),
                            format!("Init container {} definition changed", c.name),
                        ));
                        start.push(i);
                    } else if failed_probe(&s.id) == Some(ProbeKind::Liveness) {
                        // kubelet's computeInitContainerActions: a sidecar that fails
                        // its liveness probe is restarted, whatever the pod's policy.
                        kill_for_probe(actions, c, s, ProbeKind::Liveness);
                        start.push(i);
                    }
                }
            },
            // A sidecar that exited runs again (with back-off).
            ContainerState::Exited if sidecar => start.push(i),
            ContainerState::Exited if init_failed(s) => {
                if !container_should_restart(c, spec, s.exit_code) {
                    actions.kill_pod = true;
                    actions.start_init.clear();
                    return false;
                }
                start.push(i);
            }
            ContainerState::Exited => {
                if i + 1 == inits.len() {
                    initialized = true;
                } else {
                    start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restarts_without_exit_code(c, spec) {
                    actions.kill_pod = true;
                    actions.start_init.clear();
                    return false;
                }
                actions.kill.push((
                    s.id.clone(),
                    s.name.clone(),
                    "Init container is in \"unknown\" state, try killing it before restart".into(),
                ));
                start.push(i);
            }
        }
        previously = true;
    }
    if !previously {
        start.push(0);
    }
    // Collected backwards; started in spec order.
    start.reverse();
    start.dedup();
    actions.start_init = start;
    initialized
}

/// Kills a sidecar that failed `kind`, with kubelet's message and the probe's own
/// grace period if it sets one.
fn kill_for_probe(actions: &mut PodActions, c: &Container, s: &ContainerStatus, kind: ProbeKind) {
    if let Some(g) = kind.of(c).and_then(|p| p.termination_grace_period_seconds) {
        actions.probe_grace.push((s.id.clone(), g));
    }
    actions.kill.push((
        s.id.clone(),
        c.name.clone(),
        format!(
            "Init container {} failed {} probe",
            c.name,
            kind.as_str().to_lowercase()
        ),
    ));
}

/// Computes the actions for one sync of `pod` given what the runtime has.
#[cfg(test)]
pub(crate) fn compute_pod_actions(
    pod: &Pod,
    status: &PodRuntimeStatus,
    gate: &dyn StartupGate,
) -> PodActions {
    compute_pod_actions_probed(pod, status, gate, &|_| None)
}

/// `compute_pod_actions`, with the liveness or startup probe that failed a running
/// container (by runtime ID): that container is killed, and restarted unless the
/// restart policy is Never (kubelet's `computePodActions`). `gate` says whether a
/// sidecar has started (its startup probe).
pub(crate) fn compute_pod_actions_probed(
    pod: &Pod,
    status: &PodRuntimeStatus,
    gate: &dyn StartupGate,
    failed_probe: &dyn Fn(&str) -> Option<ProbeKind>,
) -> PodActions {
    let Some(spec) = pod.spec.as_ref() else {
        return PodActions::default();
    };
    let policy = RestartPolicy::of(pod);
    let (create_sandbox, attempt, sandbox_id) = sandbox_changed(pod, status);
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    let mut actions = PodActions {
        create_sandbox,
        attempt,
        sandbox_id,
        ..Default::default()
    };

    if create_sandbox {
        // A pod that must never restart and already ran stays down.
        if policy == RestartPolicy::Never && attempt > 0 && !status.containers.is_empty() {
            actions.create_sandbox = false;
            actions.kill_pod = status.sandboxes.iter().any(|s| s.ready)
                || status.running_containers().next().is_some();
            return actions;
        }
        actions.kill_pod = !status.sandboxes.is_empty();
        if !inits.is_empty() {
            actions.start_init = vec![0];
            return actions;
        }
        // A container that exited and may not run again stays exited in the new
        // sandbox too (under OnFailure: one that succeeded).
        actions.start = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                status.latest(&c.name).is_none_or(|s| {
                    s.state != ContainerState::Exited
                        || container_should_restart(c, spec, s.exit_code)
                })
            })
            .map(|(i, _)| i)
            .collect();
        return actions;
    }

    let ephemeral = spec.ephemeral_containers.as_deref().unwrap_or_default();
    // Running containers that the spec no longer has are killed.
    for running in status.running_containers() {
        let known = spec.containers.iter().any(|c| c.name == running.name)
            || inits.iter().any(|c| c.name == running.name)
            || ephemeral.iter().any(|c| c.name == running.name);
        if !known {
            actions.kill.push((
                running.id.clone(),
                running.name.clone(),
                "Container is not in the pod spec".into(),
            ));
        }
    }

    // Ephemeral containers start once, even before initialization is done, and are
    // never restarted: one the runtime has any record of is left as it is.
    actions.start_ephemeral = (ephemeral.iter().enumerate())
        .filter(|(_, c)| status.latest(&c.name).is_none())
        .map(|(i, _)| i)
        .collect();

    if !init_container_actions(pod, status, gate, failed_probe, &mut actions) || actions.kill_pod {
        // Initialization failed or is still in progress: app containers wait.
        return actions;
    }

    let mut keep = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let latest = status.latest(&c.name);
        match latest {
            Some(s) if s.state == ContainerState::Running => {
                if let Some(kind) = failed_probe(&s.id) {
                    // A running container has no exit code for the rules to read.
                    let restart = restarts_without_exit_code(c, spec);
                    let mut why = format!(
                        "Container {} failed {} probe",
                        c.name,
                        kind.as_str().to_lowercase()
                    );
                    if restart {
                        why.push_str(", will be restarted");
                        actions.start.push(i);
                    }
                    if let Some(g) = kind.of(c).and_then(|p| p.termination_grace_period_seconds) {
                        actions.probe_grace.push((s.id.clone(), g));
                    }
                    actions.kill.push((s.id.clone(), c.name.clone(), why));
                } else if s.hash != container_hash(c) {
                    actions.kill.push((
                        s.id.clone(),
                        c.name.clone(),
                        "Container spec hash changed, will be restarted".into(),
                    ));
                    actions.start.push(i);
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_restart(pod, c, latest) {
                    actions.start.push(i);
                }
            }
        }
    }
    if keep == 0 && actions.start.is_empty() {
        // Nothing should run any more: the pod is done. Sidecars do not keep it
        // alive, so none is restarted.
        actions.kill_pod = true;
        actions.kill.clear();
        actions.start_init.clear();
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_as_one_line_of_named_fields() {
        let a = PodActions {
            create_sandbox: true,
            attempt: 1,
            start: vec![0, 2],
            kill: vec![("abc".into(), "main".into(), "liveness probe failed".into())],
            ..PodActions::default()
        };
        assert_eq!(
            a.to_string(),
            "KillPod: false, CreateSandbox: true, SandboxID: , Attempt: 1, InitContainersToStart: [], ContainersToStart: [0 2], EphemeralContainersToStart: [], ContainersToKill: [main: liveness probe failed]"
        );
    }
    use crate::kuberuntime::sidecar::RunningIsStarted;
    use crate::kuberuntime::types::SandboxStatus;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn pod(policy: &str, names: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: names
                    .iter()
                    .map(|n| Container {
                        name: n.to_string(),
                        image: Some("img:1".into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sandbox(id: &str, ready: bool, attempt: u32) -> SandboxStatus {
        SandboxStatus {
            id: id.into(),
            ready,
            attempt,
            created_at: i64::from(attempt),
            ips: vec!["10.0.0.2".into()],
            host_network: false,
        }
    }

    fn container(pod: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        let spec = pod.spec.as_ref().unwrap();
        let c = spec.containers.iter().find(|c| c.name == name).unwrap();
        ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: exit,
            image: String::new(),
            image_ref: String::new(),
            reason: String::new(),
            message: String::new(),
            hash: container_hash(c),
            restart_count: 0,
            is_init: false,
            user: None,
            resources: None,
        }
    }

    fn status(sandboxes: Vec<SandboxStatus>, containers: Vec<ContainerStatus>) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes,
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_everything() {
        let p = pod("Always", &["a", "b"]);
        let a = compute_pod_actions(&p, &PodRuntimeStatus::default(), &RunningIsStarted);
        assert!(a.create_sandbox && !a.kill_pod);
        assert_eq!(a.attempt, 0);
        assert_eq!(a.start, vec![0, 1]);
    }

    #[test]
    fn running_pod_is_left_alone() {
        let p = pod("Always", &["a"]);
        let s = status(
            vec![sandbox("s1", true, 0)],
            vec![container(&p, "a", ContainerState::Running, 0)],
        );
        assert!(compute_pod_actions(&p, &s, &RunningIsStarted).is_noop());
    }

    #[test]
    fn a_failed_liveness_or_startup_probe_kills_with_kubelets_message_and_the_probe_grace() {
        for (policy, kind, restart) in [
            ("Always", ProbeKind::Liveness, true),
            ("OnFailure", ProbeKind::Startup, true),
            ("Never", ProbeKind::Liveness, false),
        ] {
            let mut p = pod(policy, &["a", "b"]);
            let probe = k8s_openapi::api::core::v1::Probe {
                termination_grace_period_seconds: Some(4),
                ..Default::default()
            };
            let c = &mut p.spec.as_mut().unwrap().containers[0];
            c.liveness_probe = Some(probe.clone());
            c.startup_probe = Some(probe);
            let s = status(
                vec![sandbox("s1", true, 0)],
                vec![
                    container(&p, "a", ContainerState::Running, 0),
                    container(&p, "b", ContainerState::Running, 0),
                ],
            );
            let failed = |id: &str| (id == "id-a").then_some(kind);
            let a = compute_pod_actions_probed(&p, &s, &RunningIsStarted, &failed);
            let mut why = format!("Container a failed {} probe", kind.as_str().to_lowercase());
            if restart {
                why.push_str(", will be restarted");
            }
            assert_eq!(a.kill, vec![("id-a".into(), "a".into(), why)], "{policy}");
            assert_eq!(a.probe_grace, vec![("id-a".to_string(), 4)]);
            assert_eq!(a.start, if restart { vec![0] } else { vec![] }, "{policy}");
            assert!(!a.kill_pod, "b still runs");
        }
    }

    #[test]
    fn restart_policy_decides_restarts() {
        for (policy, exit, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 1, false),
            ("Never", 0, false),
        ] {
            let p = pod(policy, &["a", "b"]);
            let s = status(
                vec![sandbox("s1", true, 0)],
                vec![
                    container(&p, "a", ContainerState::Exited, exit),
                    container(&p, "b", ContainerState::Running, 0),
                ],
            );
            let a = compute_pod_actions(&p, &s, &RunningIsStarted);
            assert_eq!(a.start == vec![0], restart, "{policy} exit {exit}");
        }
    }

    /// Gives container `i` of `p` its own restart policy and a rule restarting it on
    /// the exit codes `codes`.
    fn own_policy(mut p: Pod, i: usize, policy: &str, codes: &[i32], init: bool) -> Pod {
        let spec = p.spec.as_mut().unwrap();
        let c = if init {
            &mut spec.init_containers.as_mut().unwrap()[i]
        } else {
            &mut spec.containers[i]
        };
        c.restart_policy = Some(policy.into());
        c.restart_policy_rules = (!codes.is_empty()).then(|| vec![crate::pod::restart_on(codes)]);
        p
    }

    #[test]
    fn a_containers_own_rules_and_policy_decide_its_restart() {
        // (pod policy, the container's policy, restart codes, exit code, restart)
        for (policy, own, codes, exit, restart) in [
            ("Never", "Never", &[42][..], 42, true),
            ("Never", "Never", &[42][..], 0, false),
            ("Never", "Never", &[42][..], 1, false),
            ("Always", "Never", &[][..], 0, false),
            ("Always", "OnFailure", &[][..], 0, false),
            ("Never", "Always", &[][..], 0, true),
        ] {
            let p = own_policy(pod(policy, &["a", "b"]), 0, own, codes, false);
            let s = status(
                vec![sandbox("s1", true, 0)],
                vec![
                    container(&p, "a", ContainerState::Exited, exit),
                    container(&p, "b", ContainerState::Running, 0),
                ],
            );
            let a = compute_pod_actions(&p, &s, &RunningIsStarted);
            assert_eq!(
                a.start == vec![0],
                restart,
                "{policy}/{own} {codes:?} exit {exit}"
            );
        }
        // A failed probe has no exit code: the container's policy alone decides.
        let p = own_policy(pod("Always", &["a", "b"]), 0, "Never", &[137], false);
        let s = status(
            vec![sandbox("s1", true, 0)],
            vec![
                container(&p, "a", ContainerState::Running, 0),
                container(&p, "b", ContainerState::Running, 0),
            ],
        );
        let failed = |id: &str| (id == "id-a").then_some(ProbeKind::Liveness);
        let a = compute_pod_actions_probed(&p, &s, &RunningIsStarted, &failed);
        assert_eq!(a.kill.len(), 1);
        assert!(a.start.is_empty(), "a Never container is not restarted");
    }

    #[test]
    fn a_new_sandbox_starts_only_the_containers_that_may_run_again() {
        let p = own_policy(pod("Always", &["a", "b"]), 0, "Never", &[], false);
        let s = status(
            vec![sandbox("s1", false, 0)],
            vec![
                container(&p, "a", ContainerState::Exited, 0),
                container(&p, "b", ContainerState::Exited, 0),
            ],
        );
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(a.create_sandbox);
        assert_eq!(a.start, vec![1]);
    }

    #[test]
    fn an_init_containers_own_rules_decide_whether_its_failure_ends_the_pod() {
        let p = own_policy(
            pod_with_inits("Always", &["i1"], &["a"]),
            0,
            "Never",
            &[],
            true,
        );
        let failed = ready_sandbox(vec![init("i1", ContainerState::Exited, 2)]);
        assert!(compute_pod_actions(&p, &failed, &RunningIsStarted).kill_pod);
        let p = own_policy(
            pod_with_inits("Never", &["i1"], &["a"]),
            0,
            "Never",
            &[2],
            true,
        );
        let a = compute_pod_actions(&p, &failed, &RunningIsStarted);
        assert!(!a.kill_pod);
        assert_eq!(a.start_init, vec![0]);
        let p = own_policy(
            pod_with_inits("Never", &["i1"], &["a"]),
            0,
            "OnFailure",
            &[],
            true,
        );
        let unknown = ready_sandbox(vec![init("i1", ContainerState::Unknown, 0)]);
        assert!(!compute_pod_actions(&p, &unknown, &RunningIsStarted).kill_pod);
    }

    #[test]
    fn finished_pod_is_killed() {
        let p = pod("Never", &["a"]);
        let s = status(
            vec![sandbox("s1", true, 0)],
            vec![container(&p, "a", ContainerState::Exited, 0)],
        );
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(a.kill_pod && a.start.is_empty() && !a.create_sandbox);
    }

    #[test]
    fn dead_sandbox_is_recreated_with_next_attempt() {
        let p = pod("Always", &["a"]);
        let s = status(
            vec![sandbox("s2", false, 1)],
            vec![container(&p, "a", ContainerState::Exited, 137)],
        );
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 2);
        assert_eq!(a.start, vec![0]);
    }

    #[test]
    fn never_pod_that_ran_is_not_recreated() {
        let p = pod("Never", &["a"]);
        let s = status(
            vec![sandbox("s1", false, 0)],
            vec![container(&p, "a", ContainerState::Exited, 0)],
        );
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(!a.create_sandbox && a.start.is_empty());
    }

    #[test]
    fn changed_image_restarts_running_container() {
        let p = pod("Always", &["a"]);
        let mut c = container(&p, "a", ContainerState::Running, 0);
        c.hash ^= 1;
        let s = status(vec![sandbox("s1", true, 0)], vec![c]);
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert_eq!(a.kill.len(), 1);
        assert_eq!(a.start, vec![0]);
    }

    #[test]
    fn host_network_toggle_recreates_sandbox() {
        let p = pod("Always", &["a"]);
        let mut sb = sandbox("s1", true, 0);
        sb.host_network = true;
        let s = status(
            vec![sb],
            vec![container(&p, "a", ContainerState::Running, 0)],
        );
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 1);
    }

    fn pod_with_inits(policy: &str, inits: &[&str], names: &[&str]) -> Pod {
        let mut p = pod(policy, names);
        p.spec.as_mut().unwrap().init_containers = Some(
            inits
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    image: Some("img:1".into()),
                    ..Default::default()
                })
                .collect(),
        );
        p
    }

    fn init(name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        ContainerStatus {
            exit_code: exit,
            is_init: true,
            user: None,
            ..ContainerStatus::for_test(&format!("id-{name}"), name, state)
        }
    }

    fn ready_sandbox(containers: Vec<ContainerStatus>) -> PodRuntimeStatus {
        status(vec![sandbox("s1", true, 0)], containers)
    }

    #[test]
    fn init_containers_run_in_order_each_to_success() {
        let p = pod_with_inits("Always", &["i1", "i2"], &["a"]);
        let a = compute_pod_actions(&p, &ready_sandbox(vec![]), &RunningIsStarted);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![0], vec![]));
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![init("i1", ContainerState::Running, 0)]),
            &RunningIsStarted,
        );
        assert!(a.is_noop(), "a running init container is waited for: {a:?}");
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![init("i1", ContainerState::Exited, 0)]),
            &RunningIsStarted,
        );
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![1], vec![]));
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![
                init("i2", ContainerState::Exited, 0),
                init("i1", ContainerState::Exited, 0),
            ]),
            &RunningIsStarted,
        );
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![], vec![0]));
    }

    fn with_ephemeral(mut p: Pod, names: &[&str]) -> Pod {
        let spec = p.spec.as_mut().unwrap();
        spec.ephemeral_containers = Some(
            names
                .iter()
                .map(|n| k8s_openapi::api::core::v1::EphemeralContainer {
                    name: n.to_string(),
                    image: Some("busybox:1".into()),
                    target_container_name: Some("a".into()),
                    ..Default::default()
                })
                .collect(),
        );
        p
    }

    #[test]
    fn ephemeral_containers_start_once_and_are_never_killed_or_restarted() {
        let p = with_ephemeral(pod("Always", &["a"]), &["debug", "shell"]);
        let running_a = || container(&pod("Always", &["a"]), "a", ContainerState::Running, 0);
        let eph = |name: &str, state| ContainerStatus {
            is_init: false,
            ..ContainerStatus::for_test(&format!("id-{name}"), name, state)
        };
        // Added to a running pod: both start, nothing else happens.
        let a = compute_pod_actions(&p, &ready_sandbox(vec![running_a()]), &RunningIsStarted);
        assert_eq!(a.start_ephemeral, vec![0, 1]);
        assert!(
            a.start.is_empty() && a.kill.is_empty() && !a.kill_pod,
            "{a}"
        );
        assert!(
            a.to_string().contains("EphemeralContainersToStart: [0 1]"),
            "{a}"
        );
        // Running: kept (not "not in the pod spec"); exited: left as it is.
        let s = ready_sandbox(vec![
            running_a(),
            eph("debug", ContainerState::Running),
            eph("shell", ContainerState::Exited),
        ]);
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert!(a.is_noop(), "{a}");
        // Before initialization is done, they start too.
        let p = with_ephemeral(pod_with_inits("Always", &["i1"], &["a"]), &["debug"]);
        let s = ready_sandbox(vec![init("i1", ContainerState::Running, 0)]);
        let a = compute_pod_actions(&p, &s, &RunningIsStarted);
        assert_eq!(
            (a.start_ephemeral.clone(), a.start_init.clone()),
            (vec![0], vec![])
        );
        // A new sandbox starts none of them: they belonged to the old one.
        let a = compute_pod_actions(&p, &PodRuntimeStatus::default(), &RunningIsStarted);
        assert!(a.create_sandbox && a.start_ephemeral.is_empty(), "{a}");
    }

    #[test]
    fn init_scan_trusts_the_last_known_init_container() {
        // i1's record was garbage-collected; i2 succeeded: i1 is not run again.
        let p = pod_with_inits("Always", &["i1", "i2"], &["a"]);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![init("i2", ContainerState::Exited, 0)]),
            &RunningIsStarted,
        );
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![], vec![0]));
    }

    #[test]
    fn init_never_reruns_once_an_app_container_started() {
        let p = pod_with_inits("Always", &["i1", "i2"], &["a"]);
        let app = container(&p, "a", ContainerState::Running, 0);
        // Every init record garbage-collected.
        let a = compute_pod_actions(&p, &ready_sandbox(vec![app.clone()]), &RunningIsStarted);
        assert!(a.is_noop(), "{a:?}");
        // An init container reads as failed later on (exit 1, or unknown).
        for bad in [
            init("i2", ContainerState::Exited, 1),
            init("i2", ContainerState::Unknown, 0),
        ] {
            let a = compute_pod_actions(
                &p,
                &ready_sandbox(vec![app.clone(), bad.clone()]),
                &RunningIsStarted,
            );
            assert!(a.is_noop(), "{bad:?}: {a:?}");
        }
        // Even under restartPolicy Never, a late init failure does not kill the pod.
        let p = pod_with_inits("Never", &["i1"], &["a"]);
        let app = container(&p, "a", ContainerState::Running, 0);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![app, init("i1", ContainerState::Exited, 1)]),
            &RunningIsStarted,
        );
        assert!(a.is_noop(), "{a:?}");
        // A created (not yet started) app container counts as started too.
        let p = pod_with_inits("Always", &["i1"], &["a"]);
        let app = container(&p, "a", ContainerState::Created, 0);
        let a = compute_pod_actions(&p, &ready_sandbox(vec![app]), &RunningIsStarted);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![], vec![0]));
    }

    #[test]
    fn exited_app_containers_do_not_count_as_initialized() {
        // kubelet's reboot case: everything exited and the inits are gone, so the
        // pod is initialized again from the first init container.
        let p = pod_with_inits("Always", &["i1"], &["a"]);
        let app = container(&p, "a", ContainerState::Exited, 0);
        let a = compute_pod_actions(&p, &ready_sandbox(vec![app]), &RunningIsStarted);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![0], vec![]));
    }

    #[test]
    fn failed_init_container_by_restart_policy() {
        for (policy, kill_pod, next) in [
            ("Always", false, vec![0]),
            ("OnFailure", false, vec![0]),
            ("Never", true, vec![]),
        ] {
            let p = pod_with_inits(policy, &["i1"], &["a"]);
            let a = compute_pod_actions(
                &p,
                &ready_sandbox(vec![init("i1", ContainerState::Exited, 2)]),
                &RunningIsStarted,
            );
            assert_eq!(
                (a.kill_pod, a.start_init.clone()),
                (kill_pod, next),
                "{policy}"
            );
            assert!(a.start.is_empty());
        }
        // OOMKilled counts as failed even with exit code 0.
        let p = pod_with_inits("Never", &["i1"], &["a"]);
        let mut oom = init("i1", ContainerState::Exited, 0);
        oom.reason = "OOMKilled".into();
        assert!(compute_pod_actions(&p, &ready_sandbox(vec![oom]), &RunningIsStarted).kill_pod);
    }

    #[test]
    fn unknown_or_created_init_container_is_restarted() {
        let p = pod_with_inits("Always", &["i1"], &["a"]);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![init("i1", ContainerState::Unknown, 0)]),
            &RunningIsStarted,
        );
        assert_eq!(a.start_init, vec![0]);
        assert_eq!(a.kill.len(), 1);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![init("i1", ContainerState::Created, 0)]),
            &RunningIsStarted,
        );
        assert_eq!(a.start_init, vec![0]);
        assert!(a.kill.is_empty());
    }

    /// A pod with sidecars `s*` and regular init containers `i*` in the given order.
    fn pod_with_sidecars(policy: &str, inits: &[&str], names: &[&str]) -> Pod {
        let mut p = pod_with_inits(policy, inits, names);
        for c in p.spec.as_mut().unwrap().init_containers.as_mut().unwrap() {
            if c.name.starts_with('s') {
                c.restart_policy = Some("Always".into());
            }
        }
        p
    }

    fn hashed(p: &Pod, name: &str, state: ContainerState, exit: i32) -> ContainerStatus {
        let spec = p.spec.as_ref().unwrap();
        let c = spec
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .unwrap();
        ContainerStatus {
            hash: container_hash(c),
            ..init(name, state, exit)
        }
    }

    /// A gate with a fixed answer per container name (Succeeded otherwise).
    struct Gate(Vec<(&'static str, Startup)>);
    impl StartupGate for Gate {
        fn startup(&self, _: &str, spec: &Container, _: &ContainerStatus) -> Startup {
            self.0
                .iter()
                .find(|(n, _)| *n == spec.name)
                .map_or(Startup::Succeeded, |(_, s)| *s)
        }
    }

    #[test]
    fn sidecar_lets_the_next_init_container_start_once_it_started() {
        let p = pod_with_sidecars("Always", &["s1", "i1"], &["a"]);
        let running = ready_sandbox(vec![hashed(&p, "s1", ContainerState::Running, 0)]);
        // Startup probe still pending: nothing starts.
        let a = compute_pod_actions(&p, &running, &Gate(vec![("s1", Startup::Pending)]));
        assert!(a.is_noop(), "{a:?}");
        // Started: the next init container goes.
        let a = compute_pod_actions(&p, &running, &RunningIsStarted);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![1], vec![]));
        // Startup probe failed: the sidecar is killed and started again.
        let a = compute_pod_actions(&p, &running, &Gate(vec![("s1", Startup::Failed)]));
        assert_eq!(a.start_init, vec![0]);
        assert_eq!(a.kill.len(), 1);
        assert!(a.kill[0].2.contains("failed startup probe"), "{a:?}");
        // i1 done, s1 running: the app starts and s1 is left alone.
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![
                hashed(&p, "i1", ContainerState::Exited, 0),
                hashed(&p, "s1", ContainerState::Running, 0),
            ]),
            &RunningIsStarted,
        );
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![], vec![0]));
        assert!(a.kill.is_empty());
    }

    #[test]
    fn a_sidecar_failing_liveness_is_restarted_with_the_probe_grace_beside_its_app() {
        let mut p = pod_with_sidecars("Never", &["s1"], &["a"]);
        let probe = k8s_openapi::api::core::v1::Probe {
            termination_grace_period_seconds: Some(3),
            ..Default::default()
        };
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].liveness_probe = Some(probe);
        let mut app = container(&p, "a", ContainerState::Running, 0);
        app.id = "id-app".into();
        let mut side = hashed(&p, "s1", ContainerState::Running, 0);
        side.id = "id-s1".into();
        let st = ready_sandbox(vec![side, app]);
        let failed = |id: &str| (id == "id-s1").then_some(ProbeKind::Liveness);
        let a = compute_pod_actions_probed(&p, &st, &RunningIsStarted, &failed);
        assert_eq!(
            a.kill,
            vec![(
                "id-s1".into(),
                "s1".into(),
                "Init container s1 failed liveness probe".into()
            )]
        );
        assert_eq!(a.probe_grace, vec![("id-s1".to_string(), 3)]);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![0], vec![]));
        assert!(!a.kill_pod);
        // Readiness failing is no reason to kill.
        let failed = |id: &str| (id == "id-s1").then_some(ProbeKind::Readiness);
        assert!(compute_pod_actions_probed(&p, &st, &RunningIsStarted, &failed).is_noop());
        // A failed startup probe kills with that probe's grace.
        let init = &mut p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0];
        init.startup_probe = Some(k8s_openapi::api::core::v1::Probe {
            termination_grace_period_seconds: Some(2),
            ..Default::default()
        });
        let gate = Gate(vec![("s1", Startup::Failed)]);
        let a = compute_pod_actions_probed(&p, &st, &gate, &|_| None);
        assert_eq!(a.probe_grace, vec![("id-s1".to_string(), 2)]);
        assert_eq!(a.kill[0].2, "Init container s1 failed startup probe");
    }

    #[test]
    fn a_last_sidecar_that_started_initializes_the_pod() {
        let p = pod_with_sidecars("Always", &["s1", "s2"], &["a"]);
        let st = ready_sandbox(vec![
            hashed(&p, "s2", ContainerState::Running, 0),
            hashed(&p, "s1", ContainerState::Running, 0),
        ]);
        let a = compute_pod_actions(&p, &st, &RunningIsStarted);
        assert_eq!((a.start_init.clone(), a.start.clone()), (vec![], vec![0]));
        let a = compute_pod_actions(&p, &st, &Gate(vec![("s2", Startup::Pending)]));
        assert!(a.is_noop(), "{a:?}");
    }

    #[test]
    fn exited_sidecars_restart_beside_running_app_containers_whatever_the_policy() {
        for policy in ["Always", "OnFailure", "Never"] {
            let p = pod_with_sidecars(policy, &["s1", "i1", "s2"], &["a"]);
            let app = container(&p, "a", ContainerState::Running, 0);
            for exit in [0, 1] {
                let a = compute_pod_actions(
                    &p,
                    &ready_sandbox(vec![
                        app.clone(),
                        hashed(&p, "s2", ContainerState::Exited, exit),
                        hashed(&p, "i1", ContainerState::Exited, 0),
                        hashed(&p, "s1", ContainerState::Exited, exit),
                    ]),
                    &RunningIsStarted,
                );
                // Both sidecars, in spec order; the regular init container never again.
                assert_eq!(a.start_init, vec![0, 2], "{policy} exit {exit}");
                assert!(!a.kill_pod && a.start.is_empty(), "{policy}: {a:?}");
            }
            // A sidecar record garbage-collected after initialization runs again.
            let a = compute_pod_actions(&p, &ready_sandbox(vec![app.clone()]), &RunningIsStarted);
            assert_eq!(a.start_init, vec![0, 2], "{policy}");
        }
    }

    #[test]
    fn sidecars_do_not_keep_a_finished_pod_alive() {
        for policy in ["OnFailure", "Never"] {
            let p = pod_with_sidecars(policy, &["s1"], &["a"]);
            let a = compute_pod_actions(
                &p,
                &ready_sandbox(vec![
                    container(&p, "a", ContainerState::Exited, 0),
                    hashed(&p, "s1", ContainerState::Running, 0),
                ]),
                &RunningIsStarted,
            );
            assert!(a.kill_pod, "{policy}: {a:?}");
            assert!(
                a.start_init.is_empty() && a.start.is_empty(),
                "{policy}: {a:?}"
            );
        }
        // Under Always the app restarts and the sidecar keeps running.
        let p = pod_with_sidecars("Always", &["s1"], &["a"]);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![
                container(&p, "a", ContainerState::Exited, 0),
                hashed(&p, "s1", ContainerState::Running, 0),
            ]),
            &RunningIsStarted,
        );
        assert!(
            !a.kill_pod && a.start == vec![0] && a.start_init.is_empty(),
            "{a:?}"
        );
    }

    #[test]
    fn a_sidecar_whose_image_changed_is_restarted() {
        let p = pod_with_sidecars("Always", &["s1"], &["a"]);
        let mut s1 = hashed(&p, "s1", ContainerState::Running, 0);
        s1.hash ^= 1;
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![container(&p, "a", ContainerState::Running, 0), s1]),
            &RunningIsStarted,
        );
        assert_eq!(a.start_init, vec![0]);
        assert_eq!(a.kill.len(), 1);
        assert!(a.kill[0].2.contains("definition changed"), "{a:?}");
    }

    #[test]
    fn a_failing_regular_init_after_a_sidecar_fails_a_never_pod() {
        let p = pod_with_sidecars("Never", &["s1", "i1"], &["a"]);
        let a = compute_pod_actions(
            &p,
            &ready_sandbox(vec![
                hashed(&p, "i1", ContainerState::Exited, 1),
                hashed(&p, "s1", ContainerState::Running, 0),
            ]),
            &RunningIsStarted,
        );
        assert!(
            a.kill_pod && a.start_init.is_empty() && a.start.is_empty(),
            "{a:?}"
        );
    }
}
