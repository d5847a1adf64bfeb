//! The memory manager's state (kubelet's `memorymanager/state`): each NUMA node's
//! memory tables and groups, and the blocks given to each container, kept in
//! `memory_manager_state` in kubelet's checkpoint format so a restarted agent (or a
//! kubelet on the same node) takes them back.
//!
//! The file is JSON, `{"policyName", "machineState", "entries", "checksum"}`. The
//! checksum is kubelet's `checksum.New`: FNV-32a over go-spew's `%#v` of the
//! checkpoint with its checksum set to 0 (`hash.DeepHashObject`), under the type
//! names kubelet's older releases used, which every kubelet still reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::private_file::CheckpointError as StateError;

/// kubelet's file name.
const STATE_FILE: &str = "memory_manager_state";

/// Largest state file read back.
const MAX_STATE_BYTES: u64 = 16 << 20;

/// One resource's memory on one node (kubelet's `MemoryTable`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct MemoryTable {
    #[serde(rename = "total")]
    pub total: u64,
    #[serde(rename = "systemReserved")]
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

/// One node's state (kubelet's `NUMANodeState`): how many blocks use it, its
/// tables, and the group of nodes it is allocated with (itself alone when single).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct NodeState {
    #[serde(rename = "numberOfAssignments")]
    pub assignments: i64,
    #[serde(rename = "memoryMap")]
    pub memory_map: BTreeMap<String, MemoryTable>,
    #[serde(default)]
    pub cells: Vec<usize>,
}

/// Every node's state.
pub(super) type MachineState = BTreeMap<usize, NodeState>;

/// Memory given to a container (kubelet's `state.Block`): `bytes` of `resource`
/// from the NUMA nodes `numa_ids`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MemoryBlock {
    #[serde(rename = "numaAffinity")]
    pub numa_ids: Vec<usize>,
    #[serde(rename = "type")]
    pub resource: String,
    #[serde(rename = "size")]
    pub bytes: u64,
}

/// pod UID → container name → its blocks.
pub(super) type Assignments = BTreeMap<String, BTreeMap<String, Vec<MemoryBlock>>>;

/// The file's shape (kubelet's `MemoryManagerCheckpoint`).
#[derive(Serialize, Deserialize)]
struct Checkpoint {
    #[serde(rename = "policyName")]
    policy: String,
    #[serde(rename = "machineState")]
    machine: MachineState,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: Assignments,
    checksum: u64,
}

/// What the file holds.
pub(super) struct Restored {
    pub policy: String,
    pub machine: MachineState,
    pub entries: Assignments,
}

/// go-spew's `%#v` of the checkpoint with checksum 0, as kubelet hashes it; with
/// `pod_entries` the shape kubelet writes when its pod-level resource managers are
/// on (an empty `PodEntries` map), which is also accepted on reading.
fn spew(policy: &str, machine: &MachineState, entries: &Assignments, pod_entries: bool) -> String {
    let mut s = format!(
        "(*state.MemoryManagerCheckpoint){{PolicyName:(string){policy} MachineState:(state.NUMANodeMap)map["
    );
    for (i, (id, node)) in machine.iter().enumerate() {
        let sep = if i > 0 { " " } else { "" };
        let _ = write!(
            s,
            "{sep}{id}:<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[",
            node.assignments
        );
        for (j, (name, t)) in node.memory_map.iter().enumerate() {
            let sep = if j > 0 { " " } else { "" };
            let _ = write!(
                s,
                "{sep}{name}:<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                t.total, t.system_reserved, t.allocatable, t.reserved, t.free
            );
        }
        let _ = write!(s, "] Cells:([]int){}}}", ints(&node.cells));
    }
    s.push_str("] Entries:(state.ContainerMemoryAssignments)map[");
    for (i, (pod, containers)) in entries.iter().enumerate() {
        let sep = if i > 0 { " " } else { "" };
        let _ = write!(s, "{sep}{pod}:map[");
        for (j, (name, blocks)) in containers.iter().enumerate() {
            let sep = if j > 0 { " " } else { "" };
            let blocks: Vec<String> = blocks
                .iter()
                .map(|b| {
                    format!(
                        "{{NUMAAffinity:([]int){} Type:(v1.ResourceName){} Size:(uint64){}}}",
                        ints(&b.numa_ids),
                        b.resource,
                        b.bytes
                    )
                })
                .collect();
            let _ = write!(s, "{sep}{name}:[{}]", blocks.join(" "));
        }
        s.push(']');
    }
    s.push(']');
    if pod_entries {
        s.push_str(" PodEntries:(state.PodMemoryAssignments)map[]");
    }
    s.push_str(" Checksum:(checksum.Checksum)0}");
    s
}

fn ints(v: &[usize]) -> String {
    let v: Vec<String> = v.iter().map(ToString::to_string).collect();
    format!("[{}]", v.join(" "))
}

/// kubelet's checksum of the checkpoint.
fn checksum(policy: &str, machine: &MachineState, entries: &Assignments, pod_entries: bool) -> u64 {
    let mut h = crate::hash::Fnv32a::default();
    h.write(spew(policy, machine, entries, pod_entries).as_bytes());
    u64::from(h.finish())
}

/// The checkpoint's bytes.
pub(super) fn encode(policy: &str, machine: &MachineState, entries: &Assignments) -> Vec<u8> {
    let cp = Checkpoint {
        policy: policy.to_owned(),
        machine: machine.clone(),
        entries: entries.clone(),
        checksum: checksum(policy, machine, entries, false),
    };
    serde_json::to_vec(&cp).unwrap_or_default()
}

/// The checkpoint read back and its checksum checked.
pub(super) fn decode(body: &[u8]) -> Result<Restored, StateError> {
    let cp: Checkpoint = serde_json::from_slice(body)?;
    let ok = [false, true]
        .into_iter()
        .any(|pod| checksum(&cp.policy, &cp.machine, &cp.entries, pod) == cp.checksum);
    if !ok {
        return Err(StateError::Corrupt);
    }
    Ok(Restored {
        policy: cp.policy,
        machine: cp.machine,
        entries: cp.entries,
    })
}

/// The state file in `dir`.
pub(super) fn path(dir: &Path) -> PathBuf {
    dir.join(STATE_FILE)
}

/// Reads the file; `Ok(None)` when there is none.
pub(super) fn read(file: &Path) -> Result<Option<Restored>, StateError> {
    match crate::private_file::read_bounded(file, MAX_STATE_BYTES)? {
        None => Ok(None),
        Some(body) => decode(&body).map(Some),
    }
}

/// Writes the file whole (0600, atomically).
pub(super) fn write(
    file: &Path,
    policy: &str,
    machine: &MachineState,
    entries: &Assignments,
) -> std::io::Result<()> {
    crate::private_file::write_atomically(file, &encode(policy, machine, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(
        total: u64,
        system_reserved: u64,
        allocatable: u64,
        reserved: u64,
        free: u64,
    ) -> MemoryTable {
        MemoryTable {
            total,
            system_reserved,
            allocatable,
            reserved,
            free,
        }
    }

    /// Checksums and bytes computed by go-spew 1.1 and Go's encoding/json over
    /// kubelet's checkpoint types (`checksum.New` of a `*MemoryManagerCheckpoint`).
    #[test]
    fn checksums_match_kubelets_for_the_same_state() {
        let empty = encode("None", &MachineState::new(), &Assignments::new());
        assert_eq!(
            String::from_utf8(empty).unwrap(),
            r#"{"policyName":"None","machineState":{},"checksum":4236770233}"#
        );

        let mut machine = MachineState::new();
        machine.insert(
            0,
            NodeState {
                assignments: 2,
                memory_map: BTreeMap::from([
                    (
                        "hugepages-2Mi".into(),
                        table(4194304, 0, 4194304, 0, 4194304),
                    ),
                    ("memory".into(), table(2048, 512, 1536, 1024, 512)),
                ]),
                cells: vec![0],
            },
        );
        machine.insert(
            1,
            NodeState {
                assignments: 0,
                memory_map: BTreeMap::from([("memory".into(), table(2048, 0, 2048, 0, 2048))]),
                cells: vec![1],
            },
        );
        let block = MemoryBlock {
            numa_ids: vec![0],
            resource: "memory".into(),
            bytes: 1024,
        };
        let entries = Assignments::from([(
            "pod".into(),
            BTreeMap::from([("container1".into(), vec![block]), ("init".into(), vec![])]),
        )]);
        let body = encode("Static", &machine, &entries);
        let go = r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":2,"memoryMap":{"hugepages-2Mi":{"total":4194304,"systemReserved":0,"allocatable":4194304,"reserved":0,"free":4194304},"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":1024,"free":512}},"cells":[0]},"1":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":0,"allocatable":2048,"reserved":0,"free":2048}},"cells":[1]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":1024}],"init":[]}},"checksum":760070113}"#;
        assert_eq!(String::from_utf8(body).unwrap(), go);

        let back = decode(go.as_bytes()).unwrap();
        assert_eq!(
            (back.policy.as_str(), &back.machine, &back.entries),
            ("Static", &machine, &entries)
        );
        let tampered = go.replace("\"free\":512", "\"free\":511");
        assert_eq!(
            decode(tampered.as_bytes()).err().unwrap().to_string(),
            "checkpoint is corrupted"
        );
    }
}
