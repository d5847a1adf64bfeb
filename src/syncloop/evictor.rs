//! The one evictor (`contracts::Evictor`): the pod manager's pods whose worker is
//! syncing them, killed through the pod workers with reason `Evicted` (kubelet's
//! `killPodNow`) after a Warning event. kubelet's eviction manager and the koordlet
//! side's QoS manager both evict through it. It is also the node shutdown manager's
//! `contracts::PodTerminator`: the same kill with kubelet's shutdown status, no event.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::pod_workers::{KillRequest, Lifecycle, PodSyncer, PodWork, PodWorkers};
use crate::contracts::{Eviction, Evictor, PodTerminator, Termination};
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::pod::{PodManager, pod_uid};

/// The pod manager, the pod workers and the event recorder, as an [`Evictor`].
pub(crate) struct WorkerEvictor<S: PodSyncer> {
    pub pods: Arc<PodManager>,
    pub workers: PodWorkers<S>,
    pub events: EventRecorder,
    /// The pods are weighed at what they were admitted or resized at, not at what a
    /// waiting resize asks for (kubelet's allocated pods).
    pub allocation: Arc<super::AllocationManager>,
}

impl<S: PodSyncer> Evictor for WorkerEvictor<S> {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .all()
            .into_iter()
            .filter(|p| self.workers.lifecycle(pod_uid(p)) == Some(Lifecycle::Syncing))
            .map(|p| self.allocation.allocated_pod(&p))
            .collect()
    }

    fn evict(&self, pod: Arc<Pod>, eviction: Eviction) -> bool {
        if self.workers.lifecycle(pod_uid(&pod)) != Some(Lifecycle::Syncing) {
            return false;
        }
        // The pod as its source has it (the ranking saw its allocation).
        let pod = self.pods.get(pod_uid(&pod)).unwrap_or(pod);
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

impl<S: PodSyncer> PodTerminator for WorkerEvictor<S> {
    fn running_pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .all()
            .into_iter()
            .filter(|p| {
                matches!(
                    self.workers.lifecycle(pod_uid(p)),
                    Some(Lifecycle::Syncing | Lifecycle::Terminating)
                )
            })
            .collect()
    }

    fn terminate(&self, pod: Arc<Pod>, termination: Termination) -> bool {
        if !matches!(
            self.workers.lifecycle(pod_uid(&pod)),
            Some(Lifecycle::Syncing | Lifecycle::Terminating)
        ) {
            return false;
        }
        let Termination {
            reason,
            message,
            grace_seconds,
        } = termination;
        self.workers.update_pod(PodWork::Kill {
            pod,
            kill: KillRequest::node_shutdown(&reason, message, grace_seconds),
        });
        true
    }

    fn terminated(&self, uid: &str) -> bool {
        matches!(
            self.workers.lifecycle(uid),
            None | Some(Lifecycle::Terminated | Lifecycle::Finished)
        )
    }
}
