//! kubelet's `PodConfig` merger (`config/config.go`, incremental mode): turns each
//! source's full snapshot into REMOVE / ADD / UPDATE / DELETE / RECONCILE deltas.
//!
//! Sources only ever send their complete set (`SET`), so the merger is the one place
//! that knows what changed; the sync loop acts on deltas. Pure and synchronous so the
//! semantics can be tested without a runtime; [`run_merger`] is the thin task around it.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tracing::warn;

use super::{PodOperation, PodUpdate, SourceSnapshot};
use crate::pod::{
    CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION, CONFIG_SOURCE_ANNOTATION, pod_full_name,
    pod_ref, pod_uid,
};

/// Annotations the kubelet itself writes: changing them is not a change to the pod.
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_SEEN_ANNOTATION,
];

/// Per-source pod sets and which sources have reported at least once.
#[derive(Debug, Default)]
pub(crate) struct PodConfig {
    /// source → UID → the pod as last merged.
    pods: HashMap<&'static str, HashMap<String, Pod>>,
    /// Sources that sent at least one snapshot.
    seen: HashSet<&'static str>,
}

/// What comparing a known pod with its new version calls for.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    None,
    Update,
    Delete,
    Reconcile,
}

impl PodConfig {
    /// Replaces the source's pod set with `snapshot` and returns the deltas in
    /// kubelet's order: REMOVE, ADD, UPDATE, DELETE, RECONCILE (empty ones omitted,
    /// except the empty ADD that marks a source's first report).
    pub(crate) fn merge(&mut self, snapshot: SourceSnapshot) -> Vec<PodUpdate> {
        let source = snapshot.source;
        let first = self.seen.insert(source);
        let mut old = self.pods.remove(source).unwrap_or_default();
        let mut current: HashMap<String, Pod> = HashMap::with_capacity(snapshot.pods.len());
        // full name → UID of the pod that claimed it first.
        let mut names: HashMap<String, String> = HashMap::with_capacity(snapshot.pods.len());
        let now = jiff::Timestamp::now().to_string();

        let (mut adds, mut updates, mut deletes, mut reconciles) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for mut pod in snapshot.pods {
            let uid = pod_uid(&pod).to_string();
            let full_name = pod_full_name(&pod);
            if let Some(kept) = names.get(&full_name) {
                warn!(
                    pod = %pod_ref(&pod),
                    source,
                    kept_uid = %kept,
                    dropped_uid = %uid,
                    "duplicate pod name from one source; dropping the later pod"
                );
                continue;
            }
            if current.contains_key(&uid) {
                warn!(
                    pod = %pod_ref(&pod),
                    source,
                    podUID = %uid,
                    "duplicate pod UID from one source; dropping the later pod"
                );
                continue;
            }
            names.insert(full_name, uid.clone());
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_SOURCE_ANNOTATION.to_string(), source.to_string());

            match old.remove(&uid) {
                Some(mut existing) => {
                    match check_and_update(&mut existing, pod) {
                        Change::None => {}
                        Change::Update => updates.push(existing.clone()),
                        Change::Delete => deletes.push(existing.clone()),
                        Change::Reconcile => reconciles.push(existing.clone()),
                    }
                    current.insert(uid, existing);
                }
                None => {
                    if let Some(a) = pod.metadata.annotations.as_mut() {
                        a.insert(CONFIG_SEEN_ANNOTATION.to_string(), now.clone());
                    }
                    adds.push(pod.clone());
                    current.insert(uid, pod);
                }
            }
        }
        // What is left of the old set is gone from the source. Sorted for stable output.
        let mut removes: Vec<Pod> = old.into_values().collect();
        removes.sort_by_key(pod_full_name);
        self.pods.insert(source, current);

        let mut out = Vec::new();
        let mut emit = |op, pods: Vec<Pod>| {
            if !pods.is_empty() {
                out.push(PodUpdate { op, source, pods });
            }
        };
        let announce = first && adds.is_empty() && updates.is_empty() && deletes.is_empty();
        emit(PodOperation::Remove, removes);
        emit(PodOperation::Add, adds);
        emit(PodOperation::Update, updates);
        emit(PodOperation::Delete, deletes);
        if announce {
            // Nothing to add, but the sync loop must learn that this source reported.
            out.push(PodUpdate {
                op: PodOperation::Add,
                source,
                pods: Vec::new(),
            });
        }
        if !reconciles.is_empty() {
            out.push(PodUpdate {
                op: PodOperation::Reconcile,
                source,
                pods: reconciles,
            });
        }
        out
    }
}

/// Folds `new` into `existing` the way kubelet's `checkAndUpdatePod` does: the stored
/// pod keeps its identity and kubelet-local annotations and takes the new spec,
/// labels, deletion fields, generation (the status's `observedGeneration` reports
/// it), status and other annotations.
fn check_and_update(existing: &mut Pod, new: Pod) -> Change {
    if !differs_semantically(existing, &new) {
        if existing.status != new.status {
            existing.status = new.status;
            return Change::Reconcile;
        }
        return Change::None;
    }
    let mut annotations = new.metadata.annotations.unwrap_or_default();
    if let Some(old) = &existing.metadata.annotations {
        for key in LOCAL_ANNOTATIONS {
            if let Some(v) = old.get(key) {
                annotations.insert(key.to_string(), v.clone());
            }
        }
    }
    let meta = &mut existing.metadata;
    meta.annotations = Some(annotations);
    meta.labels = new.metadata.labels;
    meta.deletion_timestamp = new.metadata.deletion_timestamp;
    meta.deletion_grace_period_seconds = new.metadata.deletion_grace_period_seconds;
    meta.generation = new.metadata.generation;
    existing.spec = new.spec;
    existing.status = new.status;
    if existing.metadata.deletion_timestamp.is_some() {
        Change::Delete
    } else {
        Change::Update
    }
}

/// kubelet's `podsDifferSemantically`: what the sync loop must act on.
fn differs_semantically(a: &Pod, b: &Pod) -> bool {
    let empty = BTreeMap::new();
    a.spec != b.spec
        || a.metadata.labels.as_ref().unwrap_or(&empty)
            != b.metadata.labels.as_ref().unwrap_or(&empty)
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
        || a.metadata.deletion_grace_period_seconds != b.metadata.deletion_grace_period_seconds
        || !annotations_equal(
            a.metadata.annotations.as_ref().unwrap_or(&empty),
            b.metadata.annotations.as_ref().unwrap_or(&empty),
        )
}

/// Equal ignoring the kubelet-local annotations.
fn annotations_equal(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    let relevant = |m: &BTreeMap<String, String>| {
        m.iter()
            .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    relevant(a) == relevant(b)
}

/// Feeds snapshots through `config` and forwards every update in order; ends when the
/// sources are gone (`rx` closed) or the sync loop is (`tx` closed).
pub(crate) async fn run_merger(
    mut config: PodConfig,
    mut rx: mpsc::Receiver<SourceSnapshot>,
    tx: mpsc::Sender<PodUpdate>,
) {
    loop {
        let snapshot = tokio::select! {
            s = rx.recv() => match s {
                Some(s) => s,
                None => return,
            },
            () = tx.closed() => return,
        };
        for update in config.merge(snapshot) {
            if tx.send(update).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{API_SOURCE, FILE_SOURCE};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(uid: &str, name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("busybox:1.36".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    fn set(source: &'static str, pods: Vec<Pod>) -> SourceSnapshot {
        SourceSnapshot { source, pods }
    }

    /// (op, [uids]) per update, for compact assertions.
    fn summary(updates: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
        updates
            .iter()
            .map(|u| {
                (
                    u.op,
                    u.pods.iter().map(|p| pod_uid(p).to_string()).collect(),
                )
            })
            .collect()
    }

    fn ops(list: &[(PodOperation, &[&str])]) -> Vec<(PodOperation, Vec<String>)> {
        list.iter()
            .map(|(op, uids)| {
                (
                    *op,
                    uids.iter().map(std::string::ToString::to_string).collect(),
                )
            })
            .collect()
    }

    fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    #[test]
    fn first_snapshot_adds_with_source_and_seen() {
        let mut c = PodConfig::default();
        let out = c.merge(set(FILE_SOURCE, vec![pod("u1", "a"), pod("u2", "b")]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &["u1", "u2"])]));
        assert_eq!(out[0].source, FILE_SOURCE);
        for p in &out[0].pods {
            assert_eq!(annotation(p, CONFIG_SOURCE_ANNOTATION), Some("file"));
            let seen = annotation(p, CONFIG_SEEN_ANNOTATION).unwrap();
            assert!(seen.parse::<jiff::Timestamp>().is_ok(), "{seen}");
        }
    }

    #[test]
    fn first_empty_snapshot_emits_empty_add_once() {
        let mut c = PodConfig::default();
        let out = c.merge(set(FILE_SOURCE, vec![]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &[])]));
        assert!(c.merge(set(FILE_SOURCE, vec![])).is_empty());
    }

    #[test]
    fn identical_snapshot_emits_nothing() {
        let mut c = PodConfig::default();
        c.merge(set(FILE_SOURCE, vec![pod("u1", "a")]));
        assert!(c.merge(set(FILE_SOURCE, vec![pod("u1", "a")])).is_empty());
        // Local annotations differing is not a change either.
        let mut p = pod("u1", "a");
        p.metadata.annotations = Some(BTreeMap::from([
            (CONFIG_SEEN_ANNOTATION.to_string(), "yesterday".to_string()),
            (CONFIG_MIRROR_ANNOTATION.to_string(), "x".to_string()),
        ]));
        assert!(c.merge(set(FILE_SOURCE, vec![p])).is_empty());
    }

    #[test]
    fn gone_pods_are_removed() {
        let mut c = PodConfig::default();
        c.merge(set(FILE_SOURCE, vec![pod("u1", "a"), pod("u2", "b")]));
        let out = c.merge(set(FILE_SOURCE, vec![pod("u2", "b")]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Remove, &["u1"])]));
        let out = c.merge(set(FILE_SOURCE, vec![]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Remove, &["u2"])]));
    }

    #[test]
    fn spec_label_or_annotation_change_is_update_keeping_seen() {
        let mut c = PodConfig::default();
        let added = c.merge(set(API_SOURCE, vec![pod("u1", "a")]));
        let seen = annotation(&added[0].pods[0], CONFIG_SEEN_ANNOTATION)
            .unwrap()
            .to_string();

        let mut changed = pod("u1", "a");
        changed.spec.as_mut().unwrap().containers[0].image = Some("busybox:1.37".into());
        changed.metadata.generation = Some(2);
        let out = c.merge(set(API_SOURCE, vec![changed]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Update, &["u1"])]));
        let updated = &out[0].pods[0];
        assert_eq!(
            updated.metadata.generation,
            Some(2),
            "the generation follows"
        );
        assert_eq!(
            updated.spec.as_ref().unwrap().containers[0]
                .image
                .as_deref(),
            Some("busybox:1.37")
        );
        assert_eq!(
            annotation(updated, CONFIG_SEEN_ANNOTATION),
            Some(seen.as_str())
        );
        assert_eq!(annotation(updated, CONFIG_SOURCE_ANNOTATION), Some("api"));

        let mut labelled = updated.clone();
        labelled.metadata.labels = Some(BTreeMap::from([("app".into(), "x".into())]));
        let out = c.merge(set(API_SOURCE, vec![labelled.clone()]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Update, &["u1"])]));

        let mut annotated = labelled;
        annotated
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("team".into(), "b".into());
        // A source that sends a fresh seen time must not override the first one.
        annotated
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_SEEN_ANNOTATION.into(), "later".into());
        let out = c.merge(set(API_SOURCE, vec![annotated]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Update, &["u1"])]));
        assert_eq!(annotation(&out[0].pods[0], "team"), Some("b"));
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SEEN_ANNOTATION),
            Some(seen.as_str())
        );
    }

    #[test]
    fn change_with_deletion_timestamp_is_delete() {
        let mut c = PodConfig::default();
        c.merge(set(API_SOURCE, vec![pod("u1", "a")]));
        let mut deleting = pod("u1", "a");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        deleting.metadata.deletion_grace_period_seconds = Some(30);
        let out = c.merge(set(API_SOURCE, vec![deleting.clone()]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Delete, &["u1"])]));
        assert!(out[0].pods[0].metadata.deletion_timestamp.is_some());
        // Sent again unchanged: nothing new.
        assert!(c.merge(set(API_SOURCE, vec![deleting])).is_empty());
    }

    #[test]
    fn status_only_change_is_reconcile() {
        let mut c = PodConfig::default();
        c.merge(set(API_SOURCE, vec![pod("u1", "a")]));
        let mut running = pod("u1", "a");
        running.status.as_mut().unwrap().phase = Some("Running".into());
        let out = c.merge(set(API_SOURCE, vec![running.clone()]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Reconcile, &["u1"])]));
        assert_eq!(
            out[0].pods[0].status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(c.merge(set(API_SOURCE, vec![running])).is_empty());
    }

    #[test]
    fn one_merge_emits_all_kinds_in_kubelet_order() {
        let mut c = PodConfig::default();
        c.merge(set(
            API_SOURCE,
            vec![
                pod("upd", "u"),
                pod("del", "d"),
                pod("rec", "r"),
                pod("gone", "g"),
                pod("same", "s"),
            ],
        ));
        let mut upd = pod("upd", "u");
        upd.metadata.labels = Some(BTreeMap::from([("v".into(), "2".into())]));
        let mut del = pod("del", "d");
        del.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        let mut rec = pod("rec", "r");
        rec.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let out = c.merge(set(
            API_SOURCE,
            vec![rec, del, pod("new", "n"), upd, pod("same", "s")],
        ));
        assert_eq!(
            summary(&out),
            ops(&[
                (PodOperation::Remove, &["gone"]),
                (PodOperation::Add, &["new"]),
                (PodOperation::Update, &["upd"]),
                (PodOperation::Delete, &["del"]),
                (PodOperation::Reconcile, &["rec"]),
            ])
        );
    }

    #[test]
    fn first_snapshot_with_only_removes_or_reconciles_still_announces() {
        // A first snapshot has nothing to remove or reconcile, so the empty ADD is all.
        let mut c = PodConfig::default();
        let out = c.merge(set(API_SOURCE, vec![]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &[])]));
        assert_eq!(out[0].source, API_SOURCE);
    }

    #[test]
    fn duplicate_full_names_keep_the_first() {
        let mut c = PodConfig::default();
        let out = c.merge(set(
            FILE_SOURCE,
            vec![
                pod("u1", "a"),
                pod("u2", "a"),
                pod("u3", "b"),
                pod("u1", "c"),
            ],
        ));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &["u1", "u3"])]));
        // The dropped pod was never stored: the next set does not remove it.
        let out = c.merge(set(FILE_SOURCE, vec![pod("u1", "a"), pod("u3", "b")]));
        assert!(out.is_empty(), "{:?}", summary(&out));
        // Same name in another namespace is not a duplicate.
        let mut other_ns = pod("u4", "a");
        other_ns.metadata.namespace = Some("kube-system".into());
        let out = c.merge(set(
            FILE_SOURCE,
            vec![pod("u1", "a"), pod("u3", "b"), other_ns],
        ));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &["u4"])]));
    }

    #[test]
    fn sources_are_independent() {
        let mut c = PodConfig::default();
        c.merge(set(FILE_SOURCE, vec![pod("f1", "a")]));
        let out = c.merge(set(API_SOURCE, vec![pod("a1", "a")]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Add, &["a1"])]));
        assert_eq!(
            annotation(&out[0].pods[0], CONFIG_SOURCE_ANNOTATION),
            Some("api")
        );
        // Emptying one source removes only its pods.
        let out = c.merge(set(API_SOURCE, vec![]));
        assert_eq!(summary(&out), ops(&[(PodOperation::Remove, &["a1"])]));
        assert_eq!(out[0].source, API_SOURCE);
        assert!(c.merge(set(FILE_SOURCE, vec![pod("f1", "a")])).is_empty());
    }

    #[tokio::test]
    async fn run_merger_forwards_in_order_and_stops() {
        let (stx, srx) = mpsc::channel(4);
        let (utx, mut urx) = mpsc::channel(50);
        let task = tokio::spawn(run_merger(PodConfig::default(), srx, utx));
        stx.send(set(FILE_SOURCE, vec![])).await.unwrap();
        stx.send(set(FILE_SOURCE, vec![pod("u1", "a")]))
            .await
            .unwrap();
        stx.send(set(FILE_SOURCE, vec![pod("u1", "a")]))
            .await
            .unwrap();
        stx.send(set(FILE_SOURCE, vec![pod("u2", "b")]))
            .await
            .unwrap();
        drop(stx);
        let mut got = Vec::new();
        while let Some(u) = urx.recv().await {
            got.push(u);
        }
        task.await.unwrap();
        assert_eq!(
            summary(&got),
            ops(&[
                (PodOperation::Add, &[]),
                (PodOperation::Add, &["u1"]),
                (PodOperation::Remove, &["u1"]),
                (PodOperation::Add, &["u2"]),
            ])
        );
    }

    #[tokio::test]
    async fn run_merger_stops_when_the_sync_loop_is_gone() {
        let (stx, srx) = mpsc::channel(4);
        let (utx, urx) = mpsc::channel(1);
        let task = tokio::spawn(run_merger(PodConfig::default(), srx, utx));
        drop(urx);
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("merger kept running")
            .unwrap();
        drop(stx);
    }
}
