//! What a request to stop a pod carries (kubelet's `KillPodOptions`): why, a grace
//! period override, and the status to set on the pod (kubelet's `PodStatusFunc`).
//! Removal from the config and runtime-only pods use it today; eviction and probes
//! will send theirs through the same pod-worker input.

use std::fmt;

use k8s_openapi::api::core::v1::PodStatus;

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
}

impl KillReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KillReason::RemovedFromConfig => "removed from config",
            KillReason::RuntimeOnly => "runtime-only pod",
            KillReason::Deleted => "deleted",
            KillReason::Terminal => "pod is terminal",
            KillReason::DeadlineExceeded => "active deadline exceeded",
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KillStatus {
    pub phase: Phase,
    pub reason: String,
    pub message: String,
}

impl KillStatus {
    /// Writes the phase, reason and message over a generated status.
    pub(crate) fn apply(&self, status: &mut PodStatus) {
        status.phase = Some(self.phase.to_string());
        status.reason = Some(self.reason.clone());
        status.message = Some(self.message.clone());
    }
}

/// A request to stop a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    fn status_is_written_over_the_generated_one() {
        let mut s = PodStatus {
            phase: Some(Phase::Running.to_string()),
            ..Default::default()
        };
        evicted().apply(&mut s);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(
            s.message.as_deref(),
            Some("The node was low on resource: memory.")
        );
    }
}
