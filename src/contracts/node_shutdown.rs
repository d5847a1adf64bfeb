//! Whether the node is shutting down (kubelet's shutdown manager's `ShutdownStatus`):
//! the node shutdown manager sets it when logind announces a shutdown (and clears it
//! when the shutdown is cancelled); the node status reads it into the Ready condition
//! and is woken by the change, so the Node says so at once rather than at its next period.

use tokio::sync::watch;

/// The Ready condition's message while the node shuts down (kubelet's `ShutdownStatus`
/// error, which its Ready setter reports).
pub(crate) const NODE_SHUTTING_DOWN: &str = "node is shutting down";

/// The one flag, with a watch so readers can wait for its change.
#[derive(Debug)]
pub(crate) struct NodeShutdownState {
    tx: watch::Sender<bool>,
}

impl Default for NodeShutdownState {
    fn default() -> Self {
        NodeShutdownState {
            tx: watch::Sender::new(false),
        }
    }
}

impl NodeShutdownState {
    /// Sets the flag; true when it changed (so watchers are woken only by a change).
    pub(crate) fn set(&self, shutting_down: bool) -> bool {
        self.tx
            .send_if_modified(|v| std::mem::replace(v, shutting_down) != shutting_down)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.tx.borrow()
    }

    /// A receiver that wakes on each change.
    pub(crate) fn watch(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_the_watchers_and_a_repeat_does_not() {
        let s = NodeShutdownState::default();
        let mut rx = s.watch();
        assert!(!s.is_shutting_down());
        assert!(!s.set(false));
        assert!(!rx.has_changed().unwrap());
        assert!(s.set(true));
        rx.changed().await.unwrap();
        assert!(*rx.borrow_and_update());
        assert!(!s.set(true));
        assert!(!rx.has_changed().unwrap());
        assert!(s.is_shutting_down());
    }
}
