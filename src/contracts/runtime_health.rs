//! Whether the runtime is up, and what its handlers support, as the sync loop's
//! runtime check last found them (kubelet's `runtimeState`): the check writes them;
//! the node status's Ready condition and `runtimeHandlers`, the pod syncs (the
//! network's readiness) and the container config (recursive read-only mounts), read
//! them.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::locks::ReadWriteLocked;

/// One runtime handler the CRI status lists (kubelet's `kubecontainer.RuntimeHandler`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RuntimeHandlerFeatures {
    /// The handler's name; empty for the runtime's default handler.
    pub name: String,
    pub recursive_read_only_mounts: bool,
    pub user_namespaces: bool,
}

/// Whether the runtime answered its last status check (kubelet's `runtimeState`),
/// and the handlers that answer listed.
#[derive(Debug, Default)]
pub(crate) struct RuntimeHealth {
    up: AtomicBool,
    handlers: RwLock<Vec<RuntimeHandlerFeatures>>,
    /// Why the runtime's network is not ready (kubelet's `networkErrors`), None when
    /// it is.
    network: RwLock<Option<String>>,
    /// The runtime's features (CRI `Status.features`): whether it supports
    /// `supplementalGroupsPolicy`; None when it did not say.
    supplemental_groups_policy: RwLock<Option<bool>>,
}

impl RuntimeHealth {
    pub(crate) fn set(&self, up: bool) {
        self.up.store(up, Ordering::Relaxed);
    }
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Stores why the runtime's network is not ready (None: ready); true when that
    /// changed.
    pub(crate) fn set_network_error(&self, error: Option<String>) -> bool {
        replace(&self.network, error)
    }

    /// kubelet's `networkErrors`: why pods off the host network cannot start, and why
    /// the node is not Ready (None: the network is ready).
    pub(crate) fn network_error(&self) -> Option<String> {
        self.network.read_locked().clone()
    }

    /// Stores the runtime's `supplemental_groups_policy` feature (None: no features).
    pub(crate) fn set_supplemental_groups_policy(&self, supported: Option<bool>) {
        *self.supplemental_groups_policy.write_locked() = supported;
    }

    /// Whether the runtime supports `supplementalGroupsPolicy` (kubelet's
    /// `runtimeFeatures`), None when it sent no features.
    pub(crate) fn supplemental_groups_policy(&self) -> Option<bool> {
        *self.supplemental_groups_policy.read_locked()
    }

    /// Stores the handlers of the last status; true when they changed.
    pub(crate) fn set_handlers(&self, handlers: Vec<RuntimeHandlerFeatures>) -> bool {
        replace(&self.handlers, handlers)
    }

    /// The handlers the runtime listed (none from runtimes older than CRI 1.30's
    /// `runtime_handlers`, such as containerd 1.6 and 1.7).
    pub(crate) fn handlers(&self) -> Vec<RuntimeHandlerFeatures> {
        self.handlers.read_locked().clone()
    }

    /// The features of the handler named `name` ("" is the default one); None when the
    /// runtime did not list it.
    pub(crate) fn handler(&self, name: &str) -> Option<RuntimeHandlerFeatures> {
        self.handlers
            .read_locked()
            .iter()
            .find(|h| h.name == name)
            .cloned()
    }
}

/// Stores `value` in `slot`; true when it differs from what was there.
fn replace<T: PartialEq>(slot: &RwLock<T>, value: T) -> bool {
    let mut held = slot.write_locked();
    let changed = *held != value;
    *held = value;
    changed
}
