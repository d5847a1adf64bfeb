//! The work queue consulted by the 1 s sync tick: when each pod is next due for a sync.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    due: Mutex<HashMap<String, Instant>>,
}

impl WorkQueue {
    /// Pods waiting for a resync (the census).
    pub(crate) fn len(&self) -> usize {
        self.due.locked().len()
    }

    /// Schedules a sync of `uid` after `delay` (replacing any earlier schedule).
    pub(crate) fn enqueue(&self, uid: &str, delay: Duration) {
        self.due
            .locked()
            .insert(uid.to_string(), Instant::now() + delay);
    }
    /// Removes and returns the pods whose time has come.
    pub(crate) fn take_due(&self) -> Vec<String> {
        let now = Instant::now();
        let mut due = self.due.locked();
        let ready: Vec<String> = due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for u in &ready {
            due.remove(u);
        }
        ready
    }
    pub(crate) fn forget(&self, uid: &str) {
        self.due.locked().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pods_become_due_in_time() {
        let q = WorkQueue::default();
        q.enqueue("a", Duration::from_secs(1));
        q.enqueue("b", Duration::from_secs(10));
        assert!(q.take_due().is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.take_due(), vec!["a".to_string()]);
        assert!(q.take_due().is_empty());
    }
}
