//! The pod cache: the runtime's view of each pod, with the time it was read. Written
//! only by the PLEG and by a pod worker right after it acted; a worker waits for data
//! newer than its last sync so it never acts twice on the same stale view.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::cri::CriError;
use crate::kuberuntime::PodRuntimeStatus;

/// Why the runtime could not be inspected for a pod; shared by every reader.
pub(crate) type InspectError = Arc<CriError>;

#[derive(Debug, Clone)]
struct Entry {
    /// The status, or why the runtime could not be inspected for this pod.
    status: Result<Arc<PodRuntimeStatus>, InspectError>,
    modified: Instant,
}

/// Runtime pod statuses by pod UID, plus a global "everything is at least this fresh" time.
#[derive(Debug)]
pub(crate) struct PodCache {
    entries: Mutex<HashMap<String, Entry>>,
    /// Bumped on every write and after every relist; waiters watch it.
    tick: watch::Sender<Instant>,
    global: Mutex<Option<Instant>>,
}

impl Default for PodCache {
    fn default() -> Self {
        PodCache {
            entries: Mutex::new(HashMap::new()),
            tick: watch::channel(Instant::now()).0,
            global: Mutex::new(None),
        }
    }
}

impl PodCache {
    /// Pods with a cached runtime status (the census).
    pub(crate) fn len(&self) -> usize {
        self.entries.locked().len()
    }

    /// The latest status of a pod, if the cache has one.
    pub(crate) fn get(&self, uid: &str) -> Option<Arc<PodRuntimeStatus>> {
        self.entries
            .locked()
            .get(uid)
            .and_then(|e| e.status.clone().ok())
    }

    /// Every pod the runtime was last seen running something for (kubelet's
    /// `GetPods(false)`, served by `/runningpods/`).
    pub(crate) fn running(&self) -> Vec<Arc<PodRuntimeStatus>> {
        let entries = self.entries.locked();
        let mut pods: Vec<Arc<PodRuntimeStatus>> = entries
            .values()
            .filter_map(|e| e.status.clone().ok())
            .filter(|s| {
                s.sandboxes.iter().any(|b| b.ready) || s.running_containers().next().is_some()
            })
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods
    }

    /// Stores a status read at `modified` (older writes never replace newer ones).
    pub(crate) fn set(&self, uid: &str, status: PodRuntimeStatus, modified: Instant) {
        self.store(uid, Ok(Arc::new(status)), modified);
    }

    /// Records that inspecting the pod failed at `modified`: a worker waiting for it
    /// gets the error (and retries later) instead of acting on a view without the pod.
    pub(crate) fn set_error(&self, uid: &str, error: CriError, modified: Instant) {
        self.store(uid, Err(Arc::new(error)), modified);
    }

    fn store(
        &self,
        uid: &str,
        status: Result<Arc<PodRuntimeStatus>, InspectError>,
        modified: Instant,
    ) {
        let mut entries = self.entries.locked();
        if entries.get(uid).is_some_and(|e| e.modified > modified) {
            return;
        }
        entries.insert(uid.to_string(), Entry { status, modified });
        drop(entries);
        self.tick.send_replace(modified);
    }

    pub(crate) fn delete(&self, uid: &str) {
        self.entries.locked().remove(uid);
    }

    /// Marks every entry as fresh up to `t` (after a relist that saw no change for them).
    pub(crate) fn update_time(&self, t: Instant) {
        *self.global.locked() = Some(t);
        self.tick.send_replace(t);
    }

    fn newer_than(
        &self,
        uid: &str,
        since: Option<Instant>,
    ) -> Option<Result<Arc<PodRuntimeStatus>, InspectError>> {
        let global = *self.global.locked();
        let entries = self.entries.locked();
        let entry = entries.get(uid);
        let newer = |t: Instant| since.is_none_or(|s| t > s);
        let fresh = entry.is_some_and(|e| newer(e.modified)) || global.is_some_and(newer);
        if !fresh {
            return None;
        }
        Some(
            entry
                .map(|e| e.status.clone())
                .unwrap_or_else(|| Ok(Arc::new(PodRuntimeStatus::default()))),
        )
    }

    /// Waits until the cache holds data for `uid` read after `since` (None: any data
    /// once the first relist ran); a pod the runtime does not know yields an empty
    /// status once a relist newer than `since` ran. Errs when inspecting it failed.
    pub(crate) async fn get_newer_than(
        &self,
        uid: &str,
        since: Option<Instant>,
    ) -> Result<Arc<PodRuntimeStatus>, InspectError> {
        let mut rx = self.tick.subscribe();
        loop {
            if let Some(s) = self.newer_than(uid, since) {
                return s;
            }
            if rx.changed().await.is_err() {
                return Ok(self.get(uid).unwrap_or_default());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn waits_for_newer_data() {
        let cache = Arc::new(PodCache::default());
        let since = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let c = cache.clone();
        let waiter = tokio::spawn(async move { c.get_newer_than("u1", Some(since)).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        cache.set(
            "u1",
            PodRuntimeStatus {
                uid: "u1".into(),
                ..Default::default()
            },
            Instant::now(),
        );
        assert_eq!(waiter.await.unwrap().unwrap().uid, "u1");
    }

    #[tokio::test(start_paused = true)]
    async fn relist_time_unblocks_unknown_pods_and_old_writes_lose() {
        let cache = PodCache::default();
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(5)).await;
        cache.update_time(Instant::now());
        assert_eq!(
            cache.get_newer_than("nope", Some(t0)).await.unwrap().uid,
            ""
        );
        let failed = CriError::Status {
            call: "PodSandboxStatus",
            code: tonic::Code::Unavailable,
            message: "inspect failed".into(),
        };
        cache.set_error("bad", failed, Instant::now());
        assert!(cache.get_newer_than("bad", None).await.is_err());
        let t1 = Instant::now();
        cache.set(
            "u",
            PodRuntimeStatus {
                name: "new".into(),
                ..Default::default()
            },
            t1,
        );
        cache.set(
            "u",
            PodRuntimeStatus {
                name: "old".into(),
                ..Default::default()
            },
            t0,
        );
        assert_eq!(cache.get("u").unwrap().name, "new");
    }
}
