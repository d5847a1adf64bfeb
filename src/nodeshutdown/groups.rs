//! The shutdown's budgets (kubelet's `ShutdownGracePeriodByPodPriority`): the groups of
//! pods by priority, each with the seconds it gets, stopped one group after the other,
//! lowest priority first.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::pod::SYSTEM_CRITICAL_PRIORITY;

/// One entry of `shutdownGracePeriodByPodPriority`: pods of this priority and up (to
/// the next entry's) get this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PriorityGrace {
    pub priority: i32,
    pub seconds: i64,
}

/// The groups from the settings, sorted by priority, lowest first: the by-priority list
/// when given, else kubelet's two groups from `shutdownGracePeriod` and
/// `shutdownGracePeriodCriticalPods` (its `migrateConfig`: the critical pods, priority
/// 2000000000 and up, get the critical period, every other pod the rest). Empty: graceful
/// shutdown is off.
pub(crate) fn from_settings(
    grace: Duration,
    critical: Duration,
    by_priority: &[PriorityGrace],
) -> Vec<PriorityGrace> {
    let mut groups = if by_priority.is_empty() {
        if grace.is_zero() || critical > grace {
            return Vec::new();
        }
        // Whole seconds, as kubelet's (it truncates each part).
        let critical_secs = critical.as_secs();
        let rest = (grace - critical).as_secs();
        vec![
            PriorityGrace {
                priority: 0,
                seconds: i64::try_from(rest).unwrap_or(i64::MAX),
            },
            PriorityGrace {
                priority: SYSTEM_CRITICAL_PRIORITY,
                seconds: i64::try_from(critical_secs).unwrap_or(i64::MAX),
            },
        ]
    } else {
        by_priority.to_vec()
    };
    groups.sort_by_key(|g| g.priority);
    groups
}

/// What logind must wait for at most: every group's budget, one after the other.
pub(crate) fn period_requested(groups: &[PriorityGrace]) -> Duration {
    let secs: i64 = groups.iter().map(|g| g.seconds.max(0)).sum();
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// One group's pods, stopped together within the group's budget.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub grace: PriorityGrace,
    pub pods: Vec<Arc<Pod>>,
}

/// A pod's priority as the shutdown sees it: `spec.priority`, 0 when unset (kubelet
/// resolves no priority class here either).
fn priority_of(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The pods in their groups (kubelet's `groupByPriority`): a pod goes to the highest
/// group whose priority is not above its own; one below every group goes to the lowest.
/// `groups` must be sorted and not empty.
pub(crate) fn group_by_priority(groups: &[PriorityGrace], pods: Vec<Arc<Pod>>) -> Vec<Group> {
    let mut out: Vec<Group> = groups
        .iter()
        .map(|g| Group {
            grace: *g,
            pods: Vec::new(),
        })
        .collect();
    for pod in pods {
        let p = priority_of(&pod);
        // The first group not below the pod's priority, stepped down when above it.
        let mut i = groups.partition_point(|g| g.priority < p);
        if i == groups.len() {
            i = i.saturating_sub(1);
        } else if i > 0 && groups[i].priority > p {
            i -= 1;
        }
        if let Some(g) = out.get_mut(i) {
            g.pods.push(pod);
        }
    }
    out
}

/// The priorities group `i` holds, for the log line that starts it.
pub(crate) fn range_text(groups: &[PriorityGrace], i: usize) -> String {
    let next = groups.get(i + 1).map(|g| g.priority);
    match (i, next) {
        (_, None) if groups.len() == 1 => "of any priority".to_string(),
        (0, Some(n)) => format!("with priority below {n}"),
        (_, None) => format!("with priority ≥ {}", groups[i].priority),
        (_, Some(n)) => format!("with priority {} to {}", groups[i].priority, n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, priority: Option<i32>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn g(priority: i32, seconds: i64) -> PriorityGrace {
        PriorityGrace { priority, seconds }
    }

    fn names(groups: &[Group]) -> Vec<Vec<String>> {
        groups
            .iter()
            .map(|g| {
                g.pods
                    .iter()
                    .map(|p| p.metadata.name.clone().unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn grace_and_critical_make_kubelets_two_groups() {
        let s = Duration::from_secs;
        assert_eq!(
            from_settings(s(30), s(10), &[]),
            [g(0, 20), g(2_000_000_000, 10)]
        );
        assert_eq!(
            from_settings(s(30), s(0), &[]),
            [g(0, 30), g(2_000_000_000, 0)]
        );
        // Fractions of a second are dropped, as kubelet's.
        assert_eq!(
            from_settings(Duration::from_millis(30_500), s(10), &[]),
            [g(0, 20), g(2_000_000_000, 10)]
        );
        assert!(from_settings(s(0), s(0), &[]).is_empty());
        assert!(from_settings(s(5), s(10), &[]).is_empty());
    }

    #[test]
    fn a_by_priority_list_is_taken_as_given_and_sorted() {
        let list = [g(100_000, 5), g(0, 20), g(2_000_000_000, 10)];
        let groups = from_settings(Duration::ZERO, Duration::ZERO, &list);
        assert_eq!(groups, [g(0, 20), g(100_000, 5), g(2_000_000_000, 10)]);
        assert_eq!(period_requested(&groups), Duration::from_secs(35));
    }

    #[test]
    fn pods_go_to_the_highest_group_not_above_their_priority() {
        let groups = [g(0, 20), g(100_000, 5), g(2_000_000_000, 10)];
        let pods = vec![
            pod("none", None),
            pod("negative", Some(-5)),
            pod("zero", Some(0)),
            pod("mid", Some(100_000)),
            pod("between", Some(1_999_999_999)),
            pod("critical", Some(2_000_001_000)),
        ];
        assert_eq!(
            names(&group_by_priority(&groups, pods)),
            [
                vec!["none", "negative", "zero"],
                vec!["mid", "between"],
                vec!["critical"]
            ]
        );
        // A list starting above 0: lower priorities join its lowest group.
        let groups = [g(1000, 3)];
        assert_eq!(
            names(&group_by_priority(&groups, vec![pod("low", None)])),
            [vec!["low"]]
        );
    }

    #[test]
    fn the_log_line_names_each_groups_priorities() {
        let groups = [g(0, 20), g(100_000, 5), g(2_000_000_000, 10)];
        assert_eq!(range_text(&groups, 0), "with priority below 100000");
        assert_eq!(range_text(&groups, 1), "with priority 100000 to 1999999999");
        assert_eq!(range_text(&groups, 2), "with priority ≥ 2000000000");
        assert_eq!(range_text(&[g(0, 1)], 0), "of any priority");
    }
}
