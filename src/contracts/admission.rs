//! Pod admission (kubelet's `lifecycle.PodAdmitHandler`): the sync loop's additions
//! handler asks an ordered chain of handlers whether a new pod may run here; the
//! first rejection wins. The handlers live with what they know (eviction pressure in
//! `eviction`, the sysctl allowlist and `maxPods` in `syncloop`, resource fit in `cm`);
//! the agent builds the chain in kubelet's order.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// What a handler sees (kubelet's `PodAdmitAttributes`): the pod asking, and the
/// pods already admitted and not finished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PodAdmitAttributes<'a> {
    pub pod: &'a Pod,
    pub other_pods: &'a [Arc<Pod>],
}

/// Why a pod may not run here: kubelet's `PodAdmitResult` with `admit: false`. The
/// reason (e.g. `OutOfpods`) and message go into the rejected pod's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub(crate) struct Rejection {
    pub reason: String,
    pub message: String,
}

/// One admission check. Handlers must be quick and must not block: they run inside
/// the sync loop, once per added pod.
pub(crate) trait PodAdmitHandler: Send + Sync {
    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// `Ok` admits; `Err` rejects with kubelet's reason and message.
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection>;
}

/// The handlers, asked in order (kubelet's `admitHandlers`).
#[derive(Default)]
pub(crate) struct AdmissionChain {
    handlers: Vec<Box<dyn PodAdmitHandler>>,
}

impl std::fmt::Debug for AdmissionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.handlers.iter().map(|h| h.name()).collect();
        f.debug_struct("AdmissionChain")
            .field("handlers", &names)
            .finish()
    }
}

impl AdmissionChain {
    /// Appends a handler; it is asked after those already in the chain.
    pub(crate) fn push(&mut self, handler: Box<dyn PodAdmitHandler>) {
        self.handlers.push(handler);
    }

    /// Asks each handler in order; the first rejection is the answer (kubelet's
    /// `canAdmitPod`).
    pub(crate) fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        self.handlers.iter().try_for_each(|h| h.admit(attrs))
    }
}
