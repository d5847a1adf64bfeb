//! How the QoS manager evicts: a kill with reason `Evicted` through the pod workers
//! (kubelet's `killPodNow`, the path the eviction manager uses too), and a Warning
//! event on the pod. Only a pod whose worker is still syncing is evicted: one that is
//! already stopping keeps the reason it stops for.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::pod::pod_uid;
use crate::syncloop::pod_workers::{KillRequest, Lifecycle, PodSyncer, PodWork, PodWorkers};

/// The one boundary for evicting (a fake in unit tests).
pub(crate) trait Evictor: Send + Sync {
    /// Evicts `pod` with `message`; false when it has no syncing worker.
    fn evict(&self, pod: Arc<Pod>, message: String) -> bool;
}

/// The real evictor: the pod workers and the event recorder.
pub(crate) struct WorkerEvictor<S: PodSyncer> {
    pub workers: PodWorkers<S>,
    pub events: EventRecorder,
}

impl<S: PodSyncer> Evictor for WorkerEvictor<S> {
    fn evict(&self, pod: Arc<Pod>, message: String) -> bool {
        if self.workers.lifecycle(pod_uid(&pod)) != Some(Lifecycle::Syncing) {
            return false;
        }
        self.events.event(
            &ObjectRef::pod(&pod),
            EventType::Warning,
            crate::events::reason::EVICTED,
            message.clone(),
        );
        // koordlet stops the containers at once (StopContainer with timeout 0);
        // oxlet keeps the pod's own grace period, as kubelet's API eviction does.
        self.workers.update_pod(PodWork::Kill {
            pod,
            kill: KillRequest::evicted(message, None),
        });
        true
    }
}
