//! User namespaces for `hostUsers: false` pods (UserNamespacesSupport, GA in 1.36), as
//! kubelet's `userns` manager gives them: each such pod gets its own block of
//! `userNamespaces.idsPerPod` host IDs (65536 unless set), mapped to IDs 0.. inside, the
//! same for UIDs and GIDs. The blocks come from the `kubelet` user's range in
//! `/etc/subuid` and `/etc/subgid` when there is one, else from everything above the
//! first block (never ID 0); the range must hold `maxPods` blocks. A
//! pod's block is kept in its directory (`<pods>/<uid>/userns`, kubelet's file and
//! JSON), so it survives an agent restart, and it is free again once the pod's
//! directory is gone. Other pods get the node's user namespace, said explicitly.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::locks::Locked as _;

/// kubelet's default `userNamespaces.idsPerPod`, and the unit every block is made of.
pub(crate) const IDS_PER_POD: u32 = 65536;
/// The largest pod file read: kubelet's JSON of one mapping is ~130 bytes.
const MAX_FILE_BYTES: usize = 4096;
/// kubelet's file in the pod's directory.
const MAPPINGS_FILE: &str = "userns";
/// The user whose subordinate ranges kubelet takes.
const KUBELET_USER: &str = "kubelet";

/// Why a pod gets no user namespace: the pod's sandbox is not made (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UsernsError {
    #[error("can't set `spec.hostUsers: false`, runtime does not support user namespaces")]
    RuntimeUnsupported,
    #[error(
        "can't set `spec.hostUsers: false`, RuntimeClass handler {0:?} does not support user namespaces"
    )]
    HandlerUnsupported(String),
    #[error("create user namespace: could not find an empty slot to allocate a user namespace")]
    Exhausted,
    #[error("user namespace: {0}")]
    File(String),
    #[error("kubelet mappings: {0}")]
    Mappings(String),
}

/// One ID mapping as kubelet's file stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdMapping {
    host_id: u32,
    container_id: u32,
    length: u32,
}

/// kubelet's `userns` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MappingsFile {
    uid_mappings: Vec<IdMapping>,
    gid_mappings: Vec<IdMapping>,
}

/// Hands out the blocks. Allocation reads the pods' files each time (allocations are
/// rare), under a lock so two pods never pick the same block.
pub(crate) struct UsernsManager {
    pods_dir: PathBuf,
    /// `userNamespaces.idsPerPod`.
    ids_per_pod: u32,
    /// `maxPods`: the range must hold this many blocks (0: not checked).
    max_pods: u32,
    /// The kubelet range (first host ID, length), found on first use.
    range: Mutex<Option<(u32, u32)>>,
    subids: PathBuf,
    lock: Mutex<()>,
}

impl UsernsManager {
    pub(crate) fn new(pods_dir: &Path) -> Self {
        UsernsManager {
            pods_dir: pods_dir.to_path_buf(),
            ids_per_pod: IDS_PER_POD,
            max_pods: 0,
            range: Mutex::new(None),
            subids: PathBuf::from("/etc"),
            lock: Mutex::new(()),
        }
    }

    /// `userNamespaces.idsPerPod` (a multiple of 65536, checked with the config) and
    /// `maxPods`.
    pub(crate) fn with_limits(mut self, ids_per_pod: u32, max_pods: u32) -> Self {
        self.ids_per_pod = ids_per_pod;
        self.max_pods = max_pods;
        self
    }

    /// kubelet's `MakeUserNsManager` checks, which stop kubelet at start when the
    /// range does not fit the settings.
    pub(crate) fn check(&self) -> Result<(), UsernsError> {
        self.range().map(|_| ())
    }

    /// Reads `subuid` and `subgid` below `dir` instead of `/etc` (for tests).
    #[cfg(test)]
    fn with_subids(mut self, dir: &Path) -> Self {
        self.subids = dir.to_path_buf();
        self
    }

    /// kubelet's `GetOrCreateUserNamespaceMappings`: the node's namespace unless the pod
    /// says `hostUsers: false`; then its block, made if it has none, provided the pod's
    /// runtime handler supports user namespaces.
    pub(crate) fn mappings(
        &self,
        pod: &Pod,
        handler: &str,
        supported: bool,
    ) -> Result<cri::UserNamespace, UsernsError> {
        let node = cri::UserNamespace {
            mode: cri::NamespaceMode::Node as i32,
            ..Default::default()
        };
        if pod.spec.as_ref().and_then(|s| s.host_users) != Some(false) {
            return Ok(node);
        }
        if !supported {
            return Err(if handler.is_empty() {
                UsernsError::RuntimeUnsupported
            } else {
                UsernsError::HandlerUnsupported(handler.to_string())
            });
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let _held = self.lock.locked();
        let file = crate::safe_path::beneath(&self.pods_dir, &[uid, MAPPINGS_FILE])
            .map_err(|e| UsernsError::File(e.to_string()))?;
        let first = match read_mappings(&file)? {
            Some(block) => self.recorded(block)?,
            None => self.allocate(&file)?,
        };
        let ids = vec![cri::IdMapping {
            host_id: first,
            container_id: 0,
            length: self.ids_per_pod,
        }];
        Ok(cri::UserNamespace {
            mode: cri::NamespaceMode::Pod as i32,
            uids: ids.clone(),
            gids: ids,
        })
    }

    /// A pod's recorded block, checked as kubelet's `record` does: the length now
    /// configured, on a block boundary, inside the range.
    fn recorded(&self, block: Block) -> Result<u32, UsernsError> {
        let ids = self.ids_per_pod;
        if block.length != ids {
            return Err(UsernsError::File(format!(
                "wrong user namespace length {}",
                block.length
            )));
        }
        if !block.first.is_multiple_of(ids) {
            return Err(UsernsError::File(format!(
                "wrong user namespace offset specified {}",
                block.first
            )));
        }
        let (first, length) = self.range()?;
        if block.first < first || u64::from(block.first) >= u64::from(first) + u64::from(length) {
            return Err(UsernsError::File(format!(
                "id {} is out of range",
                block.first
            )));
        }
        Ok(block.first)
    }

    /// Takes the lowest free block and writes it into the pod's file.
    fn allocate(&self, file: &Path) -> Result<u32, UsernsError> {
        let ids = self.ids_per_pod;
        let (first, length) = self.range()?;
        let used = self.used_blocks();
        let overlaps = |start: u64| {
            let end = start + u64::from(ids);
            used.iter().any(|b| {
                let (b_start, b_end) =
                    (u64::from(b.first), u64::from(b.first) + u64::from(b.length));
                start < b_end && b_start < end
            })
        };
        let free = (0..length / ids)
            .map(|i| u64::from(first) + u64::from(i) * u64::from(ids))
            .find(|start| !overlaps(*start))
            .and_then(|start| u32::try_from(start).ok())
            .ok_or(UsernsError::Exhausted)?;
        let mapping = IdMapping {
            host_id: free,
            container_id: 0,
            length: ids,
        };
        let body = MappingsFile {
            uid_mappings: vec![mapping],
            gid_mappings: vec![mapping],
        };
        let text = serde_json::to_vec(&body).map_err(|e| UsernsError::File(e.to_string()))?;
        crate::private_file::write_atomically(file, &text)
            .map_err(|e| UsernsError::File(format!("cannot write {}: {e}", file.display())))?;
        tracing::info!(file = %file.display(), hostID = free, length = ids, "allocated a pod user namespace");
        Ok(free)
    }

    /// The blocks the pods on disk hold, whatever their length (a block made before
    /// `idsPerPod` changed still holds its IDs).
    fn used_blocks(&self) -> BTreeSet<Block> {
        let Ok(dirs) = std::fs::read_dir(&self.pods_dir) else {
            return BTreeSet::new();
        };
        dirs.flatten()
            .filter_map(|d| match read_mappings(&d.path().join(MAPPINGS_FILE)) {
                Ok(first) => first,
                Err(e) => {
                    // Its block is unknown, so nothing can be kept out of use for it.
                    tracing::warn!(dir = %d.path().display(), error = %e, "unreadable user namespace file");
                    None
                }
            })
            .collect()
    }

    /// The kubelet range, checked as kubelet's `MakeUserNsManager` checks it.
    fn range(&self) -> Result<(u32, u32), UsernsError> {
        let mut held = self.range.locked();
        if let Some(r) = *held {
            return Ok(r);
        }
        let ids = self.ids_per_pod;
        let (first, length) = kubelet_range(&self.subids, ids)?;
        let problem = if !ids.is_multiple_of(IDS_PER_POD) {
            Some(format!(
                "kubelet user namespace length {ids} is not a multiple of {IDS_PER_POD}"
            ))
        } else if !first.is_multiple_of(ids) {
            Some(format!(
                "kubelet user assigned ID {first} is not a multiple of {ids}"
            ))
        } else if first < ids {
            Some(format!(
                "kubelet user assigned ID {first} must be greater or equal to {ids}"
            ))
        } else if !length.is_multiple_of(ids) {
            Some(format!(
                "kubelet user assigned IDs length {length} is not a multiple of {ids}"
            ))
        } else if length / ids < self.max_pods {
            Some(format!(
                "kubelet user assigned IDs are not enough to support {} pods",
                self.max_pods
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            return Err(UsernsError::Mappings(p));
        }
        tracing::info!(
            firstID = first,
            length,
            idsPerPod = ids,
            "user namespace manager mapping"
        );
        *held = Some((first, length));
        Ok((first, length))
    }
}

/// The `kubelet` user's one subordinate range, the same in `subuid` and `subgid`;
/// without one, every ID from `ids_per_pod` up (kubelet's default).
fn kubelet_range(dir: &Path, ids_per_pod: u32) -> Result<(u32, u32), UsernsError> {
    let find = |file: &str| -> Result<Option<(u32, u32)>, UsernsError> {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            return Ok(None);
        };
        let ranges: Vec<&str> = (text.lines())
            .filter(|l| l.split(':').next() == Some(KUBELET_USER))
            .collect();
        match ranges.as_slice() {
            [] => Ok(None),
            [one] => {
                let mut parts = one.split(':').skip(1).map(|p| p.trim().parse::<u32>());
                match (parts.next(), parts.next()) {
                    (Some(Ok(first)), Some(Ok(len))) => Ok(Some((first, len))),
                    _ => Err(UsernsError::Mappings(format!(
                        "invalid line {one:?} in {file}"
                    ))),
                }
            }
            _ => Err(UsernsError::Mappings(format!(
                "{file} must hold only one mapping for user {KUBELET_USER:?}"
            ))),
        }
    };
    match (find("subuid")?, find("subgid")?) {
        (None, None) => Ok((ids_per_pod, u32::MAX - ids_per_pod + 1)),
        (Some(u), Some(g)) if u == g => Ok(u),
        _ => Err(UsernsError::Mappings(format!(
            "mismatched subuids and subgids for user {KUBELET_USER:?}"
        ))),
    }
}

/// One pod's block of host IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Block {
    first: u32,
    length: u32,
}

/// The block a pod's file holds (None: no file), after kubelet's checks of the file
/// (one mapping, UIDs equal to GIDs, ID 0 mapped); the block's own checks need the
/// settings and come after.
fn read_mappings(file: &Path) -> Result<Option<Block>, UsernsError> {
    let text = match std::fs::read(file) {
        Ok(t) if t.len() <= MAX_FILE_BYTES => t,
        Ok(_) => {
            return Err(UsernsError::File(format!(
                "{} is too large",
                file.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(UsernsError::File(format!("{}: {e}", file.display()))),
    };
    let parsed: MappingsFile = serde_json::from_slice(&text)
        .map_err(|e| UsernsError::File(format!("invalid user namespace mappings file: {e}")))?;
    let (uids, gids) = (&parsed.uid_mappings, &parsed.gid_mappings);
    let valid = uids.len() == 1
        && gids.len() == 1
        && uids[0] == gids[0]
        && uids[0].container_id == 0
        && uids[0].length > 0;
    if !valid {
        return Err(UsernsError::File(format!(
            "invalid user namespace configuration in {}",
            file.display()
        )));
    }
    Ok(Some(Block {
        first: uids[0].host_id,
        length: uids[0].length,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, host_users: Option<bool>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": uid},
            "spec": {"hostUsers": host_users, "containers": [{"name": "c"}]},
        }))
        .unwrap()
    }

    fn bed() -> (tempfile::TempDir, UsernsManager) {
        let tmp = tempfile::tempdir().unwrap();
        for uid in ["u1", "u2", "u3"] {
            std::fs::create_dir_all(tmp.path().join("pods").join(uid)).unwrap();
        }
        let etc = tmp.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        let m = UsernsManager::new(&tmp.path().join("pods")).with_subids(&etc);
        (tmp, m)
    }

    #[test]
    fn pods_without_host_users_false_share_the_nodes_namespace() {
        let (_tmp, m) = bed();
        for host_users in [None, Some(true)] {
            let ns = m.mappings(&pod("u1", host_users), "", false).unwrap();
            assert_eq!(ns.mode, cri::NamespaceMode::Node as i32);
            assert!(ns.uids.is_empty());
        }
    }

    #[test]
    fn each_pod_gets_its_own_block_kept_in_its_directory() {
        let (tmp, m) = bed();
        let a = m.mappings(&pod("u1", Some(false)), "", true).unwrap();
        assert_eq!(a.mode, cri::NamespaceMode::Pod as i32);
        assert_eq!(
            (a.uids[0].host_id, a.uids[0].container_id, a.uids[0].length),
            (65536, 0, 65536)
        );
        assert_eq!(a.uids, a.gids);
        let b = m.mappings(&pod("u2", Some(false)), "", true).unwrap();
        assert_eq!(b.uids[0].host_id, 2 * 65536);
        // The same pod keeps its block; a new manager (an agent restart) reads it back.
        let again =
            UsernsManager::new(&tmp.path().join("pods")).with_subids(&tmp.path().join("etc"));
        assert_eq!(
            again.mappings(&pod("u1", Some(false)), "", true).unwrap(),
            a
        );
        let file = std::fs::read_to_string(tmp.path().join("pods/u1/userns")).unwrap();
        assert_eq!(
            file,
            r#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}"#
        );
        // A pod whose directory is gone frees its block.
        std::fs::remove_dir_all(tmp.path().join("pods/u1")).unwrap();
        let c = m.mappings(&pod("u3", Some(false)), "", true).unwrap();
        assert_eq!(c.uids[0].host_id, 65536);
    }

    #[test]
    fn an_unsupporting_runtime_is_refused_in_kubelets_words() {
        let (_tmp, m) = bed();
        let err = m.mappings(&pod("u1", Some(false)), "", false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        let err = m
            .mappings(&pod("u1", Some(false)), "kata", false)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"
        );
    }

    #[test]
    fn the_kubelet_users_subordinate_range_is_used_and_checked() {
        let (tmp, m) = bed();
        let etc = tmp.path().join("etc");
        std::fs::write(
            etc.join("subuid"),
            "alice:100000:65536\nkubelet:1048576:131072\n",
        )
        .unwrap();
        std::fs::write(etc.join("subgid"), "kubelet:1048576:131072\n").unwrap();
        let a = m.mappings(&pod("u1", Some(false)), "", true).unwrap();
        assert_eq!(a.uids[0].host_id, 1_048_576);
        let b = m.mappings(&pod("u2", Some(false)), "", true).unwrap();
        assert_eq!(b.uids[0].host_id, 1_048_576 + 65536);
        assert_eq!(
            m.mappings(&pod("u3", Some(false)), "", true).unwrap_err(),
            UsernsError::Exhausted
        );
        std::fs::write(etc.join("subgid"), "kubelet:2000000:65536\n").unwrap();
        assert!(
            kubelet_range(&etc, IDS_PER_POD)
                .unwrap_err()
                .to_string()
                .contains("mismatched")
        );
        std::fs::write(etc.join("subgid"), "kubelet:1048577:131072\n").unwrap();
        std::fs::write(etc.join("subuid"), "kubelet:1048577:131072\n").unwrap();
        let fresh = UsernsManager::new(&tmp.path().join("pods")).with_subids(&etc);
        std::fs::remove_dir_all(tmp.path().join("pods/u3")).ok();
        std::fs::create_dir_all(tmp.path().join("pods/u4")).unwrap();
        let err = fresh
            .mappings(&pod("u4", Some(false)), "", true)
            .unwrap_err();
        assert!(
            err.to_string().contains("is not a multiple of 65536"),
            "{err}"
        );
    }

    #[test]
    fn ids_per_pod_sizes_the_blocks_and_a_block_of_another_size_is_refused() {
        let (tmp, m) = bed();
        let pods = tmp.path().join("pods");
        let etc = tmp.path().join("etc");
        // A block from before idsPerPod changed (65536 IDs at 131072) stays taken.
        let old = UsernsManager::new(&pods).with_subids(&etc);
        std::fs::create_dir_all(pods.join("u0")).unwrap();
        old.mappings(&pod("u0", Some(false)), "", true).unwrap();
        std::fs::create_dir_all(pods.join("u9")).unwrap();
        old.mappings(&pod("u9", Some(false)), "", true).unwrap();
        std::fs::remove_dir_all(pods.join("u0")).unwrap();
        let m = m.with_limits(2 * IDS_PER_POD, 110);
        m.check().unwrap();
        let a = m.mappings(&pod("u1", Some(false)), "", true).unwrap();
        assert_eq!((a.uids[0].host_id, a.uids[0].length), (262_144, 131_072));
        let err = m.mappings(&pod("u9", Some(false)), "", true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "user namespace: wrong user namespace length 65536"
        );
    }

    #[test]
    fn a_range_that_cannot_hold_max_pods_blocks_stops_the_start() {
        let (tmp, m) = bed();
        let etc = tmp.path().join("etc");
        for f in ["subuid", "subgid"] {
            std::fs::write(etc.join(f), "kubelet:65536:655360\n").unwrap();
        }
        let m = m.with_limits(IDS_PER_POD, 110);
        assert_eq!(
            m.check().unwrap_err().to_string(),
            "kubelet mappings: kubelet user assigned IDs are not enough to support 110 pods"
        );
        let fits = UsernsManager::new(&tmp.path().join("pods"))
            .with_subids(&etc)
            .with_limits(IDS_PER_POD, 10);
        fits.check().unwrap();
        // The default range starts at idsPerPod and must divide by it.
        let three = UsernsManager::new(&tmp.path().join("pods"))
            .with_subids(&tmp.path().join("none"))
            .with_limits(3 * IDS_PER_POD, 110);
        assert_eq!(
            three.check().unwrap_err().to_string(),
            "kubelet mappings: kubelet user assigned IDs length 4294770688 is not a multiple of 196608"
        );
    }
}
