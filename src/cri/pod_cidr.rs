//! The node's pod CIDR as last handed to the runtime (kubelet's `runtimeState.podCIDR`
//! and `updatePodCIDR`): set once at start from `--pod-cidr`, then from the Node's
//! `spec.podCIDRs` whenever node status sync sees them change (the node IPAM
//! controller assigns them after registration). Each change is one CRI
//! `UpdateRuntimeConfig`; an unchanged CIDR costs nothing.

use tokio::sync::Mutex;
use tracing::info;

use super::{CriError, RemoteRuntime};
use crate::logging::STARTUP_TARGET;

/// The runtime's current pod CIDR and the client that changes it.
pub(crate) struct PodCidr {
    cri: RemoteRuntime,
    /// Held across the CRI call, so two updates never interleave (kubelet's
    /// `updatePodCIDRMux`). Empty until the first update succeeds.
    current: Mutex<String>,
}

impl PodCidr {
    pub(crate) fn new(cri: RemoteRuntime) -> Self {
        PodCidr {
            cri,
            current: Mutex::new(String::new()),
        }
    }

    /// Hands `cidr` (one CIDR, or an IPv4 and an IPv6 one joined by a comma) to the
    /// runtime unless it already has it. Returns whether it was new. A failed call
    /// leaves the current CIDR as it was, so the next sync tries again.
    pub(crate) async fn update(&self, cidr: &str) -> Result<bool, CriError> {
        let mut current = self.current.lock().await;
        if *current == cidr {
            return Ok(false);
        }
        self.cri.update_pod_cidr(cidr).await?;
        // kubelet logs it at every verbosity.
        info!(target: STARTUP_TARGET, originalPodCIDR = %current, newPodCIDR = %cidr, "Updating Pod CIDR");
        *current = cidr.to_string();
        Ok(true)
    }
}
