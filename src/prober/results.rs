//! The probe result caches (kubelet's `prober/results`): the latest result of each
//! probe type per container ID, and the channel that tells the sync loop when one
//! changed (as kubelet's liveness/readiness/startup managers' `Updates()`).

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use super::ProbeKind;

/// A probe's cached outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeResult {
    Unknown,
    Success,
    Failure,
}

impl ProbeResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProbeResult::Unknown => "Unknown",
            ProbeResult::Success => "Success",
            ProbeResult::Failure => "Failure",
        }
    }
}

/// One changed result, for the sync loop's select.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeUpdate {
    pub pod_uid: String,
    pub container_id: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

/// The three caches, keyed by the runtime's container ID (a restarted container has a
/// new ID, so it starts from the initial result again).
#[derive(Debug)]
pub(crate) struct ProbeResults {
    caches: Mutex<HashMap<(ProbeKind, String), ProbeResult>>,
    updates: mpsc::Sender<ProbeUpdate>,
}

impl ProbeResults {
    /// Cached probe results (the census).
    pub(crate) fn len(&self) -> usize {
        self.caches.locked().len()
    }

    /// The caches and the receiving end of their updates (bounded: workers wait when
    /// the loop is behind, so no update is dropped).
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<ProbeUpdate>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            ProbeResults {
                caches: Mutex::default(),
                updates: tx,
            },
            rx,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(ProbeKind, String), ProbeResult>> {
        self.caches.locked()
    }

    pub(crate) fn get(&self, kind: ProbeKind, container_id: &str) -> Option<ProbeResult> {
        self.lock().get(&(kind, container_id.to_string())).copied()
    }

    /// Stores `result`; when it changed, the sync loop hears of it.
    pub(crate) async fn set(
        &self,
        kind: ProbeKind,
        pod_uid: &str,
        container_id: &str,
        result: ProbeResult,
    ) {
        let previous = self.lock().insert((kind, container_id.to_string()), result);
        if previous != Some(result) {
            let update = ProbeUpdate {
                pod_uid: pod_uid.to_string(),
                container_id: container_id.to_string(),
                kind,
                result,
            };
            // Closed only when the sync loop is gone (shutdown).
            let _ = self.updates.send(update).await;
        }
    }

    pub(crate) fn remove(&self, kind: ProbeKind, container_id: &str) {
        self.lock().remove(&(kind, container_id.to_string()));
    }
}
