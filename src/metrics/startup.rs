//! Pod startup latency, as kubelet's pod startup latency tracker: image pull windows
//! per pod (so the SLI can exclude them) and the one-time observations.
//!
//! The pulls happen in the image manager and the observation in the status path,
//! which share nothing but the pod UID; the windows live here, keyed by UID, bounded,
//! and forgotten when the pod is.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::pod::CONFIG_SEEN_ANNOTATION;

/// At most this many pods' pull windows are kept (far above a node's pod limit).
const MAX_PODS: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Window {
    first_start: Instant,
    last_end: Option<Instant>,
}

/// Image pull windows by pod UID.
#[derive(Debug, Default)]
pub(crate) struct Pulls(Mutex<HashMap<String, Window>>);

impl Pulls {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Window>> {
        self.0.locked()
    }

    /// A pull began; the first start of a pod is kept.
    pub(crate) fn started(&self, uid: &str, now: Instant) {
        let mut m = self.map();
        if m.len() >= MAX_PODS && !m.contains_key(uid) {
            return;
        }
        m.entry(uid.to_string()).or_insert(Window {
            first_start: now,
            last_end: None,
        });
    }

    /// A pull ended (either way); the last end of a pod is kept.
    pub(crate) fn finished(&self, uid: &str, now: Instant) {
        if let Some(w) = self.map().get_mut(uid) {
            w.last_end = Some(now);
        }
    }

    /// First pull start to last pull end, when the pod pulled anything.
    pub(crate) fn pulling(&self, uid: &str) -> Option<Duration> {
        let w = *self.map().get(uid)?;
        Some(w.last_end?.saturating_duration_since(w.first_start))
    }

    pub(crate) fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }
}

static PULLS: LazyLock<Pulls> = LazyLock::new(Pulls::default);

/// The image manager began pulling for pod `uid`.
pub(crate) fn pull_started(uid: &str) {
    PULLS.started(uid, Instant::now());
}

/// The image manager's pull for pod `uid` ended.
pub(crate) fn pull_finished(uid: &str) {
    PULLS.finished(uid, Instant::now());
}

/// The pod is gone: its window goes too.
pub(crate) fn forget_pod_pulls(uid: &str) {
    PULLS.forget(uid);
}

/// When the agent first saw the pod (the merger's `kubernetes.io/config.seen`).
pub(crate) fn pod_first_seen(pod: &Pod) -> Option<Timestamp> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(CONFIG_SEEN_ANNOTATION)?
        .parse()
        .ok()
}

fn since(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

/// kubelet's `pod_start_duration_seconds`: at a sync whose status is the pod's first,
/// or whose phase went from Pending to Running, the time since the pod was first seen.
pub(crate) fn status_synced(pod: &Pod, old_phase: Option<&str>, new_phase: &str, now: Timestamp) {
    let first = old_phase.is_none();
    let started = old_phase == Some("Pending") && new_phase == "Running";
    if (first || started)
        && let Some(seen) = pod_first_seen(pod)
    {
        super::kubelet()
            .pod_start_duration
            .observe(since(seen, now).as_secs_f64());
    }
}

/// The pod's status first showed every container running (once per pod): the SLI
/// (excluding its image pulls) and the total, from its creation timestamp (or, for a
/// static pod from a file that has none, from when the agent first saw it).
pub(crate) fn pod_running(pod: &Pod, now: Timestamp) {
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| pod_first_seen(pod));
    let Some(created) = created else { return };
    let uid = crate::pod::pod_uid(pod);
    super::pod_started(since(created, now), PULLS.pulling(uid));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_window_spans_first_start_to_last_end() {
        let p = Pulls::default();
        let t0 = Instant::now();
        p.started("u", t0);
        p.started("u", t0 + Duration::from_secs(1));
        p.finished("u", t0 + Duration::from_secs(2));
        p.finished("u", t0 + Duration::from_secs(5));
        assert_eq!(p.pulling("u"), Some(Duration::from_secs(5)));
        assert_eq!(p.pulling("other"), None);
        p.forget("u");
        assert_eq!(p.pulling("u"), None);
    }

    #[test]
    fn windows_are_bounded() {
        let p = Pulls::default();
        let t0 = Instant::now();
        for i in 0..MAX_PODS + 10 {
            p.started(&i.to_string(), t0);
        }
        assert_eq!(p.map().len(), MAX_PODS);
    }

    #[test]
    fn an_unfinished_pull_is_no_window() {
        let p = Pulls::default();
        p.started("u", Instant::now());
        assert_eq!(p.pulling("u"), None);
    }
}
