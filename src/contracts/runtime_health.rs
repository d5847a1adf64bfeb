//! Whether the runtime is up, as the sync loop's runtime check last found it (kubelet's
//! `runtimeState`): the check writes it, the node status's Ready condition reads it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the runtime answered its last status check (kubelet's `runtimeState`).
#[derive(Debug, Default)]
pub(crate) struct RuntimeHealth {
    up: AtomicBool,
}

impl RuntimeHealth {
    pub(crate) fn set(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }
}
