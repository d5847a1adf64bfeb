//! When the sync loop last iterated, and why it is skipping if it is: what kubelet's
//! `syncloop` health check reads (kubelet's `syncLoopMonitor`).

use crate::locks::Locked as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// kubelet fails the `syncloop` check when the loop has not iterated for
/// `max(2 × syncFrequency, 5 min)`.
pub(crate) fn stall_threshold(sync_frequency: Duration) -> Duration {
    (sync_frequency * 2).max(Duration::from_secs(5 * 60))
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    skipping: Option<RuntimeUnhealthy>,
}

/// Written by the sync loop, read by `/healthz`.
#[derive(Debug, Default)]
pub(crate) struct SyncLoopMonitor {
    state: Mutex<State>,
}

/// Why the `syncloop` check fails (logged, never shown on the public endpoint).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SyncLoopUnhealthy {
    #[error("sync loop took longer than expected (last iteration {0:?} ago)")]
    Stalled(Duration),
    #[error("sync loop is skipping pod synchronization: {0}")]
    Skipping(RuntimeUnhealthy),
}

/// Why the sync loop skips pod synchronization.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RuntimeUnhealthy {
    #[error("container runtime is down")]
    RuntimeDown,
    #[error("PLEG is not healthy: {0}")]
    Pleg(#[from] crate::pleg::PlegUnhealthy),
}

impl SyncLoopMonitor {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    /// The loop is about to iterate, or just did.
    pub(crate) fn iterated(&self) {
        self.iterated_at(Instant::now());
    }

    /// [`SyncLoopMonitor::iterated`] at a given instant (tests use a stale one).
    pub(crate) fn iterated_at(&self, at: Instant) {
        let mut s = self.lock();
        s.last = Some(at);
        s.skipping = None;
    }

    /// The loop skipped an iteration because the runtime or PLEG is unhealthy.
    pub(crate) fn skipping(&self, reason: &RuntimeUnhealthy) {
        self.lock().skipping = Some(reason.clone());
    }

    /// kubelet's `SyncLoopHealthCheck`: healthy until the loop first ran, then as long
    /// as it iterated within `threshold`; also unhealthy while it skips for runtime errors.
    pub(crate) fn check(&self, now: Instant, threshold: Duration) -> Result<(), SyncLoopUnhealthy> {
        let s = self.lock();
        if let Some(reason) = &s.skipping {
            return Err(SyncLoopUnhealthy::Skipping(reason.clone()));
        }
        match s.last {
            Some(last) if now.saturating_duration_since(last) > threshold => Err(
                SyncLoopUnhealthy::Stalled(now.saturating_duration_since(last)),
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_kubelets() {
        assert_eq!(
            stall_threshold(Duration::from_secs(60)),
            Duration::from_secs(300)
        );
        assert_eq!(
            stall_threshold(Duration::from_secs(600)),
            Duration::from_secs(1200)
        );
    }

    #[test]
    fn fresh_is_healthy_stale_is_not() {
        let m = SyncLoopMonitor::default();
        let now = Instant::now();
        let t = Duration::from_secs(300);
        assert_eq!(m.check(now, t), Ok(()), "never iterated yet: healthy");
        m.iterated_at(now);
        assert_eq!(m.check(now + Duration::from_secs(299), t), Ok(()));
        assert_eq!(
            m.check(now + Duration::from_secs(301), t),
            Err(SyncLoopUnhealthy::Stalled(Duration::from_secs(301)))
        );
    }

    #[test]
    fn skipping_fails_until_the_next_iteration() {
        let m = SyncLoopMonitor::default();
        let now = Instant::now();
        m.iterated_at(now);
        m.skipping(&RuntimeUnhealthy::RuntimeDown);
        let err = m.check(now, Duration::from_secs(300)).unwrap_err();
        assert!(
            err.to_string().contains("container runtime is down"),
            "{err}"
        );
        m.iterated_at(now);
        assert_eq!(m.check(now, Duration::from_secs(300)), Ok(()));
    }
}
