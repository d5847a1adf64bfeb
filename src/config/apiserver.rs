//! The apiserver pod source (kubelet's `config/apiserver.go`): a list and watch of the
//! pods bound to this node (`spec.nodeName=<node>`, all namespaces) through
//! kube-runtime's `watcher`, listed afresh after any failure as client-go's reflector
//! does (`kubeclient::relisting_watcher`). What the watch says is kept in an "undelta store":
//! every change sends the whole set as this source's snapshot, and a burst of events
//! (a relist of 100 pods) is one snapshot. Nothing goes out before the first complete
//! list, so sources-ready waits for it; during an outage the last set stays, so pods
//! keep running. The merger adds the `config.source: api` / `config.seen` annotations;
//! apiserver pods are not defaulted or validated again (the apiserver did that).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SourceSnapshot;
use crate::pod::API_SOURCE;

/// The most pods the store holds: far above what a node runs (kubelet's `maxPods`
/// tops out in the hundreds), low enough that a runaway selector cannot exhaust memory.
pub(crate) const MAX_API_PODS: usize = 5000;
/// Events that follow each other within this gap go out as one snapshot.
pub(crate) const COALESCE_GAP: Duration = Duration::from_millis(10);
/// A steady stream of events still sends a snapshot at least this often.
pub(crate) const COALESCE_MAX: Duration = Duration::from_millis(200);
/// Errors in a row logged at warning level; later ones go to debug until a success.
pub(crate) const LOUD_ERRORS: u32 = 3;

/// The pods bound to the node, as the watch last said (kubelet's `UndeltaStore`).
#[derive(Debug)]
pub(crate) struct PodStore {
    /// `namespace/name` → pod (the reflector's key).
    pods: BTreeMap<String, Pod>,
    /// A relist in progress (`Init` … `InitDone`); replaces `pods` when complete.
    relist: Option<BTreeMap<String, Pod>>,
    /// True once a list completed: only then is the set worth sending.
    synced: bool,
    cap: usize,
    /// Whether the cap is being hit now (logged loudly once per episode).
    full: bool,
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

impl PodStore {
    pub(crate) fn new(cap: usize) -> Self {
        PodStore {
            pods: BTreeMap::new(),
            relist: None,
            synced: false,
            cap,
            full: false,
        }
    }

    /// Folds one watch event in; true when the set to send changed (including the
    /// first completed list, even if empty).
    pub(crate) fn apply(&mut self, event: Event<Pod>) -> bool {
        match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(pod) => {
                let cap = self.cap;
                let list = self.relist.get_or_insert_with(BTreeMap::new);
                let refused = insert_capped(list, pod, cap);
                self.note_refused(refused);
                false
            }
            Event::InitDone => {
                let list = self.relist.take().unwrap_or_default();
                let first = !self.synced;
                self.synced = true;
                let changed = list != self.pods;
                self.pods = list;
                first || changed
            }
            Event::Apply(pod) => {
                if let Some(list) = self.relist.as_mut() {
                    // Only streaming lists interleave; keep it in the pending list.
                    let refused = insert_capped(list, pod, self.cap);
                    self.note_refused(refused);
                    return false;
                }
                let k = key(&pod);
                if self.pods.get(&k) == Some(&pod) {
                    return false;
                }
                let refused = insert_capped(&mut self.pods, pod, self.cap);
                let stored = refused.is_none();
                self.note_refused(refused);
                self.synced && stored
            }
            Event::Delete(pod) => {
                let k = key(&pod);
                if let Some(list) = self.relist.as_mut() {
                    list.remove(&k);
                    return false;
                }
                self.pods.remove(&k).is_some() && self.synced
            }
        }
    }

    fn note_refused(&mut self, refused: Option<String>) {
        match refused {
            Some(k) if !self.full => {
                self.full = true;
                warn!(pod = %k, cap = self.cap, "the apiserver lists more pods for this node than oxlet keeps; ignoring the ones beyond the cap");
            }
            Some(k) => debug!(pod = %k, cap = self.cap, "ignoring pod beyond the cap"),
            None => {
                if self.full && self.pods.len() < self.cap {
                    self.full = false;
                }
            }
        }
    }

    /// The whole set for the merger; None before the first complete list.
    pub(crate) fn snapshot(&self) -> Option<SourceSnapshot> {
        self.synced.then(|| SourceSnapshot {
            source: API_SOURCE,
            pods: self.pods.values().cloned().collect(),
        })
    }
}

/// Inserts `pod` unless that would take `map` past `cap`; returns the refused key.
fn insert_capped(map: &mut BTreeMap<String, Pod>, pod: Pod, cap: usize) -> Option<String> {
    let k = key(&pod);
    if !map.contains_key(&k) && map.len() >= cap {
        return Some(k);
    }
    map.insert(k, pod);
    None
}

/// Counts errors in a row so a long outage is logged loudly only at its start.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    in_a_row: u32,
}

impl ErrorLog {
    /// Logs one watch error (the apiserver's message is in its Display) and returns
    /// whether it was logged at warning level.
    pub(crate) fn error(&mut self, e: &watcher::Error) -> bool {
        self.in_a_row = self.in_a_row.saturating_add(1);
        let loud = self.in_a_row <= LOUD_ERRORS;
        if loud {
            warn!(error = %e, errors = self.in_a_row, "apiserver pod source: list/watch failed; keeping the last set of pods and retrying");
        } else {
            debug!(error = %e, errors = self.in_a_row, "apiserver pod source: list/watch still failing");
        }
        loud
    }

    pub(crate) fn ok(&mut self) {
        if self.in_a_row > LOUD_ERRORS {
            info!(
                errors = self.in_a_row,
                "apiserver pod source: list/watch works again"
            );
        }
        self.in_a_row = 0;
    }
}

/// Watches the pods bound to `node_name` and sends each new set to `tx`, until
/// cancelled or the merger is gone.
pub(crate) async fn run_api_source(
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<SourceSnapshot>,
    cancel: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    info!(node = %node_name, "watching the apiserver for pods bound to this node");
    let mut store = PodStore::new(MAX_API_PODS);
    let mut errors = ErrorLog::default();
    // After a failure the set stands until the new list completes; then what the
    // apiserver no longer has is deleted (a pod deleted during an outage, or every
    // pod of a cluster that was replaced).
    let stream = crate::kubeclient::relisting_watcher(api, config);
    pump(stream, &mut store, &mut errors, &tx, &cancel).await;
}

/// Reads watch events, coalescing those that arrive within [`COALESCE_GAP`] of each
/// other (for at most [`COALESCE_MAX`]) into one snapshot. A pod added and deleted
/// within one window is still seen (as kubelet's per-event sets show it): the set
/// with it goes out before its delete is applied, so a mirror pod deleted right after
/// it was created still wakes its reconciler.
pub(crate) async fn pump<S>(
    stream: S,
    store: &mut PodStore,
    errors: &mut ErrorLog,
    tx: &mpsc::Sender<SourceSnapshot>,
    cancel: &CancellationToken,
) where
    S: Stream<Item = Result<Event<Pod>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    loop {
        let item = tokio::select! {
            () = cancel.cancelled() => return,
            item = stream.next() => item,
        };
        let event = match item {
            None => return,
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                errors.error(&e);
                continue;
            }
        };
        // Keys applied since the last set went out.
        let mut unsent: HashSet<String> = HashSet::new();
        let mut changed = handle(store, errors, &mut unsent, event);
        let until = Instant::now() + COALESCE_MAX;
        loop {
            let gap = (Instant::now() + COALESCE_GAP).min(until);
            let event = match tokio::time::timeout_at(gap, stream.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(e))) => {
                    errors.error(&e);
                    break;
                }
                Ok(None) => return,
                Err(_) => break,
            };
            if changed && deletes_one_of(&event, &unsent) {
                if !send(store, tx, cancel).await {
                    return;
                }
                unsent.clear();
                changed = false;
            }
            changed |= handle(store, errors, &mut unsent, event);
            if Instant::now() >= until {
                break;
            }
        }
        if changed && !send(store, tx, cancel).await {
            return;
        }
    }
}

/// Whether `event` deletes a pod applied since the last set went out.
fn deletes_one_of(event: &Event<Pod>, unsent: &HashSet<String>) -> bool {
    matches!(event, Event::Delete(pod) if unsent.contains(&key(pod)))
}

/// Sends the store's set (if it has one yet); false once cancelled or the merger is gone.
async fn send(
    store: &PodStore,
    tx: &mpsc::Sender<SourceSnapshot>,
    cancel: &CancellationToken,
) -> bool {
    let Some(snapshot) = store.snapshot() else {
        return true;
    };
    debug!(pods = snapshot.pods.len(), "apiserver pod source: new set");
    tokio::select! {
        () = cancel.cancelled() => false,
        sent = tx.send(snapshot) => sent.is_ok(),
    }
}

fn handle(
    store: &mut PodStore,
    errors: &mut ErrorLog,
    unsent: &mut HashSet<String>,
    event: Event<Pod>,
) -> bool {
    errors.ok();
    if let Event::Apply(pod) = &event {
        unsent.insert(key(pod));
    }
    store.apply(event)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, version: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(s: &SourceSnapshot) -> Vec<String> {
        s.pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect()
    }

    fn list(store: &mut PodStore, pods: &[Pod]) -> bool {
        let mut changed = store.apply(Event::Init);
        for p in pods {
            changed |= store.apply(Event::InitApply(p.clone()));
        }
        changed | store.apply(Event::InitDone)
    }

    #[test]
    fn nothing_goes_out_before_the_first_complete_list() {
        let mut s = PodStore::new(10);
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("a", "1"))));
        assert!(s.snapshot().is_none(), "a half list is never sent");
        assert!(s.apply(Event::InitDone));
        let snap = s.snapshot().unwrap();
        assert_eq!(snap.source, API_SOURCE);
        assert_eq!(names(&snap), ["a"]);
    }

    #[test]
    fn an_empty_first_list_is_still_sent() {
        let mut s = PodStore::new(10);
        assert!(list(&mut s, &[]), "sources-ready needs the empty set");
        assert!(s.snapshot().unwrap().pods.is_empty());
        assert!(!list(&mut s, &[]), "the same empty set again is no change");
    }

    #[test]
    fn applies_and_deletes_change_the_set_and_repeats_do_not() {
        let mut s = PodStore::new(10);
        list(&mut s, &[pod("a", "1")]);
        assert!(s.apply(Event::Apply(pod("b", "2"))));
        assert!(!s.apply(Event::Apply(pod("b", "2"))), "identical object");
        assert!(s.apply(Event::Apply(pod("b", "3"))), "a new version");
        assert!(s.apply(Event::Delete(pod("a", "4"))));
        assert!(!s.apply(Event::Delete(pod("a", "4"))), "already gone");
        assert_eq!(names(&s.snapshot().unwrap()), ["b"]);
    }

    #[test]
    fn a_relist_replaces_the_set_only_when_complete() {
        let mut s = PodStore::new(10);
        list(&mut s, &[pod("a", "1"), pod("b", "1")]);
        // After a 410 the watcher relists; until InitDone the old set stands.
        assert!(!s.apply(Event::Init));
        assert!(!s.apply(Event::InitApply(pod("b", "1"))));
        assert_eq!(names(&s.snapshot().unwrap()), ["a", "b"]);
        assert!(s.apply(Event::InitDone), "a was deleted while away");
        assert_eq!(names(&s.snapshot().unwrap()), ["b"]);
        // A relist that finds the same set is no change.
        assert!(!list(&mut s, &[pod("b", "1")]));
    }

    #[test]
    fn the_store_is_bounded() {
        let mut s = PodStore::new(2);
        list(&mut s, &[pod("a", "1"), pod("b", "1"), pod("c", "1")]);
        assert_eq!(names(&s.snapshot().unwrap()), ["a", "b"]);
        assert!(
            !s.apply(Event::Apply(pod("d", "1"))),
            "refused beyond the cap"
        );
        assert!(
            s.apply(Event::Apply(pod("a", "2"))),
            "known pods still update"
        );
        assert!(s.apply(Event::Delete(pod("a", "3"))));
        assert!(s.apply(Event::Apply(pod("d", "2"))), "room again");
        assert_eq!(names(&s.snapshot().unwrap()), ["b", "d"]);
    }

    #[test]
    fn errors_are_loud_at_first_then_quiet_until_a_success() {
        let mut log = ErrorLog::default();
        let e = watcher::Error::NoResourceVersion;
        let loud: Vec<bool> = (0..5).map(|_| log.error(&e)).collect();
        assert_eq!(loud, [true, true, true, false, false]);
        log.ok();
        assert!(log.error(&e));
    }

    type Item = Result<Event<Pod>, watcher::Error>;

    /// Runs `pump` over a channel-fed stream; returns the sender and the snapshots.
    fn start_pump() -> (
        mpsc::UnboundedSender<Item>,
        mpsc::Receiver<SourceSnapshot>,
        CancellationToken,
    ) {
        let (ev_tx, ev_rx) = mpsc::unbounded_channel::<Item>();
        let (tx, rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let stream = tokio_stream_from(ev_rx);
        let stop = cancel.clone();
        tokio::spawn(async move {
            let (mut store, mut errors) = (PodStore::new(1000), ErrorLog::default());
            pump(stream, &mut store, &mut errors, &tx, &stop).await;
        });
        (ev_tx, rx, cancel)
    }

    fn tokio_stream_from(mut rx: mpsc::UnboundedReceiver<Item>) -> impl Stream<Item = Item> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_of_100_pods_is_one_snapshot() {
        let (ev, mut rx, cancel) = start_pump();
        ev.send(Ok(Event::Init)).unwrap();
        for i in 0..100 {
            ev.send(Ok(Event::InitApply(pod(&format!("p{i:03}"), "1"))))
                .unwrap();
        }
        ev.send(Ok(Event::InitDone)).unwrap();
        let snap = rx.recv().await.unwrap();
        assert_eq!(snap.pods.len(), 100);
        // A burst of watch events after that is one more snapshot.
        for i in 0..20 {
            ev.send(Ok(Event::Delete(pod(&format!("p{i:03}"), "2"))))
                .unwrap();
        }
        let snap = rx.recv().await.unwrap();
        assert_eq!(snap.pods.len(), 80);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(rx.try_recv().is_err(), "no extra snapshots");
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_added_and_deleted_in_one_window_is_still_seen() {
        let (ev, mut rx, cancel) = start_pump();
        ev.send(Ok(Event::Init)).unwrap();
        ev.send(Ok(Event::InitApply(pod("a", "1")))).unwrap();
        ev.send(Ok(Event::InitDone)).unwrap();
        assert_eq!(names(&rx.recv().await.unwrap()), ["a"]);
        // Created and deleted back to back (a mirror pod deleted by a user at once):
        // the set with it goes out before the one without it.
        ev.send(Ok(Event::Apply(pod("m", "2")))).unwrap();
        ev.send(Ok(Event::Delete(pod("m", "3")))).unwrap();
        assert_eq!(names(&rx.recv().await.unwrap()), ["a", "m"]);
        assert_eq!(names(&rx.recv().await.unwrap()), ["a"]);
        // Deleting pods that were already sent still coalesces.
        ev.send(Ok(Event::Apply(pod("b", "4")))).unwrap();
        ev.send(Ok(Event::Delete(pod("a", "5")))).unwrap();
        assert_eq!(names(&rx.recv().await.unwrap()), ["b"]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(rx.try_recv().is_err(), "no extra snapshots");
        cancel.cancel();
    }

    /// After a failed list or watch the source lists again (client-go's reflector,
    /// `kubeclient::relisting_watcher`), and the set stands until that list
    /// completes. A pod deleted while the apiserver was away, or a whole cluster
    /// replaced by a new one, is caught up by that list.
    #[tokio::test(start_paused = true)]
    async fn a_failure_keeps_the_set_until_a_new_list_completes() {
        let (ev, mut rx, cancel) = start_pump();
        let broken = || Err(watcher::Error::NoResourceVersion);
        for item in [
            Ok(Event::Init),
            Ok(Event::InitApply(pod("a", "1"))),
            Ok(Event::InitApply(pod("b", "1"))),
            Ok(Event::InitDone),
            broken(),
        ] {
            ev.send(item).unwrap();
        }
        assert_eq!(names(&rx.recv().await.unwrap()), ["a", "b"]);
        // An outage: lists fail, one starts but cannot finish. Nothing goes out.
        for item in [
            broken(),
            Ok(Event::Init),
            Ok(Event::InitApply(pod("a", "1"))),
            broken(),
        ] {
            ev.send(item).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            rx.try_recv().is_err(),
            "never an empty or partial set for an outage"
        );
        // Back, with b deleted meanwhile: the completed list replaces the set.
        for item in [
            Ok(Event::Init),
            Ok(Event::InitApply(pod("a", "1"))),
            Ok(Event::InitDone),
        ] {
            ev.send(item).unwrap();
        }
        assert_eq!(names(&rx.recv().await.unwrap()), ["a"]);
        cancel.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_still_sends_within_the_max_window() {
        let (ev, mut rx, cancel) = start_pump();
        ev.send(Ok(Event::Init)).unwrap();
        ev.send(Ok(Event::InitDone)).unwrap();
        assert!(rx.recv().await.unwrap().pods.is_empty());
        // One event every 5 ms (inside the gap) for 1 s: snapshots still flow.
        let feeder = tokio::spawn(async move {
            for i in 0..200 {
                ev.send(Ok(Event::Apply(pod(&format!("p{i:03}"), "1"))))
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ev
        });
        let first = rx.recv().await.unwrap();
        assert!(
            !first.pods.is_empty() && first.pods.len() < 200,
            "{}",
            first.pods.len()
        );
        let _ev = feeder.await.unwrap();
        cancel.cancel();
    }
}
