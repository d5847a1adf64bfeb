//! kubelet's local storage limit evictions (`localStorageEviction`): a pod whose
//! emptyDir outgrows its `sizeLimit`, whose ephemeral storage outgrows the sum of its
//! containers' limits, or one of whose containers outgrows its own limit, is evicted
//! at once, whatever the node's pressure. This is the check only, a pure function over
//! the pods and their measured usage; the eviction manager evicts what it returns
//! (grace [`IMMEDIATE_GRACE_SECONDS`], `kubelet_evictions{eviction_signal=…}`).
//!
//! The checks run in kubelet's order, and a pod gets at most one violation (the first).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tracing::warn;

use crate::cm::pod_limits;
use crate::pod::{pod_ref, pod_uid};
use crate::quantity;
use crate::stats::{PodUsage, VolumeUsage};

/// kubelet's `immediateEvictionGracePeriodSeconds`.
pub(crate) const IMMEDIATE_GRACE_SECONDS: i64 = 1;

/// Which limit a pod broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitKind {
    EmptyDir,
    Pod,
    Container,
}

impl LimitKind {
    /// The `eviction_signal` label kubelet counts the eviction under.
    pub(crate) fn signal(self) -> &'static str {
        match self {
            LimitKind::EmptyDir => "emptydirfs.limit",
            LimitKind::Pod => "ephemeralpodfs.limit",
            LimitKind::Container => "ephemeralcontainerfs.limit",
        }
    }
}

/// One pod to evict, with kubelet's message (also the `Evicted` event's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub pod_uid: String,
    pub message: String,
    pub kind: LimitKind,
}

/// Container writable layer (rootfs) bytes, per pod UID and container name (the
/// metric advisor's `rootfs` readings, from CRI `ListContainerStats`); empty when the
/// runtime does not say.
#[derive(Debug, Clone, Default)]
pub(crate) struct WritableLayers(pub HashMap<String, HashMap<String, u64>>);

impl WritableLayers {
    fn of(&self, uid: &str, container: &str) -> Option<u64> {
        self.0.get(uid)?.get(container).copied()
    }

    fn pod_total(&self, uid: &str) -> u64 {
        self.0.get(uid).map_or(0, |c| c.values().sum())
    }
}

/// The pods that broke a local storage limit, in the order given. `dedicated_image_fs`
/// (the image filesystem is not the root dir's) leaves the writable layer out of a
/// container's usage, as kubelet does. Pods never measured are skipped.
pub(crate) fn violations(
    pods: &[Arc<Pod>],
    usage: &VolumeUsage,
    layers: &WritableLayers,
    dedicated_image_fs: bool,
) -> Vec<Violation> {
    pods.iter()
        .filter_map(|pod| {
            let uid = pod_uid(pod);
            let used = usage.usage_of(uid)?;
            let (message, kind) = empty_dir(pod, &used)
                .map(|m| (m, LimitKind::EmptyDir))
                .or_else(|| pod_limit(pod, &used, layers).map(|m| (m, LimitKind::Pod)))
                .or_else(|| {
                    container_limit(pod, &used, layers, dedicated_image_fs)
                        .map(|m| (m, LimitKind::Container))
                })?;
            Some(Violation {
                pod_uid: uid.to_string(),
                message,
                kind,
            })
        })
        .collect()
}

/// A quantity's bytes, or None (with a warning naming the field) when unusable.
fn bytes_of(pod: &Pod, field: &str, q: &Quantity) -> Option<i64> {
    match quantity::bytes(q) {
        Ok(v) => Some(v),
        Err(e) => {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), field, error = %e, "ignoring a local storage limit");
            None
        }
    }
}

/// kubelet's `emptyDirLimitEviction`: the first emptyDir with a positive `sizeLimit`
/// whose measured usage is above it. Memory-backed emptyDirs are not measured here
/// (they are on a tmpfs, see `stats::volumes`), so only disk-backed ones can violate.
fn empty_dir(pod: &Pod, used: &PodUsage) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_deref()?;
    volumes.iter().find_map(|v| {
        let limit_q = v.empty_dir.as_ref()?.size_limit.as_ref()?;
        let field = format!("spec.volumes[{:?}].emptyDir.sizeLimit", v.name);
        let limit = bytes_of(pod, &field, limit_q)?;
        let bytes = i64::try_from(used.volume(&v.name)?.bytes).unwrap_or(i64::MAX);
        (limit > 0 && bytes > limit).then(|| {
            format!(
                "Usage of EmptyDir volume {:?} exceeds the limit {:?}. ",
                v.name,
                canonical(limit, &limit_q.0)
            )
        })
    })
}

/// The pod's ephemeral storage as kubelet's stats sum it: the containers' writable
/// layers, the disk-backed volumes, the pod's log directory and its `etc-hosts`.
fn pod_total(uid: &str, used: &PodUsage, layers: &WritableLayers) -> u64 {
    let volumes: u64 = used.volumes.iter().map(|(_, u)| u.bytes).sum();
    let logs: u64 = used.container_logs.iter().map(|(_, u)| u.bytes).sum();
    layers.pod_total(uid)
        + volumes
        + logs
        + used.pod_logs.bytes
        + used.etc_hosts.map_or(0, |u| u.bytes)
}

/// kubelet's `podEphemeralStorageLimitEviction`: the pod's limit is `PodLimits`'s
/// ephemeral-storage (the containers that set one, sidecars and init containers as
/// for any resource, plus overhead); a pod where no container sets one is not checked.
fn pod_limit(pod: &Pod, used: &PodUsage, layers: &WritableLayers) -> Option<String> {
    let limit = match pod_limits(pod) {
        Ok((limits, _)) => limits.ephemeral_storage_bytes?,
        Err(e) => {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), error = %e, "ignoring the pod's ephemeral-storage limit");
            return None;
        }
    };
    let total = i64::try_from(pod_total(pod_uid(pod), used, layers)).unwrap_or(i64::MAX);
    (total > limit).then(|| {
        format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            canonical(limit, first_limit_text(pod).unwrap_or_default())
        )
    })
}

/// The first container's ephemeral-storage limit as written: kubelet's sum keeps the
/// format of the first quantity it adds.
fn first_limit_text(pod: &Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find_map(|c| {
            Some(
                c.resources
                    .as_ref()?
                    .limits
                    .as_ref()?
                    .get("ephemeral-storage")?
                    .0
                    .as_str(),
            )
        })
}

/// kubelet's `containerEphemeralStorageLimitEviction`: the first regular container
/// with a non-zero limit whose logs (plus its writable layer unless the image
/// filesystem is dedicated) are above it. A container with no usage measured is skipped.
fn container_limit(
    pod: &Pod,
    used: &PodUsage,
    layers: &WritableLayers,
    dedicated_image_fs: bool,
) -> Option<String> {
    let uid = pod_uid(pod);
    pod.spec.as_ref()?.containers.iter().find_map(|c| {
        let limit_q = c
            .resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("ephemeral-storage")?;
        let field = format!("container {:?}: resources.limits.ephemeral-storage", c.name);
        let limit = bytes_of(pod, &field, limit_q)?;
        let logs = used.container_log(&c.name).map(|u| u.bytes);
        let layer = if dedicated_image_fs {
            None
        } else {
            layers.of(uid, &c.name)
        };
        if limit == 0 || (logs.is_none() && layer.is_none()) {
            return None;
        }
        let bytes = logs.unwrap_or(0).saturating_add(layer.unwrap_or(0));
        (i64::try_from(bytes).unwrap_or(i64::MAX) > limit).then(|| {
            format!(
                "Container {} exceeded its local ephemeral storage limit {:?}. ",
                c.name,
                canonical(limit, &limit_q.0)
            )
        })
    })
}

/// `bytes` as Kubernetes' `Quantity.String()` writes it in the format of `written`:
/// binary suffixes for a binary quantity (`1Mi`), else decimal ones (`2k`, `1500`).
fn canonical(bytes: i64, written: &str) -> String {
    crate::quantity::canonical(bytes, written.ends_with('i'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Dirs, Usage};

    const MI: u64 = 1 << 20;

    fn pod(uid: &str, spec: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "ns", "uid": uid},
                "spec": spec
            }))
            .unwrap(),
        )
    }

    fn u(bytes: u64) -> Usage {
        Usage {
            bytes,
            inodes: 1,
            partial: false,
        }
    }

    fn container(name: &str, limit: Option<&str>) -> serde_json::Value {
        match limit {
            Some(l) => serde_json::json!({"name": name, "image": "x",
                "resources": {"limits": {"ephemeral-storage": l}}}),
            None => serde_json::json!({"name": name, "image": "x"}),
        }
    }

    fn check(pods: &[Arc<Pod>], usage: &VolumeUsage, layers: &WritableLayers) -> Vec<Violation> {
        violations(pods, usage, layers, false)
    }

    #[test]
    fn an_empty_dir_over_its_size_limit_gets_kubelets_message() {
        let p = pod(
            "u1",
            serde_json::json!({"containers": [container("app", None)], "volumes": [
                {"name": "small", "emptyDir": {"sizeLimit": "1024Ki"}},
                {"name": "big", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "nolimit", "emptyDir": {}},
            ]}),
        );
        let usage = VolumeUsage::default();
        usage.set(
            "u1",
            PodUsage {
                volumes: vec![
                    ("small".into(), u(MI)),
                    ("big".into(), u(2 * MI)),
                    ("nolimit".into(), u(100 * MI)),
                ],
                ..PodUsage::default()
            },
        );
        // Exactly at the limit is fine (kubelet evicts on used > limit).
        assert!(check(std::slice::from_ref(&p), &usage, &WritableLayers::default()).is_empty());
        usage.set(
            "u1",
            PodUsage {
                volumes: vec![("small".into(), u(MI + 4096))],
                ..PodUsage::default()
            },
        );
        let v = check(&[p], &usage, &WritableLayers::default());
        assert_eq!(
            v,
            vec![Violation {
                pod_uid: "u1".into(),
                message: "Usage of EmptyDir volume \"small\" exceeds the limit \"1Mi\". ".into(),
                kind: LimitKind::EmptyDir,
            }]
        );
        assert_eq!(v[0].kind.signal(), "emptydirfs.limit");
    }

    #[test]
    fn the_pod_limit_sums_the_containers_that_set_one() {
        let p = pod(
            "u1",
            serde_json::json!({"containers": [
                container("a", Some("1Mi")), container("b", None), container("c", Some("1Mi"))
            ]}),
        );
        let usage = VolumeUsage::default();
        let at = |bytes| PodUsage {
            volumes: vec![("data".into(), u(bytes))],
            container_logs: vec![("b".into(), u(4096))],
            ..PodUsage::default()
        };
        usage.set("u1", at(2 * MI - 4096));
        assert!(check(std::slice::from_ref(&p), &usage, &WritableLayers::default()).is_empty());
        usage.set("u1", at(2 * MI));
        let v = check(std::slice::from_ref(&p), &usage, &WritableLayers::default());
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. "
        );
        assert_eq!(v[0].kind.signal(), "ephemeralpodfs.limit");
        // Writable layers count towards the pod total.
        usage.set("u1", at(MI));
        let layers = WritableLayers(HashMap::from([(
            "u1".to_string(),
            HashMap::from([("b".to_string(), MI)]),
        )]));
        assert_eq!(
            check(std::slice::from_ref(&p), &usage, &layers)[0].kind,
            LimitKind::Pod
        );
        // No container sets a limit: no pod check.
        let free = pod(
            "u2",
            serde_json::json!({"containers": [container("a", None)]}),
        );
        usage.set("u2", at(100 * MI));
        assert!(check(&[free], &usage, &WritableLayers::default()).is_empty());
    }

    #[test]
    fn a_container_over_its_limit_counts_logs_and_its_layer_unless_image_fs_is_dedicated() {
        // The pod limit (1000k + 10M) is far away; container "a" is at 1000k.
        let p = pod(
            "u1",
            serde_json::json!({"containers": [
                container("a", Some("1000k")), container("b", Some("10M")), container("z", Some("0"))
            ]}),
        );
        let usage = VolumeUsage::default();
        usage.set(
            "u1",
            PodUsage {
                container_logs: vec![("a".into(), u(600_000)), ("z".into(), u(MI))],
                ..PodUsage::default()
            },
        );
        let layers = WritableLayers(HashMap::from([(
            "u1".to_string(),
            HashMap::from([("a".to_string(), 500_000)]),
        )]));
        let v = violations(std::slice::from_ref(&p), &usage, &layers, false);
        assert_eq!(
            v,
            vec![Violation {
                pod_uid: "u1".into(),
                message: "Container a exceeded its local ephemeral storage limit \"1M\". ".into(),
                kind: LimitKind::Container,
            }]
        );
        assert_eq!(v[0].kind.signal(), "ephemeralcontainerfs.limit");
        // With a dedicated image filesystem the layer is not counted: 600k < 1M.
        assert!(violations(&[p], &usage, &layers, true).is_empty());
    }

    #[test]
    fn checks_run_in_kubelets_order_and_unmeasured_pods_are_skipped() {
        let spec = serde_json::json!({
            "containers": [container("a", Some("1Mi"))],
            "volumes": [{"name": "d", "emptyDir": {"sizeLimit": "1Mi"}}]
        });
        let p = pod("u1", spec.clone());
        let unmeasured = pod("u2", spec);
        let usage = VolumeUsage::default();
        usage.set(
            "u1",
            PodUsage {
                volumes: vec![("d".into(), u(3 * MI))],
                container_logs: vec![("a".into(), u(3 * MI))],
                ..PodUsage::default()
            },
        );
        let v = check(&[p, unmeasured], &usage, &WritableLayers::default());
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].kind,
            LimitKind::EmptyDir,
            "emptyDir first, one per pod"
        );
    }

    #[test]
    fn a_bad_limit_is_skipped_not_fatal() {
        let p = pod(
            "u1",
            serde_json::json!({"containers": [container("a", Some("lots"))],
                "volumes": [{"name": "d", "emptyDir": {"sizeLimit": "bad"}}]}),
        );
        let ok = pod(
            "u2",
            serde_json::json!({"containers": [container("a", None)],
                "volumes": [{"name": "d", "emptyDir": {"sizeLimit": "1Ki"}}]}),
        );
        let usage = VolumeUsage::default();
        let big = PodUsage {
            volumes: vec![("d".into(), u(MI))],
            container_logs: vec![("a".into(), u(MI))],
            ..PodUsage::default()
        };
        usage.set("u1", big.clone());
        usage.set("u2", big);
        let v = check(&[p, ok], &usage, &WritableLayers::default());
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pod_uid, "u2");
    }

    #[test]
    fn quantities_print_canonically() {
        assert_eq!(canonical(MI as i64, "1024Ki"), "1Mi");
        assert_eq!(canonical(1500, "1500Mi"), "1500");
        assert_eq!(canonical(2_000_000, "2000k"), "2M");
        assert_eq!(canonical(1500, "1500"), "1500");
        assert_eq!(canonical(0, "0"), "0");
    }

    #[test]
    fn a_measured_empty_dir_over_its_limit_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = Dirs {
            pods: tmp.path().join("pods"),
            pod_logs: tmp.path().join("logs"),
        };
        let p = pod(
            "u1",
            serde_json::json!({"containers": [container("app", None)],
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]}),
        );
        let dir = dirs.pods.join("u1/volumes/kubernetes.io~empty-dir/scratch");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("blob"), vec![1u8; 2 * MI as usize]).unwrap();
        let usage = VolumeUsage::default();
        usage.refresh(std::slice::from_ref(&p), &dirs);
        let v = check(&[p], &usage, &WritableLayers::default());
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].message,
            "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "
        );
    }
}
