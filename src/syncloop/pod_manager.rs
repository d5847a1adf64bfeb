//! The pod manager: the desired pods, by UID, as the config sources last said.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;

use crate::pod::pod_uid;

/// The desired pods (kubelet's `pod.Manager`). Read by the server and housekeeping.
#[derive(Debug, Default)]
pub struct PodManager {
    pods: RwLock<HashMap<String, Arc<Pod>>>,
}

impl PodManager {
    pub fn add_or_update(&self, pod: Arc<Pod>) {
        self.pods
            .write()
            .unwrap()
            .insert(pod_uid(&pod).to_string(), pod);
    }
    pub fn remove(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pods.write().unwrap().remove(uid)
    }
    pub fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pods.read().unwrap().get(uid).cloned()
    }
    pub fn contains(&self, uid: &str) -> bool {
        self.pods.read().unwrap().contains_key(uid)
    }
    /// Every desired pod, oldest first (by creation time, then name).
    pub fn all(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> = self.pods.read().unwrap().values().cloned().collect();
        pods.sort_by(|a, b| {
            let key = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        pods
    }
    pub fn len(&self) -> usize {
        self.pods.read().unwrap().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
