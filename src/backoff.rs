//! kubelet's flowcontrol back-off, keyed per pod+container (CrashLoopBackOff) or
//! pod+image (ImagePullBackOff): 10 s doubling to 5 min, forgotten after 10 min quiet.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Initial back-off after the first failure (kubelet's 10 s).
pub(crate) const INITIAL: Duration = Duration::from_secs(10);
/// Back-off cap (kubelet's `MaxContainerBackOff`, 300 s).
pub(crate) const MAX: Duration = Duration::from_secs(300);

/// `jitter(d, f)`: a random duration in `[d, d × (1 + f))`, as client-go's
/// `wait.Jitter` (the pod workers' retries and resyncs, the apiserver source's relists).
pub(crate) fn jitter(d: Duration, factor: f64) -> Duration {
    d + d.mul_f64(fastrand::f64() * factor)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: Instant,
}

/// Per-key exponential back-off. Times are tokio [`Instant`]s so tests can pause time.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(INITIAL, MAX)
    }
}

impl Backoff {
    /// Keys with a back-off (the census).
    pub(crate) fn len(&self) -> usize {
        self.entries.locked().len()
    }

    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// An entry is stale once nothing happened for twice the cap (10 min by default):
    /// a container that ran that long starts over at the initial back-off.
    fn expired(&self, event: Instant, entry: &Entry) -> bool {
        event.saturating_duration_since(entry.last_update) > self.max * 2
    }

    /// How long until `key` may be retried, counting from `event` (e.g. when the
    /// container finished); None when it is not in back-off.
    pub(crate) fn remaining(&self, key: &str, event: Instant) -> Option<Duration> {
        let entries = self.entries.locked();
        let entry = entries.get(key)?;
        if self.expired(event, entry) {
            return None;
        }
        let since = Instant::now().saturating_duration_since(event);
        (since < entry.backoff).then(|| entry.backoff - since)
    }

    /// How long until `key` may be retried, counting from its last recorded failure
    /// (kubelet's `IsInBackOffSinceUpdate`, used for image pulls).
    pub(crate) fn remaining_since_update(&self, key: &str) -> Option<Duration> {
        let last = self.entries.locked().get(key)?.last_update;
        self.remaining(key, last)
    }

    /// Records a retry at `event`: the first one (or one after a long quiet) gets the
    /// initial back-off, each later one doubles it up to the cap.
    pub(crate) fn next(&self, key: &str, event: Instant) {
        let mut entries = self.entries.locked();
        let backoff = match entries.get(key) {
            Some(e) if !self.expired(event, e) => (e.backoff * 2).min(self.max),
            _ => self.initial,
        };
        entries.insert(
            key.to_string(),
            Entry {
                backoff,
                last_update: event,
            },
        );
    }

    /// The current back-off duration of `key` (for messages).
    pub(crate) fn current(&self, key: &str) -> Option<Duration> {
        self.entries.locked().get(key).map(|e| e.backoff)
    }

    /// Drops entries quiet for longer than twice the cap (housekeeping).
    pub(crate) fn gc(&self) {
        let now = Instant::now();
        let max2 = self.max * 2;
        self.entries
            .locked()
            .retain(|_, e| now.saturating_duration_since(e.last_update) <= max2);
    }

    /// Forgets every key starting with `prefix` (a pod that is gone).
    pub(crate) fn forget_prefix(&self, prefix: &str) {
        self.entries.locked().retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(60), 0.5);
            assert!(j >= Duration::from_secs(60) && j < Duration::from_secs(90));
        }
    }

    /// Simulates a container that dies `run` after each restart, restarting as soon
    /// as the back-off allows; returns the waits between death and restart.
    async fn waits(run: Duration, deaths: usize) -> Vec<Duration> {
        let b = Backoff::default();
        let mut out = Vec::new();
        for _ in 0..deaths {
            tokio::time::advance(run).await;
            let died = Instant::now();
            let wait = b.remaining("c", died).unwrap_or_default();
            tokio::time::advance(wait).await;
            assert!(b.remaining("c", died).is_none());
            b.next("c", died);
            out.push(wait);
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn doubles_from_ten_seconds_to_five_minutes() {
        let secs: Vec<u64> = waits(Duration::from_secs(1), 8)
            .await
            .iter()
            .map(std::time::Duration::as_secs)
            .collect();
        // First restart immediate; then 10s, 20s, ... capped at 300s.
        assert_eq!(secs, vec![0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn resets_after_ten_minutes_running() {
        let b = Backoff::default();
        let t0 = Instant::now();
        b.next("c", t0);
        b.next("c", t0);
        assert_eq!(b.current("c"), Some(Duration::from_secs(20)));
        tokio::time::advance(Duration::from_secs(601)).await;
        let died = Instant::now();
        assert!(
            b.remaining("c", died).is_none(),
            "expired entry is not in back-off"
        );
        b.next("c", died);
        assert_eq!(b.current("c"), Some(INITIAL));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_independent_and_forgettable() {
        let b = Backoff::default();
        let now = Instant::now();
        b.next("pod1_a", now);
        b.next("pod1_a", now);
        assert!(b.remaining("pod1_a", now).is_some());
        assert!(b.remaining("pod2_a", now).is_none());
        b.forget_prefix("pod1_");
        assert!(b.remaining("pod1_a", now).is_none());
    }
}
