//! What the status writer sends: kubelet's rules for merging our status with the
//! apiserver's (`mergePodStatus`, the terminal and container-state checks of
//! `updateStatusInternal`), and the patch from the apiserver's status to ours.
//!
//! The patch is a JSON merge patch (RFC 7386) of `{metadata: {uid}, status}`: lists are
//! replaced whole and removed keys are sent as `null`. kubelet sends a strategic merge
//! patch computed the same way (two-way, from the apiserver's status to the merged one);
//! since the merged status already keeps every condition kubelet does not own, both
//! leave the apiserver with exactly the merged status. They differ only for a condition
//! someone else adds between our GET and our PATCH, which the merge patch drops and the
//! next reconcile pass (10 s) restores from their next write.
//! Timestamps need no normalising here: `Time` serialises to whole seconds, and every
//! comparison is made on the serialised JSON.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use serde_json::{Map, Value, json};

use crate::pod::{RestartPolicy, container_should_restart};

/// The pod conditions kubelet owns (`kubetypes.PodConditionByKubelet`: its list, and
/// the two resize conditions with in-place resize on); others (readiness gates,
/// DisruptionTarget, …) belong to someone else and are kept.
const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
    "PodResizePending",
    "PodResizeInProgress",
];

/// Why a status is not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("the apiserver has the pod {0}; a terminal phase never goes back")]
    TerminalPhase(String),
    #[error(
        "container {0} is terminated in the apiserver and may not be restarted (restartPolicy {1})"
    )]
    TerminatedContainer(String, String),
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// kubelet's `mergePodStatus` and `updateStatusInternal` rules: our status, with the
/// apiserver's conditions that kubelet does not own and its `startTime` once set.
pub(crate) fn merge(api: &PodStatus, ours: &PodStatus) -> PodStatus {
    let mut merged = ours.clone();
    if api.start_time.is_some() {
        merged.start_time = api.start_time.clone();
    }
    let foreign = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .filter(|c| !ours.conditions.iter().flatten().any(|o| o.type_ == c.type_))
        .cloned();
    let mut conditions: Vec<_> = merged.conditions.take().unwrap_or_default();
    conditions.extend(foreign);
    merged.conditions = (!conditions.is_empty()).then_some(conditions);
    merged
}

/// kubelet's checks before a status goes out: a terminal phase in the apiserver never
/// becomes non-terminal, and a terminated container never runs again unless the
/// restart policy, or the container's own rules and policy, allow it
/// (`checkContainerStateTransition`).
pub(crate) fn check(api: &Pod, ours: &PodStatus) -> Result<(), Refused> {
    let old = api.status.clone().unwrap_or_default();
    if is_terminal(old.phase.as_deref()) && !is_terminal(ours.phase.as_deref()) {
        return Err(Refused::TerminalPhase(old.phase.unwrap_or_default()));
    }
    let policy = api
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if policy == RestartPolicy::Always.as_str() {
        return Ok(());
    }
    let empty = PodSpec::default();
    let spec = api.spec.as_ref().unwrap_or(&empty);
    let lists = [
        (
            &old.container_statuses,
            &ours.container_statuses,
            &spec.containers[..],
        ),
        (
            &old.init_container_statuses,
            &ours.init_container_statuses,
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (old_list, new_list, containers) in lists {
        for o in old_list.iter().flatten() {
            let Some(code) = terminated_exit_code(o) else {
                continue;
            };
            // OnFailure may restart a container that failed, and a container's own
            // rules and policy may restart it whatever the pod says.
            if policy == RestartPolicy::OnFailure.as_str() && code != 0 {
                continue;
            }
            if (containers.iter().find(|c| c.name == o.name))
                .is_some_and(|c| container_should_restart(c, spec, code))
            {
                continue;
            }
            let still = new_list
                .iter()
                .flatten()
                .find(|n| n.name == o.name)
                .is_none_or(|n| terminated_exit_code(n).is_some());
            if !still {
                return Err(Refused::TerminatedContainer(
                    o.name.clone(),
                    policy.to_string(),
                ));
            }
        }
    }
    Ok(())
}

fn terminated_exit_code(c: &ContainerStatus) -> Option<i32> {
    c.state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
}

/// The status as the apiserver stores it (JSON, times in whole seconds).
pub(crate) fn to_json(status: &PodStatus) -> Value {
    serde_json::to_value(status).unwrap_or(Value::Null)
}

/// The merge patch that turns `old` into `new` (RFC 7386): changed keys, removed keys
/// as `null`; objects recurse, everything else (lists included) is replaced.
pub(crate) fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(p) = diff(ov, nv) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// The status patch kubelet's `PatchPodStatus` sends, as a merge patch with the UID
/// precondition, or None when the apiserver already has `new`.
pub(crate) fn status_patch(uid: &str, old: &PodStatus, new: &PodStatus) -> Option<Value> {
    let status = diff(&to_json(old), &to_json(new))?;
    Some(json!({"metadata": {"uid": uid}, "status": status}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, PodCondition, PodSpec,
    };

    fn cond(t: &str, s: &str) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: s.into(),
            ..Default::default()
        }
    }

    fn container(name: &str, exit: Option<i32>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(match exit {
                Some(exit_code) => ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                None => ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }
    }

    fn api_pod(policy: &str, status: PodStatus) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                ..Default::default()
            }),
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn diff_removes_keys_with_null_and_replaces_lists() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let new = json!({"b": {"c": 2, "d": 4}, "l": [1], "e": "x"});
        assert_eq!(
            diff(&old, &new),
            Some(json!({"a": null, "b": {"d": 4}, "l": [1], "e": "x"}))
        );
        assert_eq!(diff(&new, &new), None);
    }

    #[test]
    fn merge_keeps_foreign_conditions_and_start_time() {
        let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2024-01-01T00:00:00Z".parse().unwrap(),
        );
        let api = PodStatus {
            conditions: Some(vec![
                cond("Ready", "True"),
                cond("example.com/gate", "True"),
            ]),
            start_time: Some(t.clone()),
            ..Default::default()
        };
        let ours = PodStatus {
            conditions: Some(vec![cond("Ready", "False")]),
            ..Default::default()
        };
        let m = merge(&api, &ours);
        assert_eq!(m.start_time, Some(t));
        assert_eq!(
            m.conditions.unwrap(),
            vec![cond("Ready", "False"), cond("example.com/gate", "True")]
        );
    }

    #[test]
    fn terminal_phase_and_terminated_containers_do_not_go_back() {
        let running = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![container("c", None)]),
            ..Default::default()
        };
        let failed = PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        };
        assert_eq!(
            check(&api_pod("Always", failed), &running),
            Err(Refused::TerminalPhase("Failed".into()))
        );
        let done = |code| PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![container("c", Some(code))]),
            ..Default::default()
        };
        assert!(matches!(
            check(&api_pod("Never", done(1)), &running),
            Err(Refused::TerminatedContainer(..))
        ));
        assert!(matches!(
            check(&api_pod("OnFailure", done(0)), &running),
            Err(Refused::TerminatedContainer(..))
        ));
        assert_eq!(check(&api_pod("OnFailure", done(1)), &running), Ok(()));
        assert_eq!(check(&api_pod("Always", done(0)), &running), Ok(()));
        assert_eq!(check(&api_pod("Never", done(0)), &done(0)), Ok(()));
        // A container whose own rule restarts it on 42 may run again under Never.
        let mut ruled = api_pod("Never", done(42));
        ruled.spec.as_mut().unwrap().containers = vec![k8s_openapi::api::core::v1::Container {
            name: "c".into(),
            restart_policy: Some("Never".into()),
            restart_policy_rules: Some(vec![crate::pod::restart_on(&[42])]),
            ..Default::default()
        }];
        assert_eq!(check(&ruled, &running), Ok(()));
        ruled.status = Some(done(1));
        assert!(matches!(
            check(&ruled, &running),
            Err(Refused::TerminatedContainer(..))
        ));
    }

    #[test]
    fn status_patch_carries_the_uid_precondition() {
        let old = PodStatus {
            conditions: Some(vec![cond("Ready", "True"), cond("Initialized", "True")]),
            ..Default::default()
        };
        let new = PodStatus {
            conditions: Some(vec![cond("Ready", "True")]),
            pod_ip: Some("10.0.0.1".into()),
            ..Default::default()
        };
        let p = status_patch("u1", &old, &new).unwrap();
        assert_eq!(p["metadata"]["uid"], "u1");
        assert_eq!(p["status"]["podIP"], "10.0.0.1");
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(status_patch("u1", &new, &new), None);
    }
}
