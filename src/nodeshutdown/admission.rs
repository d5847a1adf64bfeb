//! kubelet's shutdown manager is also an admission handler: while the node shuts down,
//! a new pod is refused with its reason and message.

use std::sync::Arc;

use crate::contracts::{NodeShutdownState, PodAdmitAttributes, PodAdmitHandler, Rejection};

/// kubelet's reason and message for a pod refused during a shutdown.
pub(crate) const NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub(crate) const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";

/// Refuses every pod while the node shuts down.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownAdmission {
    pub state: Arc<NodeShutdownState>,
}

impl PodAdmitHandler for ShutdownAdmission {
    fn name(&self) -> &'static str {
        "nodeShutdown"
    }

    fn admit(&self, _: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        if !self.state.is_shutting_down() {
            return Ok(());
        }
        Err(Rejection {
            reason: NOT_ADMITTED_REASON.into(),
            message: NOT_ADMITTED_MESSAGE.into(),
        })
    }
}
