//! The pod status writer (kubelet's status manager `syncBatch`/`syncPod`): it follows
//! the [`StatusManager`]'s changes, writes each pod's status to the apiserver only when
//! its version is newer than the one last written, and re-asserts every status on a
//! period, so a status changed by someone else or lost in an outage comes back. Static
//! pods report through their mirror pod. Once a pod being deleted has finished, it
//! sends the final DELETE (grace 0, UID precondition).
//!
//! Errors are per pod: logged, and retried on the next pass. The writer never blocks
//! anything else: the manager's channel is a broadcast that lags rather than waits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::StatusManager;
use super::patch;
use crate::pod::PodManager;
use crate::pod::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, is_static_pod, pod_ref};

/// kubelet's `syncPeriod` of the status manager: every status is re-asserted this often.
pub(crate) const RECONCILE_PERIOD: Duration = Duration::from_secs(10);
/// The longest one pod's sync may take, so a hung request cannot stall the writer.
const POD_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a pod's worker has finished with it (terminated, nothing left running):
/// handed in by the agent so this module does not reach into the sync loop.
pub(crate) type Finished = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Why one pod's status was not written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("{pod}: {action}: {source}")]
    Api {
        pod: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("{pod}: no answer from the apiserver within {POD_SYNC_TIMEOUT:?}")]
    Timeout { pod: String },
}

/// What became of one pod's sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing to write to (no pod, no mirror pod yet, another pod by that name).
    Skipped,
    /// The apiserver already had our status.
    Unchanged,
    Patched,
    /// A check refused our status (terminal phase, terminated container).
    Refused,
    /// The final DELETE went out.
    Deleted,
}

/// The status writer. Built anew on each restart of its task: it then writes every
/// status once, as kubelet does after a restart.
pub(crate) struct StatusWriter {
    client: kube::Client,
    statuses: Arc<StatusManager>,
    pods: Arc<PodManager>,
    finished: Finished,
    period: Duration,
    /// The version last written per pod UID; only UIDs the manager holds are kept.
    written: HashMap<String, u64>,
    /// Notified by the mirror reconciler when it created a mirror pod: the static
    /// pods' statuses are written then, not on the next period.
    mirror_created: Option<Arc<Notify>>,
}

impl StatusWriter {
    pub(crate) fn new(
        client: kube::Client,
        statuses: Arc<StatusManager>,
        pods: Arc<PodManager>,
        finished: Finished,
        period: Duration,
    ) -> Self {
        StatusWriter {
            client,
            statuses,
            pods,
            finished,
            period,
            written: HashMap::new(),
            mirror_created: None,
        }
    }

    /// Write the static pods' statuses whenever `created` is notified (a mirror pod
    /// was created).
    pub(crate) fn with_mirror_created(mut self, created: Arc<Notify>) -> Self {
        self.mirror_created = Some(created);
        self
    }

    /// Runs until cancelled.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = self.follow() => {}
        }
    }

    async fn follow(&mut self) {
        let mut changes = self.statuses.subscribe();
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let created = self.mirror_created.clone().unwrap_or_default();
        loop {
            tokio::select! {
                () = created.notified() => self.sync_static().await,
                change = changes.recv() => match change {
                    Ok(c) if c.version > self.written_version(&c.uid) => {
                        self.sync_logged(&c.uid).await;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(n)) => {
                        debug!(missed = n, "status writer lagged; re-reading every status");
                        self.sync_all(false).await;
                    }
                    Err(RecvError::Closed) => return,
                },
                // The first tick is at once: everything is written after a (re)start.
                _ = tick.tick() => self.sync_all(true).await,
            }
        }
    }

    fn written_version(&self, uid: &str) -> u64 {
        self.written.get(uid).copied().unwrap_or(0)
    }

    /// Syncs every pod with a newer version or waiting for its final DELETE (kubelet's
    /// `needsUpdate`), and (`reconcile`) every pod whose apiserver copy in the pod
    /// manager differs from ours (kubelet's `needsReconcile`): a quiet node makes no
    /// requests, and each sync still reads the pod before it patches.
    pub(crate) async fn sync_all(&mut self, reconcile: bool) {
        let uids = self.statuses.uids();
        self.written.retain(|uid, _| uids.contains(uid));
        for uid in uids {
            if self.statuses.version(&uid) > self.written_version(&uid)
                || self.awaits_final_delete(&uid)
                || (reconcile && self.needs_reconcile(&uid))
            {
                self.sync_logged(&uid).await;
            }
        }
    }

    /// Every static pod's status, read against the apiserver (its mirror pod was just
    /// created; the pod manager may not have seen it yet).
    async fn sync_static(&mut self) {
        for uid in self.statuses.uids() {
            if self.pods.get(&uid).is_some_and(|p| is_static_pod(&p)) {
                self.sync_logged(&uid).await;
            }
        }
    }

    /// kubelet's `canBeDeleted` part of `needsUpdate`: an apiserver pod being deleted
    /// whose worker has finished is synced until the final DELETE went out.
    fn awaits_final_delete(&self, uid: &str) -> bool {
        let Some(pod) = self.pods.get(uid) else {
            return false;
        };
        !is_static_pod(&pod)
            && pod.metadata.deletion_timestamp.is_some()
            && self.statuses.get(uid).is_some_and(|s| can_be_deleted(&s))
            && (self.finished)(uid)
    }

    /// kubelet's `needsReconcile`: whether the pod manager's copy of the apiserver pod
    /// (a static pod's: its current mirror pod) shows another status than ours would
    /// leave after a merge. No pod, or no mirror pod yet: nothing to reconcile.
    fn needs_reconcile(&self, uid: &str) -> bool {
        let Some(pod) = self.pods.get(uid) else {
            return false;
        };
        let Some(ours) = self.statuses.get(uid) else {
            return false;
        };
        let target = if is_static_pod(&pod) {
            match self.pods.get_mirror_of_static(&pod) {
                Some(m) if mirror_hash(&m) == Some(config_hash(&pod)) => m,
                _ => return false,
            }
        } else {
            pod
        };
        let target_uid = target.metadata.uid.as_deref().unwrap_or_default();
        let old = target.status.clone().unwrap_or_default();
        let differs = patch::status_patch(target_uid, &old, &patch::merge(&old, &ours)).is_some();
        if differs {
            debug!(pod = %pod_ref(&target), podUID = uid, "the apiserver's status differs from ours; reconciling");
        }
        differs
    }

    async fn sync_logged(&mut self, uid: &str) {
        if let Err(e) = self.sync_pod(uid).await {
            warn!(podUID = uid, error = %e, "cannot update the pod's status; retrying on the next pass");
        }
    }

    /// kubelet's `syncPod`: one pod's status to the apiserver, then the final DELETE.
    pub(crate) async fn sync_pod(&mut self, uid: &str) -> Result<Outcome, WriteError> {
        let Some(pod) = self.pods.get(uid) else {
            return Ok(Outcome::Skipped);
        };
        // The version first: what is written is at least as new as it.
        let version = self.statuses.version(uid);
        let Some(ours) = self.statuses.get(uid) else {
            return Ok(Outcome::Skipped);
        };
        let name = pod_ref(&pod);
        let outcome = tokio::time::timeout(POD_SYNC_TIMEOUT, self.write(&pod, &ours))
            .await
            .map_err(|_| WriteError::Timeout { pod: name.clone() })??;
        if outcome != Outcome::Skipped {
            self.written.insert(uid.to_string(), version);
            // The apiserver is up to date either way; only a patch is timed.
            let waited = self.statuses.written(uid);
            if let (Outcome::Patched, Some(w)) = (outcome, waited) {
                crate::metrics::kubelet()
                    .pod_status_sync_duration
                    .observe(w.as_secs_f64());
            }
        }
        Ok(outcome)
    }

    async fn write(&self, pod: &Pod, ours: &PodStatus) -> Result<Outcome, WriteError> {
        let name = pod_ref(pod);
        let err = |action| {
            let pod = name.clone();
            move |source| WriteError::Api {
                pod,
                action,
                source,
            }
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        let Some(target) = api.get_opt(pod_name).await.map_err(err("get"))? else {
            debug!(pod = %name, "no such pod in the apiserver; status not written");
            return Ok(Outcome::Skipped);
        };
        let uid = crate::pod::pod_uid(pod);
        let is_static = is_static_pod(pod);
        if is_static {
            if mirror_hash(&target) != Some(config_hash(pod)) {
                debug!(pod = %name, "no mirror pod of this static pod yet; status not written");
                return Ok(Outcome::Skipped);
            }
        } else if target.metadata.uid.as_deref() != Some(uid) {
            debug!(pod = %name, podUID = uid, "the apiserver's pod has another UID; status not written");
            return Ok(Outcome::Skipped);
        }
        let target_uid = target.metadata.uid.clone().unwrap_or_default();
        let old = target.status.clone().unwrap_or_default();
        // kubelet's status manager: for a static pod the mirror's status is the old
        // one, so unchanged conditions keep their transition times and the start time
        // stays (after a restart). On every write, not just the first: a status the
        // pod worker computed while the first write was under way would otherwise
        // bring the restart's times back (seen under load).
        let mut kept;
        let ours = if is_static {
            kept = ours.clone();
            crate::status::generate::keep_times_from(&mut kept, &old);
            if kept != *ours {
                self.statuses.replace_if_unchanged(uid, ours, kept.clone());
            }
            &kept
        } else {
            ours
        };
        let merged = patch::merge(&old, ours);
        if let Err(why) = patch::check(&target, &merged) {
            warn!(pod = %name, reason = %why, "status update refused");
            return Ok(Outcome::Refused);
        }
        let mut outcome = Outcome::Unchanged;
        if let Some(p) = patch::status_patch(&target_uid, &old, &merged) {
            api.patch_status(pod_name, &PatchParams::default(), &Patch::Merge(p))
                .await
                .map_err(err("patch status"))?;
            let phase = merged.phase.as_deref().unwrap_or("Unknown");
            let ready = merged
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .map_or("Unknown", |c| c.status.as_str());
            info!(target: crate::logging::V3_TARGET, pod = %name, podUID = uid, phase, ready,
                "pod status written to the apiserver (phase {phase}, Ready {ready})");
            outcome = Outcome::Patched;
        }
        if !is_static
            && target.metadata.deletion_timestamp.is_some()
            && can_be_deleted(&merged)
            && (self.finished)(uid)
        {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(target_uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            api.delete(pod_name, &params).await.map_err(err("delete"))?;
            info!(pod = %name, podUID = uid, "pod deleted from the apiserver (final delete)");
            outcome = Outcome::Deleted;
        }
        Ok(outcome)
    }
}

/// A static pod's hash (`kubernetes.io/config.hash`, its UID when unset).
pub(crate) fn config_hash(pod: &Pod) -> &str {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
        .map_or_else(|| crate::pod::pod_uid(pod), String::as_str)
}

/// A mirror pod's `kubernetes.io/config.mirror` annotation.
pub(crate) fn mirror_hash(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_MIRROR_ANNOTATION))
        .map(String::as_str)
}

/// Whether our status says the pod is done: a terminal phase, or every container
/// terminated (kubelet's `canBeDeleted` with its pod-worker check handed in apart).
fn can_be_deleted(status: &PodStatus) -> bool {
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect::<Vec<_>>();
    !all.is_empty()
        && all.iter().all(|c| {
            c.state
                .as_ref()
                .is_some_and(|s| s.running.is_none() && s.terminated.is_some())
        })
}

#[cfg(test)]
#[path = "apiserver_tests.rs"]
pub(super) mod tests;
