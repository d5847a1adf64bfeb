//! Pod status: generation (`generate`, `qos`) kept apart from where statuses are
//! kept and served (the [`StatusManager`]), so cluster mode can add an apiserver
//! writer without touching generation.

pub mod generate;
pub mod qos;
pub mod startup;

use std::collections::HashMap;
use std::sync::RwLock;

use k8s_openapi::api::core::v1::PodStatus;

/// The statuses oxlet reports, by pod UID, each with a version bumped on change.
#[derive(Debug, Default)]
pub struct StatusManager {
    statuses: RwLock<HashMap<String, (PodStatus, u64)>>,
}

impl StatusManager {
    /// The last status reported for `uid`.
    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        self.statuses
            .read()
            .unwrap()
            .get(uid)
            .map(|(s, _)| s.clone())
    }

    /// Stores a newly generated status; returns true when it differs from the last one.
    pub fn set(&self, uid: &str, status: PodStatus) -> bool {
        let mut map = self.statuses.write().unwrap();
        match map.get_mut(uid) {
            Some((old, _)) if *old == status => false,
            Some((old, version)) => {
                *old = status;
                *version += 1;
                true
            }
            None => {
                map.insert(uid.to_string(), (status, 1));
                true
            }
        }
    }

    /// The version of a pod's status (how many times it changed).
    pub fn version(&self, uid: &str) -> u64 {
        self.statuses
            .read()
            .unwrap()
            .get(uid)
            .map_or(0, |(_, v)| *v)
    }

    /// Forgets a pod that is gone.
    pub fn remove(&self, uid: &str) {
        self.statuses.write().unwrap().remove(uid);
    }

    /// Keeps only the statuses `keep` accepts (housekeeping forgets the statuses of
    /// pods that are gone); returns the UIDs forgotten.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let mut removed = Vec::new();
        self.statuses.write().unwrap().retain(|uid, _| {
            let k = keep(uid);
            if !k {
                removed.push(uid.clone());
            }
            k
        });
        removed
    }

    /// UIDs with a status.
    pub fn uids(&self) -> Vec<String> {
        self.statuses.read().unwrap().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
