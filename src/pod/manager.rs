//! The pod manager: the desired pods, by UID, as the config sources last said, and
//! (for cluster mode) the mirror pods the apiserver holds for static pods, kept apart
//! and mapped to their static pod by full name, as kubelet's `basicManager` does.

use crate::locks::ReadWriteLocked as _;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;

use crate::pod::{API_SOURCE, is_mirror, pod_full_name, pod_source, pod_uid};

/// Whether `pod` is held as a mirror pod (never run): marked as one and from the
/// apiserver. A static manifest carrying the annotation is run as oxlet always has.
pub(crate) fn is_api_mirror(pod: &Pod) -> bool {
    is_mirror(pod) && pod_source(pod) == Some(API_SOURCE)
}

/// Pods by UID, and the UID of each full name (`<name>_<namespace>`).
#[derive(Debug, Default)]
struct Pods {
    by_uid: HashMap<String, Arc<Pod>>,
    by_full_name: HashMap<String, String>,
}

impl Pods {
    fn insert(&mut self, pod: Arc<Pod>) {
        let uid = pod_uid(&pod).to_string();
        self.by_full_name.insert(pod_full_name(&pod), uid.clone());
        self.by_uid.insert(uid, pod);
    }

    fn remove(&mut self, uid: &str) -> Option<Arc<Pod>> {
        let pod = self.by_uid.remove(uid)?;
        // Another pod may hold the full name by now (a static pod re-created with a new UID).
        let name = pod_full_name(&pod);
        if self.by_full_name.get(&name).is_some_and(|u| u == uid) {
            self.by_full_name.remove(&name);
        }
        Some(pod)
    }

    fn by_full_name(&self, name: &str) -> Option<Arc<Pod>> {
        self.by_full_name
            .get(name)
            .and_then(|uid| self.by_uid.get(uid))
            .cloned()
    }
}

#[derive(Debug, Default)]
struct Inner {
    pods: Pods,
    mirrors: Pods,
}

/// The desired pods (kubelet's `pod.Manager`). Read by the server and housekeeping.
/// Mirror pods are held apart: [`Self::get`], [`Self::all`] and [`Self::contains`]
/// see only the pods to run.
#[derive(Debug, Default)]
pub(crate) struct PodManager {
    inner: RwLock<Inner>,
}

impl PodManager {
    /// Adds or replaces a pod. A mirror pod from the apiserver goes with the mirror
    /// pods; a static manifest that carries the mirror annotation stays a pod to run,
    /// as oxlet has always run it (kubelet would ignore it).
    pub(crate) fn add_or_update(&self, pod: Arc<Pod>) {
        let mut inner = self.inner.write_locked();
        if is_api_mirror(&pod) {
            inner.mirrors.insert(pod);
        } else {
            inner.pods.insert(pod);
        }
    }
    /// Removes the pod or mirror pod with this UID.
    pub(crate) fn remove(&self, uid: &str) -> Option<Arc<Pod>> {
        let mut inner = self.inner.write_locked();
        inner.pods.remove(uid).or_else(|| inner.mirrors.remove(uid))
    }
    pub(crate) fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.inner.read_locked().pods.by_uid.get(uid).cloned()
    }
    /// The desired pod `namespace/name` (kubelet's `GetPodByName`; a static pod by
    /// its own name, which its mirror shares).
    pub(crate) fn get_by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        let inner = self.inner.read_locked();
        (inner.pods.by_uid.values())
            .find(|p| {
                p.metadata.name.as_deref() == Some(name)
                    && p.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .cloned()
    }
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.inner.read_locked().pods.by_uid.contains_key(uid)
    }
    /// Every desired pod, oldest first (by creation time, then name).
    pub(crate) fn all(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> = self
            .inner
            .read_locked()
            .pods
            .by_uid
            .values()
            .cloned()
            .collect();
        // Compared in place: a key with the name cloned cost two allocations a
        // comparison, ~1,500 a call at 110 pods, and the advisor calls this every second.
        pods.sort_by(|a, b| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        pods
    }
    pub(crate) fn len(&self) -> usize {
        self.inner.read_locked().pods.by_uid.len()
    }

    /// Mirror pods held (the census).
    pub(crate) fn mirror_count(&self) -> usize {
        self.inner.read_locked().mirrors.by_uid.len()
    }
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mirror pod of a static pod, by full name (kubelet's `GetMirrorPodByPod`).
    pub(crate) fn get_mirror_of_static(&self, pod: &Pod) -> Option<Arc<Pod>> {
        self.inner
            .read_locked()
            .mirrors
            .by_full_name(&pod_full_name(pod))
    }

    /// The static pod a mirror pod stands for, by full name (kubelet's
    /// `GetPodByMirrorPod`).
    pub(crate) fn get_static_of_mirror(&self, mirror: &Pod) -> Option<Arc<Pod>> {
        self.inner
            .read_locked()
            .pods
            .by_full_name(&pod_full_name(mirror))
    }

    /// Every mirror pod held.
    pub(crate) fn mirror_pods(&self) -> Vec<Arc<Pod>> {
        self.inner
            .read_locked()
            .mirrors
            .by_uid
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

    fn pod(name: &str, uid: &str, annotations: &[(&str, &str)]) -> Arc<Pod> {
        let annotations: std::collections::BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name, "namespace": "kube-system", "uid": uid,
                    "annotations": annotations,
                },
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }))
            .unwrap(),
        )
    }

    fn static_pod(name: &str, uid: &str) -> Arc<Pod> {
        pod(name, uid, &[(CONFIG_SOURCE_ANNOTATION, "file")])
    }

    fn mirror_pod(name: &str, uid: &str) -> Arc<Pod> {
        pod(
            name,
            uid,
            &[
                (CONFIG_SOURCE_ANNOTATION, "api"),
                (CONFIG_MIRROR_ANNOTATION, "hash-of-static"),
            ],
        )
    }

    fn uid(p: Option<Arc<Pod>>) -> Option<String> {
        p.map(|p| pod_uid(&p).to_string())
    }

    #[test]
    fn is_mirror_reads_the_mirror_annotation() {
        assert!(is_mirror(&mirror_pod("etcd-n1", "m1")));
        assert!(!is_mirror(&static_pod("etcd-n1", "s1")));
        assert!(!is_mirror(&pod("etcd-n1", "x", &[])));
    }

    #[test]
    fn mirror_pods_are_kept_apart_and_mapped_to_their_static_pod_by_full_name() {
        let m = PodManager::default();
        let etcd = static_pod("etcd-n1", "s1");
        let etcd_mirror = mirror_pod("etcd-n1", "m1");
        let lonely_mirror = mirror_pod("gone-n1", "m2");
        let api = static_pod("apiserver-n1", "s2");
        for p in [&etcd, &etcd_mirror, &lonely_mirror, &api] {
            m.add_or_update(p.clone());
        }
        // Mirror pods are not pods to run.
        assert_eq!(m.len(), 2);
        assert!(!m.contains("m1") && m.get("m1").is_none());
        assert!(m.all().iter().all(|p| !is_mirror(p)));
        let mut mirrors: Vec<String> = m.mirror_pods().iter().map(|p| pod_uid(p).into()).collect();
        mirrors.sort();
        assert_eq!(mirrors, ["m1", "m2"]);

        assert_eq!(uid(m.get_mirror_of_static(&etcd)), Some("m1".into()));
        assert_eq!(uid(m.get_static_of_mirror(&etcd_mirror)), Some("s1".into()));
        assert_eq!(m.get_mirror_of_static(&api), None);
        assert_eq!(m.get_static_of_mirror(&lonely_mirror), None);

        // Removing the mirror pod by UID unmaps it; the static pod stays.
        assert_eq!(uid(m.remove("m1")), Some("m1".into()));
        assert_eq!(m.get_mirror_of_static(&etcd), None);
        assert!(m.contains("s1"));
        assert_eq!(m.remove("nope"), None);
    }

    #[test]
    fn a_file_pod_carrying_the_mirror_annotation_is_still_a_pod_to_run() {
        let m = PodManager::default();
        let odd = pod(
            "odd-n1",
            "s9",
            &[
                (CONFIG_SOURCE_ANNOTATION, "file"),
                (CONFIG_MIRROR_ANNOTATION, "x"),
            ],
        );
        m.add_or_update(odd);
        assert!(m.contains("s9"));
        assert!(m.mirror_pods().is_empty());
    }

    #[test]
    fn a_static_pod_recreated_with_a_new_uid_keeps_the_mapping_when_the_old_one_goes() {
        let m = PodManager::default();
        let old = static_pod("etcd-n1", "s1");
        let new = static_pod("etcd-n1", "s1-new");
        let mirror = mirror_pod("etcd-n1", "m1");
        m.add_or_update(old);
        m.add_or_update(new);
        m.add_or_update(mirror.clone());
        // The newer pod holds the full name; removing the older leaves it mapped.
        m.remove("s1");
        assert_eq!(uid(m.get_static_of_mirror(&mirror)), Some("s1-new".into()));
        m.remove("s1-new");
        assert_eq!(m.get_static_of_mirror(&mirror), None);
        assert!(m.is_empty());
    }

    #[test]
    fn pods_are_listed_oldest_first_and_updates_replace() {
        let m = PodManager::default();
        let mut b = (*static_pod("b", "u-b")).clone();
        b.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(100).unwrap(),
        ));
        let mut a = (*static_pod("a", "u-a")).clone();
        a.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(200).unwrap(),
        ));
        m.add_or_update(Arc::new(a.clone()));
        m.add_or_update(Arc::new(b));
        let names: Vec<String> = m
            .all()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["b", "a"]);
        a.metadata.labels = Some([("v".to_string(), "2".to_string())].into());
        m.add_or_update(Arc::new(a));
        assert_eq!(m.len(), 2);
        assert!(m.get("u-a").unwrap().metadata.labels.is_some());
    }
}
