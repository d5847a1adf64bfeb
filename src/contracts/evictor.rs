//! Evicting a pod. kubelet's eviction manager and the koordlet side's QoS manager
//! decide which pod goes; the sync loop's pod workers carry the kill out (kubelet's
//! `killPodNow`). Both deciders hold this one trait, the sync loop has the one
//! implementation (`syncloop::WorkerEvictor`), and unit tests use fakes.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// What an eviction says, and how long the pod gets to stop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Eviction {
    /// The pod's status message, and the `Evicted` event's.
    pub message: String,
    /// Annotations on the `Evicted` event (kubelet's eviction manager names the
    /// offending containers and their usage there).
    pub annotations: BTreeMap<String, String>,
    /// The grace period to stop the pod with; `None` keeps the pod's own.
    pub grace_seconds: Option<i64>,
}

impl Eviction {
    /// An eviction with `message`, no event annotations and the pod's own grace period.
    pub(crate) fn new(message: String) -> Eviction {
        Eviction {
            message,
            ..Eviction::default()
        }
    }
}

/// Who may be evicted, and the act of evicting.
pub(crate) trait Evictor: Send + Sync {
    /// Pods admitted and still running (their worker is syncing them).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Kills `pod` as evicted, with a Warning `Evicted` event. False when the pod was
    /// not running: one that is already stopping keeps the reason it stops for.
    fn evict(&self, pod: Arc<Pod>, eviction: Eviction) -> bool;
    /// Whether the pod's worker finished (containers and sandbox gone).
    fn cleaned_up(&self, uid: &str) -> bool;
}
