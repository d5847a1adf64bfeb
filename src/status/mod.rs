//! Pod status: generation (`generate`; the QoS class comes from `cm::qos`) kept apart from where statuses are
//! kept and served (the [`StatusManager`]), so cluster mode can add an apiserver
//! writer without touching generation. In cluster mode, `apiserver` writes the statuses
//! to the apiserver (with `patch`: kubelet's merge rules and the patch) and `mirror`
//! keeps a mirror pod for each static pod.

mod apiserver;
mod generate;
mod lease;
mod mirror;
mod node;
mod patch;
mod startup;
mod terminate;

// Generation: a pod's status from what the runtime and the probes say, for the pod syncer.
pub(crate) use generate::{
    ResizeInputs, StatusInputs, generate_pod_status, rejected, was_rejected,
};
pub(crate) use startup::StartupTracker;
pub(crate) use terminate::terminate_pod_status;
// Cluster mode: the status writer, mirror pods, the node's lease and its status.
pub(crate) use apiserver::{Finished, RECONCILE_PERIOD, StatusWriter};
pub(crate) use lease::LeaseController;
pub(crate) use mirror::MirrorPods;
pub(crate) use node::{NodeStatusDeps, NodeStatusTask, Registration, log_node_start};
// The addresses the Node reports, for the serving certificate's names.
pub(crate) use node::node_addresses;
// Node pressure, which the eviction manager sets and the node's conditions show.
pub(crate) use node::{Pressure, PressureSource};
// The `--node-labels` and `--register-with-taints` parsers.
#[cfg(test)]
pub(crate) use apiserver::tests::client_of;
pub(crate) use node::{node_labels, node_taints};

use crate::locks::{Locked as _, ReadWriteLocked as _};
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::Instant;

use k8s_openapi::api::core::v1::PodStatus;
use tokio::sync::broadcast;

/// How many changes a subscriber may fall behind before it is told it lagged.
pub(crate) const CHANGES_CAPACITY: usize = 1024;

/// One status change: pod `uid` now has status `version` (kubelet's versioned status).
/// A subscriber reads the status itself from the manager, so it always writes the latest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusChange {
    pub uid: String,
    pub version: u64,
}

/// The statuses oxlet reports, by pod UID, each with a version bumped on change.
/// Every change is announced to subscribers (the apiserver status writer will be one);
/// a slow subscriber lags, it never holds up the writer.
#[derive(Debug)]
pub(crate) struct StatusManager {
    statuses: RwLock<HashMap<String, (PodStatus, u64)>>,
    changes: broadcast::Sender<StatusChange>,
    /// When each pod's oldest change not yet written to the apiserver was made
    /// (kubelet's `pod_status_sync_duration_seconds` counts from there).
    unwritten_since: Mutex<HashMap<String, Instant>>,
}

impl Default for StatusManager {
    fn default() -> Self {
        StatusManager {
            statuses: RwLock::default(),
            changes: broadcast::channel(CHANGES_CAPACITY).0,
            unwritten_since: Mutex::default(),
        }
    }
}

impl StatusManager {
    /// Pods with a status, and pods with a change not yet written (the census).
    pub(crate) fn census(&self) -> (usize, usize) {
        (
            self.statuses.read_locked().len(),
            self.unwritten_since.locked().len(),
        )
    }

    /// Changes from now on. A receiver that falls more than [`CHANGES_CAPACITY`]
    /// behind gets `RecvError::Lagged` and should re-read every status ([`Self::uids`]).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<StatusChange> {
        self.changes.subscribe()
    }

    /// The last status reported for `uid`.
    pub(crate) fn get(&self, uid: &str) -> Option<PodStatus> {
        self.read(uid, PodStatus::clone)
    }

    /// Reads the last status in place (no clone): housekeeping asks every pod's phase
    /// every two seconds.
    pub(crate) fn read<R>(&self, uid: &str, f: impl FnOnce(&PodStatus) -> R) -> Option<R> {
        self.statuses.read_locked().get(uid).map(|(s, _)| f(s))
    }

    /// Stores a newly generated status; returns true when it differs from the last one.
    pub(crate) fn set(&self, uid: &str, status: PodStatus) -> bool {
        self.set_if(uid, status, |_| true)
    }

    /// Replaces a pod's status only while it is still `expected`, so an adjustment
    /// made from an older read never overwrites a newer sync.
    pub(crate) fn replace_if_unchanged(
        &self,
        uid: &str,
        expected: &PodStatus,
        status: PodStatus,
    ) -> bool {
        self.set_if(uid, status, |current| current == Some(expected))
    }

    fn set_if(
        &self,
        uid: &str,
        status: PodStatus,
        allowed: impl FnOnce(Option<&PodStatus>) -> bool,
    ) -> bool {
        let mut map = self.statuses.write_locked();
        if !allowed(map.get(uid).map(|(s, _)| s)) {
            return false;
        }
        let version = match map.get_mut(uid) {
            Some((old, _)) if *old == status => return false,
            Some((old, version)) => {
                *old = status;
                *version += 1;
                *version
            }
            None => {
                map.insert(uid.to_string(), (status, 1));
                1
            }
        };
        self.unwritten()
            .entry(uid.to_string())
            .or_insert_with(Instant::now);
        // Sent under the lock so each pod's versions reach subscribers in order; a
        // broadcast send never waits, and having no subscriber is not an error.
        let _ = self.changes.send(StatusChange {
            uid: uid.to_string(),
            version,
        });
        true
    }

    /// The version of a pod's status (how many times it changed).
    pub(crate) fn version(&self, uid: &str) -> u64 {
        self.statuses.read_locked().get(uid).map_or(0, |(_, v)| *v)
    }

    fn unwritten(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.unwritten_since.locked()
    }

    /// The apiserver now has the pod's status: how long its oldest unwritten change
    /// waited (None when nothing was pending).
    pub(crate) fn written(&self, uid: &str) -> Option<std::time::Duration> {
        self.unwritten().remove(uid).map(|t| t.elapsed())
    }

    /// Forgets a pod that is gone.
    pub(crate) fn remove(&self, uid: &str) {
        self.statuses.write_locked().remove(uid);
        self.unwritten().remove(uid);
    }

    /// Keeps only the statuses `keep` accepts (housekeeping forgets the statuses of
    /// pods that are gone); returns the UIDs forgotten.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let mut removed = Vec::new();
        self.statuses.write_locked().retain(|uid, _| {
            let k = keep(uid);
            if !k {
                removed.push(uid.clone());
            }
            k
        });
        let mut unwritten = self.unwritten();
        for uid in &removed {
            unwritten.remove(uid);
        }
        removed
    }

    /// UIDs with a status.
    pub(crate) fn uids(&self) -> Vec<String> {
        self.statuses.read_locked().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
