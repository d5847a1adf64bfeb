//! `activeDeadlineSeconds` (kubelet's `activeDeadlineHandler`, one of the sync loop's
//! `PodSyncHandlers`): a pod active on the node longer than its deadline, counted from
//! its `startTime`, is failed with reason `DeadlineExceeded` and its containers killed.

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use super::pod_workers::KillStatus;
use crate::pod::Phase;

/// kubelet's reason and message for a pod past its deadline.
pub(crate) const REASON: &str = "DeadlineExceeded";
pub(crate) const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// True when the pod has a deadline and has been active (since `status.startTime`)
/// for at least that long (kubelet's `pastActiveDeadline`).
pub(crate) fn past_deadline(pod: &Pod, status: Option<&PodStatus>, now: jiff::Timestamp) -> bool {
    let Some(deadline) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = status.and_then(|s| s.start_time.as_ref()) else {
        return false;
    };
    let active = now.duration_since(start.0);
    active.as_secs() >= deadline
}

/// The status a deadline kill puts on the pod.
pub(crate) fn kill_status() -> KillStatus {
    KillStatus {
        phase: Phase::Failed,
        reason: REASON.into(),
        message: MESSAGE.into(),
        condition: None,
        keep_succeeded: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(deadline: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                active_deadline_seconds: deadline,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_deadline_counts_from_start_time() {
        let start: jiff::Timestamp = "2026-11-26T03:00:00Z".parse().unwrap();
        let status = PodStatus {
            start_time: Some(Time(start)),
            ..Default::default()
        };
        let at = |s: i64| start + jiff::SignedDuration::from_secs(s);
        assert!(!past_deadline(&pod(Some(2)), Some(&status), at(1)));
        assert!(past_deadline(&pod(Some(2)), Some(&status), at(2)));
        assert!(!past_deadline(&pod(None), Some(&status), at(1000)));
        // Not started yet: no deadline to measure.
        assert!(!past_deadline(&pod(Some(2)), None, at(1000)));
        assert_eq!(kill_status().reason, "DeadlineExceeded");
    }
}
