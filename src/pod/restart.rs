//! Whether a container that exited runs again: its own `restartPolicy` and
//! `restartPolicyRules` first, then the pod's `restartPolicy` (kubelet's
//! `ContainerShouldRestart` and `IsContainerRestartable`, ContainerRestartRules,
//! beta and on by default since 1.35). The sync's actions, the pod phase, the
//! probers and the status checks all ask here, so they cannot disagree.

use k8s_openapi::api::core::v1::{Container, ContainerRestartRule, PodSpec};

use super::RestartPolicy;

/// The one action a rule may name (`RestartAllContainers` is alpha and off).
pub(crate) const RULE_ACTION_RESTART: &str = "Restart";
/// The exit-code operators a rule may use.
pub(crate) const RULE_OPERATORS: &[&str] = &["In", "NotIn"];

/// The pod's own policy, Always when unset.
fn pod_policy(spec: &PodSpec) -> RestartPolicy {
    spec.restart_policy
        .as_deref()
        .and_then(|p| p.parse().ok())
        .unwrap_or(RestartPolicy::Always)
}

/// The first of the container's rules whose exit-code condition matches `code`.
/// A rule without a condition, or with an operator this version does not know,
/// matches nothing (validation refuses both).
fn matching_rule(c: &Container, code: i32) -> Option<&ContainerRestartRule> {
    c.restart_policy_rules.iter().flatten().find(|rule| {
        let Some(on) = rule.exit_codes.as_ref() else {
            return false;
        };
        let listed = on.values.iter().flatten().any(|v| *v == code);
        match on.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        }
    })
}

/// Whether a container that exited with `code` is started again. The rules are
/// read only when the container sets its own policy (validation requires one
/// beside them); the first match decides, and a rule whose action is unknown
/// falls through to the container's policy.
pub(crate) fn container_should_restart(c: &Container, spec: &PodSpec, code: i32) -> bool {
    let policy = match RestartPolicy::of_container(c) {
        Some(own) => {
            if matching_rule(c, code).is_some_and(|r| r.action == RULE_ACTION_RESTART) {
                return true;
            }
            own
        }
        None => pod_policy(spec),
    };
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

/// Whether the container may ever run again after it exits, whatever the code:
/// a Restart rule or a policy other than Never (its own, else the pod's).
pub(crate) fn is_container_restartable(spec: &PodSpec, c: &Container) -> bool {
    match RestartPolicy::of_container(c) {
        Some(own) => {
            c.restart_policy_rules
                .iter()
                .flatten()
                .any(|r| r.action == RULE_ACTION_RESTART)
                || own != RestartPolicy::Never
        }
        None => pod_policy(spec) != RestartPolicy::Never,
    }
}

/// The policy that decides a restart when there is no exit code to read (a
/// container killed for a failed probe, an init container in an unknown state):
/// the container's own, else the pod's. Rules are not read (kubelet 1.35).
pub(crate) fn restarts_without_exit_code(c: &Container, spec: &PodSpec) -> bool {
    RestartPolicy::of_container(c).unwrap_or_else(|| pod_policy(spec)) != RestartPolicy::Never
}

/// A rule restarting a container on the exit codes `codes` (for tests).
#[cfg(test)]
pub(crate) fn restart_on(codes: &[i32]) -> ContainerRestartRule {
    ContainerRestartRule {
        action: RULE_ACTION_RESTART.into(),
        exit_codes: Some(
            k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                operator: "In".into(),
                values: Some(codes.to_vec()),
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes;

    fn rule(action: &str, op: &str, values: &[i32]) -> ContainerRestartRule {
        ContainerRestartRule {
            action: action.into(),
            exit_codes: Some(ContainerRestartRuleOnExitCodes {
                operator: op.into(),
                values: Some(values.to_vec()),
            }),
        }
    }

    fn container(policy: Option<&str>, rules: Vec<ContainerRestartRule>) -> Container {
        Container {
            name: "c".into(),
            restart_policy: policy.map(Into::into),
            restart_policy_rules: (!rules.is_empty()).then_some(rules),
            ..Default::default()
        }
    }

    fn spec(policy: Option<&str>) -> PodSpec {
        PodSpec {
            restart_policy: policy.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn the_pod_policy_decides_when_the_container_sets_none() {
        let c = container(None, vec![]);
        for (policy, code, want) in [
            (None, 0, true),
            (Some("Always"), 0, true),
            (Some("OnFailure"), 0, false),
            (Some("OnFailure"), 3, true),
            (Some("Never"), 3, false),
        ] {
            assert_eq!(
                container_should_restart(&c, &spec(policy), code),
                want,
                "{policy:?} {code}"
            );
        }
    }

    #[test]
    fn the_container_policy_overrides_the_pod() {
        let never = container(Some("Never"), vec![]);
        assert!(!container_should_restart(&never, &spec(Some("Always")), 1));
        let always = container(Some("Always"), vec![]);
        assert!(container_should_restart(&always, &spec(Some("Never")), 0));
        let on_failure = container(Some("OnFailure"), vec![]);
        assert!(container_should_restart(
            &on_failure,
            &spec(Some("Never")),
            2
        ));
        assert!(!container_should_restart(
            &on_failure,
            &spec(Some("Always")),
            0
        ));
    }

    #[test]
    fn the_first_matching_rule_restarts_else_the_container_policy_decides() {
        let c = container(Some("Never"), vec![rule("Restart", "In", &[42, 43])]);
        let pod = spec(Some("Never"));
        assert!(container_should_restart(&c, &pod, 42));
        assert!(!container_should_restart(&c, &pod, 0));
        assert!(!container_should_restart(&c, &pod, 1));
        let not_in = container(Some("Never"), vec![rule("Restart", "NotIn", &[0])]);
        assert!(container_should_restart(&not_in, &pod, 7));
        assert!(!container_should_restart(&not_in, &pod, 0));
        // An unknown action falls through to the policy.
        let odd = container(Some("Always"), vec![rule("Explode", "In", &[1])]);
        assert!(container_should_restart(&odd, &pod, 1));
    }

    #[test]
    fn rules_without_a_container_policy_are_not_read() {
        let c = container(None, vec![rule("Restart", "In", &[42])]);
        assert!(!container_should_restart(&c, &spec(Some("Never")), 42));
    }

    #[test]
    fn restartable_counts_a_restart_rule_or_a_policy_other_than_never() {
        let pod = spec(Some("Never"));
        assert!(!is_container_restartable(&pod, &container(None, vec![])));
        assert!(is_container_restartable(
            &spec(None),
            &container(None, vec![])
        ));
        let ruled = container(Some("Never"), vec![rule("Restart", "In", &[42])]);
        assert!(is_container_restartable(&pod, &ruled));
        assert!(!is_container_restartable(
            &pod,
            &container(Some("Never"), vec![])
        ));
        assert!(is_container_restartable(
            &pod,
            &container(Some("OnFailure"), vec![])
        ));
        assert!(restarts_without_exit_code(
            &container(Some("OnFailure"), vec![]),
            &pod
        ));
        assert!(!restarts_without_exit_code(&ruled, &spec(Some("Always"))));
    }
}
