//! One resource state: an in-memory map of pod UID to its containers' (and the pod's
//! own) resource requirements, written through to a checkpoint file on every change.
//!
//! The file is kubelet's unversioned (v1) checkpoint, which kubelet 1.36 still reads
//! (and migrates): `{"data": "<json>", "checksum": N}` where the data is
//! `{"entries": {uid: {"ContainerResources": {name: requirements}, "PodLevelResources":
//! requirements}}}` and the checksum is FNV-32a over what kubelet's `DeepHashObject`
//! prints for the data string: `(string)` and the string itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::locks::Locked as _;

/// kubelet's file name for the admitted (allocated) resources.
pub(crate) const ALLOCATED_STATE_FILE: &str = "allocated_pods_state";
/// kubelet's file name for the resources the runtime was last given.
pub(crate) const ACTUATED_STATE_FILE: &str = "actuated_pods_state";

/// Largest checkpoint read back: 110 pods of a few containers need well under 1 MiB.
const MAX_STATE_BYTES: u64 = 16 << 20;

/// A pod's entry: its containers' requirements by name, and its pod-level ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PodResources {
    #[serde(rename = "ContainerResources", default)]
    pub containers: BTreeMap<String, ResourceRequirements>,
    #[serde(
        rename = "PodLevelResources",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pod_level: Option<ResourceRequirements>,
}

impl PodResources {
    /// kubelet's `allocationFromPod`: the resizable containers' requirements as the
    /// spec gives them, and the pod's own.
    pub(crate) fn of_pod(pod: &Pod) -> Self {
        let mut out = PodResources::default();
        let Some(spec) = pod.spec.as_ref() else {
            return out;
        };
        out.pod_level = spec.resources.clone();
        for (c, _) in resizable_containers(spec) {
            out.containers
                .insert(c.name.clone(), c.resources.clone().unwrap_or_default());
        }
        out
    }

    /// Semantically the same (quantities compared by value, `1` equals `1000m`).
    pub(crate) fn same_as(&self, other: &PodResources) -> bool {
        same_optional(self.pod_level.as_ref(), other.pod_level.as_ref())
            && self.containers.len() == other.containers.len()
            && self.containers.iter().all(|(name, a)| {
                other
                    .containers
                    .get(name)
                    .is_some_and(|b| same_requirements(a, b))
            })
    }
}

/// kubelet's `IsResizableContainer`: every regular container, and of the init
/// containers the restartable ones (sidecars), which run beside the others.
pub(crate) fn is_resizable(c: &Container, init: bool) -> bool {
    !init || c.restart_policy.as_deref() == Some("Always")
}

/// The spec's resizable containers, init containers first (kubelet's `ContainerIter`
/// over init and regular containers), each with whether it is an init container.
pub(crate) fn resizable_containers(spec: &PodSpec) -> impl Iterator<Item = (&Container, bool)> {
    let inits = spec.init_containers.iter().flatten().map(|c| (c, true));
    inits
        .chain(spec.containers.iter().map(|c| (c, false)))
        .filter(|(c, init)| is_resizable(c, *init))
}

/// Two optional requirements (a pod's own, which it may not have) alike by value.
pub(crate) fn same_optional(
    a: Option<&ResourceRequirements>,
    b: Option<&ResourceRequirements>,
) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_requirements(a, b),
        _ => false,
    }
}

/// Two requirements with the same requests and limits by value (kubelet's
/// `Semantic.DeepEqual`); an empty list equals an absent one.
pub(crate) fn same_requirements(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    same_list(a.requests.as_ref(), b.requests.as_ref())
        && same_list(a.limits.as_ref(), b.limits.as_ref())
}

fn same_list(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter()
            .all(|(name, qa)| b.get(name).is_some_and(|qb| same_quantity(qa, qb)))
}

fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    match (crate::quantity::milli_cpu(a), crate::quantity::milli_cpu(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.0 == b.0,
    }
}

/// kubelet's `updatePodFromAllocation`: the pod with its resizable containers' and its
/// own requirements replaced by the allocation's, or `None` when they already agree.
pub(crate) fn apply_allocation(pod: &Pod, alloc: &PodResources) -> Option<Pod> {
    let spec = pod.spec.as_ref()?;
    let differs = |c: &Container| {
        alloc.containers.get(&c.name).is_some_and(|a| {
            !same_requirements(a, c.resources.as_ref().unwrap_or(&Default::default()))
        })
    };
    let pod_level_differs = !same_optional(spec.resources.as_ref(), alloc.pod_level.as_ref());
    let inits = spec.init_containers.iter().flatten();
    if !pod_level_differs && !inits.clone().chain(&spec.containers).any(differs) {
        return None;
    }
    let mut out = pod.clone();
    let spec = out.spec.as_mut()?;
    spec.resources.clone_from(&alloc.pod_level);
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(&mut spec.containers)
    {
        if let Some(a) = alloc.containers.get(&c.name) {
            c.resources = Some(a.clone());
        }
    }
    Some(out)
}

/// Why a state file cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StateError {
    #[error("reading {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error(
        "{file} is corrupt ({why}): drain this node and delete the file before starting again, as kubelet asks"
    )]
    Corrupt { file: String, why: CheckpointError },
}

/// What is wrong inside a state file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("checksum {stored} does not match its data ({computed})")]
    Checksum { stored: u64, computed: u64 },
}

/// The file's shape: kubelet's `Checkpoint`.
#[derive(Serialize, Deserialize)]
struct Checkpoint {
    data: String,
    checksum: u64,
}

#[derive(Serialize, Deserialize, Default)]
struct Entries {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: BTreeMap<String, PodResources>,
}

/// kubelet's checkpoint checksum of `data`.
fn checksum(data: &str) -> u64 {
    let mut h = crate::hash::Fnv32a::default();
    h.write(b"(string)");
    h.write(data.as_bytes());
    u64::from(h.finish())
}

/// One state, in memory and (unless a unit test's) in its file.
pub(crate) struct ResourceState {
    file: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, PodResources>>,
}

impl ResourceState {
    /// The state in `dir/name`, read back if the file exists.
    pub(crate) fn open(dir: &Path, name: &str) -> Result<Self, StateError> {
        let file = dir.join(name);
        let shown = file.display().to_string();
        let body = crate::private_file::read_bounded(&file, MAX_STATE_BYTES).map_err(|source| {
            StateError::Read {
                file: shown.clone(),
                source,
            }
        })?;
        let entries = match body {
            None => BTreeMap::new(),
            Some(body) => {
                Self::decode(&body).map_err(|why| StateError::Corrupt { file: shown, why })?
            }
        };
        Ok(Self {
            file: Some(file),
            entries: Mutex::new(entries),
        })
    }

    /// A state kept in memory only (unit tests).
    #[cfg(test)]
    pub(crate) fn in_memory() -> Self {
        Self {
            file: None,
            entries: Mutex::new(BTreeMap::new()),
        }
    }

    fn decode(body: &[u8]) -> Result<BTreeMap<String, PodResources>, CheckpointError> {
        let cp: Checkpoint = serde_json::from_slice(body)?;
        if checksum(&cp.data) != cp.checksum {
            return Err(CheckpointError::Checksum {
                stored: cp.checksum,
                computed: checksum(&cp.data),
            });
        }
        let data: Entries = serde_json::from_str(&cp.data)?;
        Ok(data.entries)
    }

    fn encode(entries: &BTreeMap<String, PodResources>) -> Vec<u8> {
        let data = serde_json::to_string(&Entries {
            entries: entries.clone(),
        })
        .unwrap_or_default();
        let checksum = checksum(&data);
        serde_json::to_vec(&Checkpoint { data, checksum }).unwrap_or_default()
    }

    /// A pod's entry.
    pub(crate) fn pod(&self, uid: &str) -> Option<PodResources> {
        self.entries.locked().get(uid).cloned()
    }

    /// One container's requirements.
    pub(crate) fn container(&self, uid: &str, name: &str) -> Option<ResourceRequirements> {
        self.entries
            .locked()
            .get(uid)?
            .containers
            .get(name)
            .cloned()
    }

    /// The UIDs with an entry.
    pub(crate) fn uids(&self) -> Vec<String> {
        self.entries.locked().keys().cloned().collect()
    }

    /// Changes the state with `change` and writes the file if anything changed; on a
    /// failed write the memory goes back to what the file holds, as kubelet's does.
    fn update(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, PodResources>),
    ) -> std::io::Result<()> {
        let mut entries = self.entries.locked();
        let before = entries.clone();
        change(&mut entries);
        if *entries == before {
            return Ok(());
        }
        let Some(file) = &self.file else {
            return Ok(());
        };
        crate::private_file::write_atomically(file, &Self::encode(&entries)).inspect_err(|_| {
            *entries = before;
        })
    }

    /// Sets a pod's whole entry.
    pub(crate) fn set_pod(&self, uid: &str, resources: PodResources) -> std::io::Result<()> {
        self.update(|e| {
            if e.get(uid).is_none_or(|old| !old.same_as(&resources)) {
                e.insert(uid.to_owned(), resources);
            }
        })
    }

    /// Sets one container's requirements.
    pub(crate) fn set_container(
        &self,
        uid: &str,
        name: &str,
        resources: ResourceRequirements,
    ) -> std::io::Result<()> {
        self.update(|e| {
            let pod = e.entry(uid.to_owned()).or_default();
            if pod
                .containers
                .get(name)
                .is_none_or(|old| !same_requirements(old, &resources))
            {
                pod.containers.insert(name.to_owned(), resources);
            }
        })
    }

    /// Sets the pod-level requirements.
    pub(crate) fn set_pod_level(
        &self,
        uid: &str,
        resources: Option<ResourceRequirements>,
    ) -> std::io::Result<()> {
        self.update(|e| {
            let pod = e.entry(uid.to_owned()).or_default();
            if !same_optional(pod.pod_level.as_ref(), resources.as_ref()) {
                pod.pod_level = resources;
            }
        })
    }

    /// Forgets a pod.
    pub(crate) fn remove_pod(&self, uid: &str) -> std::io::Result<()> {
        self.update(|e| {
            e.remove(uid);
        })
    }

    /// Forgets every pod `keep` says no to (kubelet's `RemoveOrphanedPods`). Asked on
    /// every housekeeping pass: with nothing to forget, nothing is copied or written.
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) -> std::io::Result<()> {
        if self.entries.locked().keys().all(|uid| keep(uid)) {
            return Ok(());
        }
        self.update(|e| e.retain(|uid, _| keep(uid)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(cpu: &str, mem: &str) -> ResourceRequirements {
        ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity(cpu.into())),
                ("memory".to_owned(), Quantity(mem.into())),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn kubelets_own_checkpoint_reads_back() {
        // A v1 checkpoint as kubelet's own test writes it, checksum and all.
        let body = br#"{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}"#;
        let entries = ResourceState::decode(body).unwrap();
        assert!(same_requirements(
            &entries["pod1"].containers["container1"],
            &reqs("1Ki", "1Ki")
        ));
        // And oxlet writes the same bytes for the same entries.
        assert_eq!(ResourceState::encode(&entries), body.to_vec());
    }

    #[test]
    fn a_changed_or_corrupt_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResourceState::open(dir.path(), ALLOCATED_STATE_FILE).unwrap();
        s.set_container("u1", "main", reqs("100m", "64Mi")).unwrap();
        let file = dir.path().join(ALLOCATED_STATE_FILE);
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, text.replace("100m", "900m")).unwrap();
        let err = ResourceState::open(dir.path(), ALLOCATED_STATE_FILE)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("allocated_pods_state is corrupt (checksum"),
            "{err}"
        );
    }

    #[test]
    fn entries_survive_a_restart_and_same_values_do_not_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let s = ResourceState::open(dir.path(), ACTUATED_STATE_FILE).unwrap();
        s.set_container("u1", "main", reqs("1", "64Mi")).unwrap();
        s.set_pod_level("u1", Some(reqs("2", "128Mi"))).unwrap();
        let file = dir.path().join(ACTUATED_STATE_FILE);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::remove_file(&file).unwrap();
        // 1000m is 1 by value: nothing to write.
        s.set_container("u1", "main", reqs("1000m", "65536Ki"))
            .unwrap();
        assert!(!file.exists());
        s.set_container("u1", "main", reqs("2", "64Mi")).unwrap();
        let again = ResourceState::open(dir.path(), ACTUATED_STATE_FILE).unwrap();
        assert!(same_requirements(
            &again.container("u1", "main").unwrap(),
            &reqs("2", "64Mi")
        ));
        assert!(same_requirements(
            again.pod("u1").unwrap().pod_level.as_ref().unwrap(),
            &reqs("2", "128Mi")
        ));
        again.retain(|uid| uid != "u1").unwrap();
        assert!(again.uids().is_empty());
    }

    #[test]
    fn the_pod_takes_its_allocation() {
        let mut pod = Pod::default();
        let mut spec = k8s_openapi::api::core::v1::PodSpec::default();
        spec.containers.push(Container {
            name: "main".into(),
            resources: Some(reqs("500m", "64Mi")),
            ..Default::default()
        });
        pod.spec = Some(spec);
        let alloc = PodResources::of_pod(&pod);
        assert!(apply_allocation(&pod, &alloc).is_none());
        let mut resized = pod.clone();
        resized.spec.as_mut().unwrap().containers[0].resources = Some(reqs("1", "64Mi"));
        let back = apply_allocation(&resized, &alloc).unwrap();
        assert_eq!(PodResources::of_pod(&back), alloc);
    }
}
