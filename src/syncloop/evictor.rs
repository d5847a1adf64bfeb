//! The one evictor (`contracts::Evictor`): the pod manager's pods whose worker is
//! syncing them, killed through the pod workers with reason `Evicted` (kubelet's
//! `killPodNow`) after a Warning event. kubelet's eviction manager and the koordlet
//! side's QoS manager both evict through it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::pod_workers::{KillRequest, Lifecycle, PodSyncer, PodWork, PodWorkers};
use crate::contracts::{Eviction, Evictor};
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::pod::{PodManager, pod_uid};

/// The pod manager, the pod workers and the event recorder, as an [`Evictor`].
pub(crate) struct WorkerEvictor<S: PodSyncer> {
    pub pods: Arc<PodManager>,
    pub workers: PodWorkers<S>,
    pub events: EventRecorder,
}

impl<S: PodSyncer> Evictor for WorkerEvictor<S> {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .all()
            .into_iter()
            .filter(|p| self.workers.lifecycle(pod_uid(p)) == Some(Lifecycle::Syncing))
            .collect()
    }

    fn evict(&self, pod: Arc<Pod>, eviction: Eviction) -> bool {
        if self.workers.lifecycle(pod_uid(&pod)) != Some(Lifecycle::Syncing) {
            return false;
        }
        let Eviction {
            message,
            annotations,
            grace_seconds,
        } = eviction;
        self.events.annotated_event(
            &ObjectRef::pod(&pod),
            EventType::Warning,
            crate::events::reason::EVICTED,
            message.clone(),
            annotations,
        );
        self.workers.update_pod(PodWork::Kill {
            pod,
            kill: KillRequest::evicted(message, grace_seconds),
        });
        true
    }

    fn cleaned_up(&self, uid: &str) -> bool {
        !self.workers.is_active(uid)
    }
}
