//! `cpu_manager_state` (kubelet's `CPUManagerCheckpointV2`): the policy's name, the
//! shared pool and each container's exclusive CPUs, with kubelet's checksum: FNV-32a
//! over what go-spew's `%#v` prints for the checkpoint with its checksum zeroed
//! (`(*state.CPUManagerCheckpoint){PolicyName:(string)static ...}`), so kubelet and
//! oxlet read each other's files. The older v1 form (entries by container ID) is read
//! too when it has no entries, as kubelet 1.36 still reads it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CpuSet;
use crate::cm::CpuListError;
use crate::private_file::CheckpointError;

/// Why the state file cannot be restored, or does not fit this machine (kubelet's
/// words; the manager wraps them with the file's name and what to do).
#[derive(Debug, thiserror::Error)]
pub(super) enum StateError {
    /// The file could not be read, or is not a checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(
        "failed to migrate checkpoint from v1 to v2: containerID '{0}' not found in initial containers list"
    )]
    Migrate(String),
    #[error("could not parse default cpu set {text:?}: {source}")]
    DefaultSet { text: String, source: CpuListError },
    #[error("could not parse cpuset {text:?} for container {name:?} in pod {pod:?}: {source}")]
    ContainerSet {
        text: String,
        name: String,
        pod: String,
        source: CpuListError,
    },
    #[error("default cpuset cannot be empty")]
    EmptyDefault,
    #[error(
        "some of strictly reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\""
    )]
    StrictReservedShared { reserved: CpuSet, default: CpuSet },
    #[error("not all reserved cpus: \"{reserved}\" are present in defaultCpuSet: \"{default}\"")]
    ReservedMissing { reserved: CpuSet, default: CpuSet },
    #[error(
        "pod: {pod}, container: {name} cpuset: \"{cpus}\" overlaps with default cpuset \"{default}\""
    )]
    Overlap {
        pod: String,
        name: String,
        cpus: CpuSet,
        default: CpuSet,
    },
    #[error("current set of available CPUs \"{all}\" doesn't match with CPUs in state \"{known}\"")]
    Mismatch { all: CpuSet, known: CpuSet },
}

/// kubelet's file name, in the root directory.
pub(crate) const STATE_FILE: &str = "cpu_manager_state";

/// Largest file read back.
const MAX_STATE_BYTES: u64 = 16 << 20;

/// Assignments: pod UID to container name to its exclusive CPUs.
pub(super) type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// What the file holds, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Saved {
    pub policy: String,
    pub default_set: CpuSet,
    pub assignments: Assignments,
}

#[derive(Serialize, Deserialize)]
struct V2 {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    // Go's decoder matches field names without regard to case; kubelet's own tests
    // write `defaultCPUSet`.
    #[serde(rename = "defaultCpuSet", alias = "defaultCPUSet", default)]
    default_cpu_set: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    checksum: u64,
}

#[derive(Deserialize)]
struct V1 {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    #[serde(rename = "defaultCpuSet", alias = "defaultCPUSet", default)]
    default_cpu_set: String,
    #[serde(default)]
    entries: BTreeMap<String, String>,
    #[serde(default)]
    checksum: u64,
}

/// go-spew's `%#v` of a checkpoint with its checksum zeroed; `entries` is the map's
/// type and its body (`map[pod:map[c:0-1]]`).
fn spew(policy: &str, default_set: &str, entries_type: &str, entries_body: &str) -> String {
    format!(
        "(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default_set} Entries:({entries_type}){entries_body} Checksum:(checksum.Checksum)0}}"
    )
}

fn fnv32a(text: &str) -> u64 {
    let mut h = crate::hash::Fnv32a::default();
    h.write(text.as_bytes());
    u64::from(h.finish())
}

impl V2 {
    fn checksum(&self) -> u64 {
        let mut body = String::from("map[");
        for (i, (pod, containers)) in self.entries.iter().enumerate() {
            if i > 0 {
                body.push(' ');
            }
            let _ = write!(body, "{pod}:map[");
            for (j, (name, cpus)) in containers.iter().enumerate() {
                if j > 0 {
                    body.push(' ');
                }
                let _ = write!(body, "{name}:{cpus}");
            }
            body.push(']');
        }
        body.push(']');
        fnv32a(&spew(
            &self.policy_name,
            &self.default_cpu_set,
            "map[string]map[string]string",
            &body,
        ))
    }
}

impl V1 {
    fn checksum(&self) -> u64 {
        let body: Vec<String> = self
            .entries
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        fnv32a(&spew(
            &self.policy_name,
            &self.default_cpu_set,
            "map[string]string",
            &format!("map[{}]", body.join(" ")),
        ))
    }
}

/// The file's bytes for `saved`, as kubelet writes them.
pub(super) fn encode(saved: &Saved) -> Vec<u8> {
    let mut cp = V2 {
        policy_name: saved.policy.clone(),
        default_cpu_set: saved.default_set.to_string(),
        entries: saved
            .assignments
            .iter()
            .map(|(pod, cs)| {
                let cs = cs.iter().map(|(n, s)| (n.clone(), s.to_string())).collect();
                (pod.clone(), cs)
            })
            .collect(),
        checksum: 0,
    };
    cp.checksum = cp.checksum();
    serde_json::to_vec(&cp).unwrap_or_default()
}

/// Decodes a file: v2 first, then v1 (kubelet's fallback); a zero checksum is
/// accepted, as kubelet accepts it from its old file backend.
pub(super) fn decode(body: &[u8]) -> Result<Saved, StateError> {
    let v2_err = match serde_json::from_slice::<V2>(body) {
        Ok(cp) if cp.checksum == 0 || cp.checksum == cp.checksum() => return from_v2(cp),
        Ok(_) => CheckpointError::Corrupt.into(),
        Err(e) => CheckpointError::Json(e).into(),
    };
    let Ok(v1) = serde_json::from_slice::<V1>(body) else {
        return Err(v2_err);
    };
    if v1.checksum != 0 && v1.checksum != v1.checksum() {
        return Err(CheckpointError::Corrupt.into());
    }
    if let Some(id) = v1.entries.keys().next() {
        return Err(StateError::Migrate(id.clone()));
    }
    from_v2(V2 {
        policy_name: v1.policy_name,
        default_cpu_set: v1.default_cpu_set,
        entries: BTreeMap::new(),
        checksum: 0,
    })
}

fn from_v2(cp: V2) -> Result<Saved, StateError> {
    let default_set =
        CpuSet::parse(&cp.default_cpu_set).map_err(|source| StateError::DefaultSet {
            text: cp.default_cpu_set.clone(),
            source,
        })?;
    let mut assignments = Assignments::new();
    for (pod, containers) in cp.entries {
        let mut out = BTreeMap::new();
        for (name, text) in containers {
            let cpus = CpuSet::parse(&text).map_err(|source| StateError::ContainerSet {
                text: text.clone(),
                name: name.clone(),
                pod: pod.clone(),
                source,
            })?;
            out.insert(name, cpus);
        }
        assignments.insert(pod, out);
    }
    Ok(Saved {
        policy: cp.policy_name,
        default_set,
        assignments,
    })
}

/// Reads the file; `Ok(None)` when there is none.
pub(super) fn read(file: &Path) -> Result<Option<Saved>, StateError> {
    match crate::private_file::read_bounded(file, MAX_STATE_BYTES).map_err(CheckpointError::Io)? {
        None => Ok(None),
        Some(body) => decode(&body).map(Some),
    }
}

/// Writes the file whole, mode 0600.
pub(super) fn write(file: &Path, saved: &Saved) -> std::io::Result<()> {
    crate::private_file::write_atomically(file, &encode(saved))
}

#[cfg(test)]
mod tests {
    use super::*;

    // kubelet's own vectors (state_checkpoint_test.go), byte for byte.
    const KUBELET_V2: &str = r#"{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"entries": {
					"pod": {
						"container1": "4-6",
						"container2": "1-3"
					}
				},
				"checksum": 3610638499
			}"#;
    const KUBELET_V2_EMPTY: &str = r#"{
				"policyName": "none",
				"defaultCPUSet": "4-6",
				"entries": {},
				"checksum": 354655845
			}"#;
    const KUBELET_V1: &str = r#"{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"checksum": 1694838852
			}"#;
    const KUBELET_BAD_SUM: &str = r#"{
				"policyName": "none",
				"defaultCPUSet": "4-6",
				"entries": {},
				"checksum": 1337
			}"#;
    const KUBELET_V1_MIGRATION: &str = r#"{
				"policyName": "none",
				"defaultCPUSet": "1-3",
				"entries": {
					"containerID1": "4-6",
					"containerID2": "1-3"
				},
				"checksum": 3680390589
			}"#;

    #[test]
    fn kubelets_checkpoints_read_back_with_their_checksums() {
        let s = decode(KUBELET_V2.as_bytes()).unwrap();
        assert_eq!(s.policy, "none");
        assert_eq!(s.default_set.to_string(), "1-3");
        assert_eq!(s.assignments["pod"]["container1"].to_string(), "4-6");
        assert_eq!(s.assignments["pod"]["container2"].to_string(), "1-3");
        assert_eq!(
            decode(KUBELET_V2_EMPTY.as_bytes())
                .unwrap()
                .default_set
                .to_string(),
            "4-6"
        );
        assert_eq!(
            decode(KUBELET_V1.as_bytes())
                .unwrap()
                .default_set
                .to_string(),
            "1-3"
        );
        assert_eq!(
            decode(KUBELET_BAD_SUM.as_bytes()).unwrap_err().to_string(),
            "checkpoint is corrupted"
        );
        // The v1 vector's checksum is right; its entries name container IDs, which
        // kubelet maps through the runtime's containers and oxlet refuses.
        let err = decode(KUBELET_V1_MIGRATION.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("containerID 'containerID1' not found"),
            "{err}"
        );
        assert!(decode(b"{").is_err());
    }

    #[test]
    fn oxlet_writes_the_checksum_kubelet_computes() {
        let s = decode(KUBELET_V2.as_bytes()).unwrap();
        let written = String::from_utf8(encode(&s)).unwrap();
        assert_eq!(
            written,
            r#"{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}"#
        );
        let empty = Saved {
            policy: "none".into(),
            default_set: CpuSet::parse("4-6").unwrap(),
            assignments: Assignments::new(),
        };
        assert_eq!(
            String::from_utf8(encode(&empty)).unwrap(),
            r#"{"policyName":"none","defaultCpuSet":"4-6","checksum":354655845}"#
        );
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }
}
