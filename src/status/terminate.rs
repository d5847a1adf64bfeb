//! The final status of a pod whose worker has terminated it (kubelet's status manager
//! `TerminatePod`): no container is left looking alive or never started, and a
//! non-static pod ends in a terminal phase. Without this, a pod whose containers never
//! started (ImagePullBackOff, CreateContainerConfigError) keeps `Pending` and a
//! waiting container after its kill, so the status writer's final DELETE never fires.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::pod::TerminatedReason;

/// What kubelet says of a container with no terminated state when its pod ends.
const UNKNOWN_MESSAGE: &str = "The container could not be located when the pod was terminated";

/// Makes `status` the terminated pod's final status, as kubelet's `TerminatePod`:
/// once the pod initialized, every app container not terminated is marked terminated
/// (ContainerStatusUnknown, 137); so is every init container not terminated up to the
/// last one with evidence of a start; a non-static pod's Pending or Running (or no)
/// phase becomes Failed. Its `lastState` is left as it was.
pub(crate) fn terminate_pod_status(status: &mut PodStatus, pod: &Pod, is_static: bool) {
    let has_inits = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| !i.is_empty());
    if !has_inits || has_initialized(status) {
        for c in status.container_statuses.iter_mut().flatten() {
            mark_unknown(c);
        }
    }
    if let Some(inits) = status.init_container_statuses.as_mut() {
        let n = initialized_prefix(inits);
        for c in &mut inits[..n] {
            mark_unknown(c);
        }
    }
    if !is_static && !matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        status.phase = Some("Failed".into());
    }
}

fn is_waiting(c: &ContainerStatus) -> bool {
    c.state.as_ref().is_some_and(|s| s.waiting.is_some())
}

fn last_terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.last_state.as_ref().and_then(|s| s.terminated.as_ref())
}

fn terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.state.as_ref().and_then(|s| s.terminated.as_ref())
}

fn mark_unknown(c: &mut ContainerStatus) {
    if terminated(c).is_some() {
        return;
    }
    c.state = Some(ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(TerminatedReason::ContainerStatusUnknown.to_string()),
            message: Some(UNKNOWN_MESSAGE.into()),
            ..Default::default()
        }),
        ..Default::default()
    });
}

/// kubelet's `hasPodInitialized` for a pod with init containers: an app container
/// ever left waiting, or the last init container once exited 0.
fn has_initialized(status: &PodStatus) -> bool {
    let apps = status.container_statuses.iter().flatten();
    if apps
        .into_iter()
        .any(|c| last_terminated(c).is_some() || !is_waiting(c))
    {
        return true;
    }
    status
        .init_container_statuses
        .as_ref()
        .and_then(|i| i.last())
        .is_some_and(|c| {
            last_terminated(c).is_some_and(|t| t.exit_code == 0)
                || terminated(c).is_some_and(|t| t.exit_code == 0)
        })
}

/// kubelet's `initializedContainers`: how many init containers, from the first, have
/// evidence of a start (all but the trailing ones still waiting with no last state);
/// never fewer than one.
fn initialized_prefix(inits: &[ContainerStatus]) -> usize {
    inits
        .iter()
        .rposition(|c| !is_waiting(c) || last_terminated(c).is_some())
        .map_or(inits.len().min(1), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerStateWaiting, PodSpec};

    use super::*;

    fn waiting(name: &str, reason: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, code: i32) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    reason: Some("Completed".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(inits: &[&str]) -> Pod {
        let c = |n: &&str| Container {
            name: (*n).into(),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(inits.iter().map(c).collect()),
                containers: vec![c(&"app")],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn state_of(c: &ContainerStatus) -> (Option<&str>, Option<i32>) {
        match terminated(c) {
            Some(t) => (t.reason.as_deref(), Some(t.exit_code)),
            None => (
                c.state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref()),
                None,
            ),
        }
    }

    #[test]
    fn a_never_started_container_ends_unknown_137_and_the_pod_failed() {
        let mut st = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![waiting("app", "ImagePullBackOff")]),
            ..Default::default()
        };
        terminate_pod_status(&mut st, &pod(&[]), false);
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        let c = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(state_of(c), (Some("ContainerStatusUnknown"), Some(137)));
        assert_eq!(
            terminated(c).unwrap().message.as_deref(),
            Some(UNKNOWN_MESSAGE)
        );
    }

    #[test]
    fn terminated_containers_and_terminal_phases_are_kept_and_last_state_untouched() {
        let mut app = exited("app", 3);
        let mut side = waiting("side", "CrashLoopBackOff");
        side.last_state = Some(exited("x", 1).state.unwrap());
        app.last_state = None;
        let mut st = PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![app.clone(), side.clone()]),
            ..Default::default()
        };
        terminate_pod_status(&mut st, &pod(&[]), false);
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
        let cs = st.container_statuses.as_ref().unwrap();
        assert_eq!(cs[0], app, "a terminated container keeps its state");
        assert_eq!(
            state_of(&cs[1]),
            (Some("ContainerStatusUnknown"), Some(137))
        );
        assert_eq!(cs[1].last_state, side.last_state);
    }

    #[test]
    fn a_running_pod_fails_but_a_static_pod_keeps_its_phase() {
        let st0 = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![waiting("app", "ContainerCreating")]),
            ..Default::default()
        };
        let mut st = st0.clone();
        terminate_pod_status(&mut st, &pod(&[]), true);
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(
            state_of(&st.container_statuses.unwrap()[0]).0,
            Some("ContainerStatusUnknown")
        );
        let mut st = st0;
        terminate_pod_status(&mut st, &pod(&[]), false);
        assert_eq!(st.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn an_uninitialized_pod_marks_only_init_containers_that_started() {
        // init-a done, init-b pulling, init-c never reached: the last init container
        // with evidence of a start is init-a (terminated already), so nothing changes
        // but the phase.
        let mut st = PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![
                exited("init-a", 0),
                waiting("init-b", "ErrImagePull"),
                waiting("init-c", "PodInitializing"),
            ]),
            container_statuses: Some(vec![waiting("app", "PodInitializing")]),
            ..Default::default()
        };
        terminate_pod_status(&mut st, &pod(&["init-a", "init-b", "init-c"]), false);
        let inits = st.init_container_statuses.as_ref().unwrap();
        assert_eq!(state_of(&inits[0]), (Some("Completed"), Some(0)));
        assert_eq!(state_of(&inits[1]), (Some("ErrImagePull"), None));
        assert_eq!(state_of(&inits[2]), (Some("PodInitializing"), None));
        let app = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            state_of(app),
            (Some("PodInitializing"), None),
            "not initialized"
        );
        assert_eq!(st.phase.as_deref(), Some("Failed"));

        // Every init container waiting: the first is still marked.
        let mut st = PodStatus {
            init_container_statuses: Some(vec![
                waiting("init-a", "ErrImagePull"),
                waiting("init-b", "PodInitializing"),
            ]),
            container_statuses: Some(vec![waiting("app", "PodInitializing")]),
            ..Default::default()
        };
        terminate_pod_status(&mut st, &pod(&["init-a", "init-b"]), false);
        let inits = st.init_container_statuses.as_ref().unwrap();
        assert_eq!(state_of(&inits[0]).0, Some("ContainerStatusUnknown"));
        assert_eq!(state_of(&inits[1]).0, Some("PodInitializing"));
        assert_eq!(st.phase.as_deref(), Some("Failed"), "no phase: Failed");
    }

    #[test]
    fn an_initialized_pod_marks_its_app_containers() {
        // The last init container exited 0: the app containers count as started.
        let mut st = PodStatus {
            phase: Some("Pending".into()),
            init_container_statuses: Some(vec![exited("init-a", 0)]),
            container_statuses: Some(vec![waiting("app", "CreateContainerConfigError")]),
            ..Default::default()
        };
        terminate_pod_status(&mut st, &pod(&["init-a"]), false);
        let app = &st.container_statuses.as_ref().unwrap()[0];
        assert_eq!(state_of(app), (Some("ContainerStatusUnknown"), Some(137)));
    }
}
