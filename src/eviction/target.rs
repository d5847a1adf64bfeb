//! The real eviction target: the pod manager's pods, killed through the pod workers
//! with reason `Evicted` (kubelet's `killPodNow`), with a Warning event.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::manager::EvictionTarget;
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::pod::PodManager;
use crate::pod::pod_uid;
use crate::syncloop::pod_workers::{KillRequest, Lifecycle, PodSyncer, PodWork, PodWorkers};

pub(crate) struct WorkerTarget<S: PodSyncer> {
    pub pods: Arc<PodManager>,
    pub workers: PodWorkers<S>,
    pub events: EventRecorder,
}

impl<S: PodSyncer> EvictionTarget for WorkerTarget<S> {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .all()
            .into_iter()
            .filter(|p| self.workers.lifecycle(pod_uid(p)) == Some(Lifecycle::Syncing))
            .collect()
    }

    fn evict(
        &self,
        pod: Arc<Pod>,
        message: String,
        annotations: BTreeMap<String, String>,
        grace_seconds: i64,
    ) -> bool {
        if self.workers.lifecycle(pod_uid(&pod)) != Some(Lifecycle::Syncing) {
            return false;
        }
        self.events.annotated_event(
            &ObjectRef::pod(&pod),
            EventType::Warning,
            crate::events::reason::EVICTED,
            message.clone(),
            annotations,
        );
        self.workers.update_pod(PodWork::Kill {
            pod,
            kill: KillRequest::evicted(message, Some(grace_seconds)),
        });
        true
    }

    fn cleaned_up(&self, uid: &str) -> bool {
        !self.workers.is_active(uid)
    }
}
