//! Evicting a pod. kubelet's eviction manager and the koordlet side's QoS manager
//! decide which pod goes; the sync loop's pod workers carry the kill out (kubelet's
//! `killPodNow`). Both deciders hold this one trait, the sync loop has the one
//! implementation (`syncloop::WorkerEvictor`), and unit tests use fakes.
//!
//! The node shutdown manager stops pods through the same pod workers, with a status
//! of its own and no event, and waits for them ([`PodTerminator`], kubelet's
//! `killPodFunc` as that manager calls it); the same `WorkerEvictor` implements it.

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

/// A kill with a status of the caller's own (kubelet's `killPodFunc` with a status
/// function): the pod ends `Failed` (a `Succeeded` one stays so) with this reason and
/// message, and a `DisruptionTarget` condition (reason `TerminationByKubelet`) saying
/// the same message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Termination {
    pub reason: String,
    pub message: String,
    /// The grace period to stop the pod with (it still only ever shortens one).
    pub grace_seconds: i64,
}

/// Stopping every pod, and knowing when each has stopped.
pub(crate) trait PodTerminator: Send + Sync {
    /// Pods admitted and not yet stopped: running, or already stopping (kubelet's
    /// `GetActivePods`, which keeps pods whose termination was requested).
    fn running_pods(&self) -> Vec<Arc<Pod>>;
    /// Stops `pod` with `termination`'s grace and status, without an event. False
    /// when its worker had already stopped it.
    fn terminate(&self, pod: Arc<Pod>, termination: Termination) -> bool;
    /// Whether the pod's containers are stopped (its worker is past terminating, or gone).
    fn terminated(&self, uid: &str) -> bool;
}
