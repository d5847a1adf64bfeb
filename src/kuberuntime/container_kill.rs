//! kubelet's `kuberuntime_container.go`, its stopping half: `killContainer` (the
//! preStop hook inside the grace period, a sidecar's turn, then `StopContainer`) and
//! `removeContainer` (the container, then its log files and legacy log symlink), with
//! one removal of a container at a time.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info, warn};

use super::labels;
use super::lifecycle;
use super::manager::RuntimeManager;
use super::sidecar::TerminationOrder;
use crate::cri::CriError;
use crate::locks::Locked as _;
use crate::pod::{pod_ref, pod_uid};

impl RuntimeManager {
    /// Stops one container as kubelet's `killContainer` does: its preStop hook inside the
    /// grace budget, then (for a pod with sidecars) its turn in the termination order, then
    /// StopContainer with what is left, at least 2 s.
    pub(super) async fn stop_with_hooks(
        &self,
        pod: &Pod,
        plan: &lifecycle::StopPlan,
        target: &lifecycle::HookTarget,
        order: Option<&TerminationOrder>,
    ) -> Result<(), CriError> {
        let mut grace =
            lifecycle::run_pre_stop(self.cri.as_ref(), pod, plan, target, &self.events).await;
        // Sidecars stop after the app containers and the sidecars after them,
        // within their own grace (kubelet's `waitForTurn`).
        if let Some(order) = order.filter(|_| grace > 0) {
            let budget = Duration::from_secs(grace.unsigned_abs());
            let waited = order.wait_for_turn(&plan.name, budget).await;
            if !waited.is_zero() {
                info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name, waitedMs = waited.as_millis() as u64, "sidecar stops after the containers it serves");
            }
            grace = lifecycle::grace_after_pre_stop(grace, waited);
        }
        info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name, containerID = %plan.id, gracePeriod = grace, "stopping container");
        let stopped = gone_is_ok(self.cri.stop_container(&plan.id, grace).await);
        if let Some(order) = order {
            order.stopped(&plan.name);
        }
        stopped
    }

    /// Removes a container and then its log file, as kubelet's `removeContainer` does
    /// (the log goes with the container, the kept dead instance keeps its log). An
    /// `unknown`-state container may still run, so it is stopped first.
    pub(crate) async fn remove_container(
        &self,
        id: &str,
        stop_first: bool,
    ) -> Result<(), CriError> {
        let Some(_claim) = RemovalClaim::take(&self.removing, id) else {
            debug!(containerID = %id, "container is being removed already");
            return Ok(());
        };
        self.remove_container_once(id, stop_first).await
    }

    async fn remove_container_once(&self, id: &str, stop_first: bool) -> Result<(), CriError> {
        if stop_first {
            gone_is_ok(self.cri.stop_container(id, MIN_GRACE_SECS).await)?;
        }
        let status = match self.cri.container_status(id).await {
            Ok(st) => st,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        gone_is_ok(self.cri.remove_container(id).await)?;
        let root = self.pod_logs_dir();
        if !status.log_path.is_empty() {
            // With its rotated files (kubelet's log manager `Clean`).
            let log = std::path::Path::new(&status.log_path);
            if let Err(e) = crate::logs::remove_container_logs(root, log) {
                warn!(containerID = %id, path = %status.log_path, error = %e, "cannot remove container log");
            }
        }
        if let (Some(dir), Some(of)) = (&self.log_symlink_dir, labels::log_link_of(id, &status))
            && let Err(e) = crate::logs::remove_log_link(dir, root, of)
        {
            warn!(containerID = %id, error = %e, "cannot remove legacy container log symlink");
        }
        Ok(())
    }
}

/// The pod's `terminationGracePeriodSeconds` (API default 30).
pub(super) fn termination_grace(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
}

/// kubelet's `minimumGracePeriodInSeconds`: the grace of a stop without a pod spec.
pub(super) const MIN_GRACE_SECS: i64 = lifecycle::MIN_GRACE_SECS;

/// How one container of a pod with a spec is stopped: the grace given, and the
/// container's preStop hook from the spec.
pub(super) fn stop_plan(pod: &Pod, id: &str, name: &str, grace: i64) -> lifecycle::StopPlan {
    lifecycle::StopPlan {
        id: id.to_string(),
        name: name.to_string(),
        grace,
        pre_stop: lifecycle::container_spec(pod, name)
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.clone()),
    }
}

/// One caller's claim on removing a container; released when dropped, so a removal
/// cut short (a cancelled task) never blocks later ones.
struct RemovalClaim<'a> {
    set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
    id: String,
}

impl<'a> RemovalClaim<'a> {
    fn take(
        set: &'a std::sync::Mutex<std::collections::HashSet<String>>,
        id: &str,
    ) -> Option<Self> {
        set.locked().insert(id.to_string()).then(|| RemovalClaim {
            set,
            id: id.to_string(),
        })
    }
}

impl Drop for RemovalClaim<'_> {
    fn drop(&mut self) {
        self.set.locked().remove(&self.id);
    }
}

/// A stop or remove of something already gone has done its job.
pub(super) fn gone_is_ok(res: Result<(), CriError>) -> Result<(), CriError> {
    match res {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    /// Two callers removing the same container at once: one removes it, the other steps
    /// aside; a claim dropped (a cancelled removal) frees the container for later ones.
    #[test]
    fn one_removal_per_container_at_a_time() {
        let set = std::sync::Mutex::new(std::collections::HashSet::new());
        let first = super::RemovalClaim::take(&set, "c1").expect("first claim");
        assert!(super::RemovalClaim::take(&set, "c1").is_none());
        assert!(super::RemovalClaim::take(&set, "c2").is_some());
        drop(first);
        assert!(super::RemovalClaim::take(&set, "c1").is_some());
    }
}
