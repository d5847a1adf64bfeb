//! What a request to stop a pod carries (kubelet's `KillPodOptions`): why, a grace
//! period override, and the status to set on the pod (kubelet's `PodStatusFunc`).
//! Removal from the config, runtime-only pods, deadlines and the node QoS manager's
//! evictions use it; kubelet's eviction manager sends its kills through
//! [`KillRequest::evicted`] too, and the node shutdown manager through
//! [`KillRequest::node_shutdown`].

use std::fmt;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use crate::pod::Phase;

/// Why a pod is being terminated, as the worker logs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KillReason {
    /// Removed from its source (REMOVE or DELETE).
    RemovedFromConfig,
    /// Running in the runtime but in no source.
    RuntimeOnly,
    /// Its deletion timestamp was set (graceful deletion).
    Deleted,
    /// It reached Succeeded or Failed by itself.
    Terminal,
    /// It was active longer than its `activeDeadlineSeconds`.
    DeadlineExceeded,
    /// A node agent evicted it (resource pressure; the message is on its status).
    Evicted,
    /// The node is shutting down (logind announced it).
    NodeShutdown,
}

impl KillReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KillReason::RemovedFromConfig => "removed from config",
            KillReason::RuntimeOnly => "runtime-only pod",
            KillReason::Deleted => "deleted",
            KillReason::Terminal => "pod is terminal",
            KillReason::DeadlineExceeded => "active deadline exceeded",
            KillReason::Evicted => "evicted",
            KillReason::NodeShutdown => "node shutdown",
        }
    }
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The status a kill puts on the pod before stopping it, e.g. eviction's
/// `Failed`/`Evicted`. A terminal phase set here stays (status generation never
/// leaves one), and so do the reason and message while the phase stays.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KillStatus {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
    /// A condition set with it (eviction's `DisruptionTarget`); generation keeps it.
    pub condition: Option<PodCondition>,
    /// A pod that had already `Succeeded` before the kill keeps that phase (kubelet's
    /// node shutdown status function; its eviction sets `Failed` whatever the phase).
    pub keep_succeeded: bool,
}

impl KillStatus {
    /// Writes the phase, reason and message over a generated status; `before` is the
    /// status the pod had (it tells whether the pod had already succeeded).
    pub(crate) fn apply(&self, status: &mut PodStatus, before: Option<&PodStatus>) {
        let succeeded = before.and_then(|b| b.phase.as_deref()) == Some(Phase::Succeeded.as_str());
        if !(self.keep_succeeded && succeeded) {
            status.phase = Some(self.phase.to_string());
        }
        status.reason = Some(self.reason.clone());
        status.message = Some(self.message.clone());
        if let Some(c) = &self.condition {
            // The generation the rest of the status was computed from.
            let c = PodCondition {
                observed_generation: status.observed_generation,
                ..c.clone()
            };
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            conditions.retain(|old| old.type_ != c.type_);
            conditions.push(c);
        }
    }
}

/// kubelet's reason for an evicted pod.
pub(crate) const EVICTED_REASON: &str = "Evicted";
/// The condition kubelet adds to a pod it evicts, and its reason.
pub(crate) const DISRUPTION_TARGET: &str = "DisruptionTarget";
pub(crate) const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// A request to stop a pod.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KillRequest {
    pub reason: KillReason,
    /// Replaces the pod's grace period (a grace period still only ever shortens).
    pub grace_override: Option<i64>,
    /// Set on the pod's status before its containers are stopped.
    pub status: Option<KillStatus>,
}

impl KillRequest {
    /// A kill with the pod's own grace period and no status of its own.
    pub(crate) fn new(reason: KillReason) -> Self {
        KillRequest {
            reason,
            grace_override: None,
            status: None,
        }
    }

    /// An eviction (kubelet's eviction manager's `evictPod`): the pod ends Failed with
    /// reason `Evicted` and `message`, and a `DisruptionTarget` condition (reason
    /// `TerminationByKubelet`) as kubelet sets it; `grace` overrides the pod's.
    pub(crate) fn evicted(message: String, grace: Option<i64>) -> Self {
        Self::by_kubelet(KillReason::Evicted, EVICTED_REASON, message, grace, false)
    }

    /// A node shutdown (kubelet's shutdown manager): the pod ends Failed (unless it
    /// already Succeeded) with `reason` and `message`, and the same `DisruptionTarget`
    /// condition as an eviction; `grace` overrides the pod's.
    pub(crate) fn node_shutdown(reason: &str, message: String, grace: i64) -> Self {
        Self::by_kubelet(KillReason::NodeShutdown, reason, message, Some(grace), true)
    }

    /// A kill kubelet itself decided on: `Failed` with `status_reason` and `message`,
    /// and a `DisruptionTarget` condition saying the message.
    fn by_kubelet(
        kind: KillReason,
        status_reason: &str,
        message: String,
        grace: Option<i64>,
        keep_succeeded: bool,
    ) -> Self {
        let condition = PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(TERMINATION_BY_KUBELET.into()),
            message: Some(message.clone()),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            )),
            ..Default::default()
        };
        KillRequest {
            reason: kind,
            grace_override: grace,
            status: Some(KillStatus {
                phase: Phase::Failed,
                reason: status_reason.into(),
                message,
                condition: Some(condition),
                keep_succeeded,
            }),
        }
    }

    /// A later request for the same pod: its reason wins; its status wins if it has
    /// one (kubelet runs every status function in order, so the last one stands).
    pub(super) fn merge(&mut self, later: &KillRequest) {
        self.reason = later.reason;
        if later.status.is_some() {
            self.status = later.status.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evicted() -> KillStatus {
        KillStatus {
            phase: Phase::Failed,
            reason: "Evicted".into(),
            message: "The node was low on resource: memory.".into(),
            condition: None,
            keep_succeeded: false,
        }
    }

    #[test]
    fn a_later_kill_keeps_an_earlier_status_unless_it_brings_one() {
        let mut k = KillRequest {
            status: Some(evicted()),
            ..KillRequest::new(KillReason::RuntimeOnly)
        };
        k.merge(&KillRequest::new(KillReason::RemovedFromConfig));
        assert_eq!(k.reason, KillReason::RemovedFromConfig);
        assert_eq!(k.status, Some(evicted()));
        let other = KillStatus {
            reason: "Preempted".into(),
            ..evicted()
        };
        k.merge(&KillRequest {
            status: Some(other.clone()),
            ..KillRequest::new(KillReason::Deleted)
        });
        assert_eq!(k.status, Some(other));
    }

    #[test]
    fn an_eviction_fails_the_pod_with_a_disruption_target() {
        let k = KillRequest::evicted("node memory 80% >= 70%".into(), Some(0));
        assert_eq!(k.reason, KillReason::Evicted);
        assert_eq!(k.grace_override, Some(0));
        let mut s = PodStatus {
            phase: Some(Phase::Running.to_string()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        k.status.unwrap().apply(&mut s, None);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(s.message.as_deref(), Some("node memory 80% >= 70%"));
        let c = s.conditions.unwrap();
        let d = c.iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
        assert_eq!(
            (d.status.as_str(), d.reason.as_deref()),
            ("True", Some("TerminationByKubelet"))
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_node_shutdown_fails_a_running_pod_but_leaves_a_succeeded_one() {
        let msg = "Pod was terminated in response to imminent node shutdown.";
        let k = KillRequest::node_shutdown("Terminated", msg.into(), 10);
        assert_eq!(
            (k.reason, k.grace_override),
            (KillReason::NodeShutdown, Some(10))
        );
        let status = k.status.unwrap();
        // Exited 0 on SIGTERM (generated Succeeded) but running before: Failed. Already
        // Succeeded before the kill: it stays so.
        for (before, after) in [("Running", "Failed"), ("Succeeded", "Succeeded")] {
            let mut s = PodStatus {
                phase: Some("Succeeded".into()),
                ..Default::default()
            };
            let old = PodStatus {
                phase: Some(before.into()),
                ..Default::default()
            };
            status.apply(&mut s, Some(&old));
            assert_eq!(s.phase.as_deref(), Some(after));
            assert_eq!(
                (s.reason.as_deref(), s.message.as_deref()),
                (Some("Terminated"), Some(msg))
            );
            let d = &s.conditions.unwrap()[0];
            assert_eq!(
                (d.type_.as_str(), d.reason.as_deref(), d.message.as_deref()),
                ("DisruptionTarget", Some("TerminationByKubelet"), Some(msg))
            );
        }
        // An eviction fails even a pod that succeeded meanwhile, as kubelet's.
        let mut s = PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        };
        let old = s.clone();
        KillRequest::evicted("x".into(), None)
            .status
            .unwrap()
            .apply(&mut s, Some(&old));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn status_is_written_over_the_generated_one() {
        let mut s = PodStatus {
            phase: Some(Phase::Running.to_string()),
            ..Default::default()
        };
        evicted().apply(&mut s, None);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(
            s.message.as_deref(),
            Some("The node was low on resource: memory.")
        );
    }
}
