//! The memory manager (kubelet's `memory_manager.go`): the policy (`None` or
//! `Static`), its state restored from and written to `memory_manager_state`, and the
//! hint provider the topology manager asks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{error, info, warn};

use super::machine::validate_reserved;
use super::policy::{
    Static, default_machine_state, is_managed, pod_requested, regenerate_hints, requested, validate,
};
use super::state;
use super::{MemoryBlock, NumaMemory, Reserved};
use crate::locks::Locked as _;
use crate::logging::STARTUP_TARGET as V0;
use crate::pod::{pod_ref, pod_uid};
use crate::topology::{AdmitError, HintProvider, Hints, NumaMask};

/// What the kubelet configuration says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryManagerSettings {
    /// `None` or `Static` (`memoryManagerPolicy`).
    pub policy: String,
    /// Bytes reserved per NUMA node and resource (`reservedMemory`).
    pub reserved: BTreeMap<usize, BTreeMap<String, u64>>,
    /// Where `memory_manager_state` lives (kubelet's root dir).
    pub state_dir: PathBuf,
}

/// Why the memory manager cannot start (kubelet's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MemoryManagerError {
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    /// The reservation does not fit the machine or node allocatable.
    #[error("{0}")]
    Reserved(String),
    #[error("[memorymanager] you should specify the system reserved memory")]
    NoSystemReserved,
    #[error(
        "could not restore state from checkpoint: {why}, please drain this node and delete the memory manager checkpoint file \"{file}\" before restarting Kubelet"
    )]
    State { file: String, why: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    None,
    Static,
}

impl Policy {
    fn as_str(self) -> &'static str {
        match self {
            Policy::None => "None",
            Policy::Static => "Static",
        }
    }
}

/// The memory manager.
pub(crate) struct MemoryManager {
    policy: Policy,
    file: PathBuf,
    state: Mutex<Static>,
    allocatable: Vec<MemoryBlock>,
}

impl MemoryManager {
    /// kubelet's `NewManager` and `Start`: the Static policy needs a reservation
    /// that adds up to node allocatable's (`node_reserved`: kube-reserved +
    /// system-reserved + the hard eviction threshold, per resource) and some memory
    /// reserved; the state file is read back (or written anew) and must hold the same
    /// policy and the machine state this machine and reservation give.
    pub(crate) fn new(
        settings: &MemoryManagerSettings,
        machine: NumaMemory,
        node_reserved: &BTreeMap<String, u64>,
    ) -> Result<Self, MemoryManagerError> {
        let policy = match settings.policy.as_str() {
            "None" => Policy::None,
            "Static" => Policy::Static,
            other => return Err(MemoryManagerError::UnknownPolicy(other.into())),
        };
        let expected = if policy == Policy::Static {
            validate_reserved(&machine, &settings.reserved, node_reserved)
                .map_err(|e| MemoryManagerError::Reserved(e.to_string()))?;
            if total_memory_reserved(&settings.reserved) == 0 {
                return Err(MemoryManagerError::NoSystemReserved);
            }
            Some(default_machine_state(&machine, &settings.reserved))
        } else {
            None
        };
        info!(target: V0, policy = policy.as_str(), "Starting memorymanager");
        let file = state::path(&settings.state_dir);
        let restored = restore(&file, policy, expected)?;
        let allocatable = allocatable_of(&restored);
        let mm = Self {
            policy,
            file,
            state: Mutex::new(restored),
            allocatable,
        };
        mm.store(&mm.state.locked());
        Ok(mm)
    }

    /// `None` or `Static`.
    pub(crate) fn policy_name(&self) -> &'static str {
        self.policy.as_str()
    }

    /// The NUMA nodes the container's memory comes from (its `cpuset.mems`), or
    /// `None` when it has no exclusive memory (kubelet's `GetMemoryNUMANodes`).
    pub(crate) fn numa_nodes_for(&self, pod_uid: &str, container: &str) -> Option<Vec<usize>> {
        let nodes: BTreeSet<usize> = self
            .memory_blocks(pod_uid, container)
            .iter()
            .flat_map(|b| b.numa_ids.iter().copied())
            .collect();
        if nodes.is_empty() {
            return None;
        }
        let nodes: Vec<usize> = nodes.into_iter().collect();
        info!(target: V0, podUID = pod_uid, containerName = container, numaNodes = %NumaMask::of(nodes.iter().copied()), "Memory affinity");
        Some(nodes)
    }

    /// The blocks given to a container (for the pod resources API).
    pub(crate) fn memory_blocks(&self, pod_uid: &str, container: &str) -> Vec<MemoryBlock> {
        self.state
            .locked()
            .entries
            .get(pod_uid)
            .and_then(|p| p.get(container))
            .cloned()
            .unwrap_or_default()
    }

    /// Each node's allocatable memory per resource, as it was at start (kubelet's
    /// `GetAllocatableMemory`).
    pub(crate) fn allocatable_memory(&self) -> Vec<MemoryBlock> {
        self.allocatable.clone()
    }

    /// Gives a removed container's memory back.
    pub(crate) fn remove_container(&self, pod_uid: &str, container: &str) {
        let mut st = self.state.locked();
        if st.remove_container(pod_uid, container) {
            info!(
                podUID = pod_uid,
                containerName = container,
                "RemoveContainer: memory given back to its NUMA nodes"
            );
            self.store(&st);
        }
    }

    /// kubelet's `removeStaleState`: forgets every container not in `active`
    /// (pod UID, container name).
    pub(crate) fn remove_stale(&self, active: &BTreeSet<(String, String)>) {
        let mut st = self.state.locked();
        let stale: Vec<(String, String)> = st
            .entries
            .iter()
            .flat_map(|(uid, cs)| cs.keys().map(move |c| (uid.clone(), c.clone())))
            .filter(|k| !active.contains(k))
            .collect();
        for (uid, c) in &stale {
            info!(target: V0, podUID = %uid, containerName = %c, "RemoveStaleState removing state: the container is no longer active");
            st.remove_container(uid, c);
        }
        if !stale.is_empty() {
            self.store(&st);
        }
    }

    /// Writes the state; a failed write is logged and the memory state kept, as
    /// kubelet does.
    fn store(&self, st: &Static) {
        if let Err(e) = state::write(&self.file, self.policy.as_str(), &st.machine, &st.entries) {
            warn!(file = %self.file.display(), err = %e, "Store state to checkpoint error");
        }
    }
}

fn total_memory_reserved(reserved: &Reserved) -> u64 {
    reserved.values().filter_map(|r| r.get("memory")).sum()
}

/// Reads the state file back: its policy must be ours, and for Static its machine
/// state must be what this machine, this reservation and its assignments give.
fn restore(
    file: &Path,
    policy: Policy,
    expected: Option<state::MachineState>,
) -> Result<Static, MemoryManagerError> {
    let refuse = |why: String| MemoryManagerError::State {
        file: file.display().to_string(),
        why,
    };
    let mut st = Static::default();
    if let Some(r) = state::read(file).map_err(|e| refuse(e.to_string()))? {
        if r.policy != policy.as_str() {
            return Err(refuse(format!(
                "[memorymanager] configured policy {} differs from state checkpoint policy {}",
                crate::klog::go_quote(policy.as_str()),
                crate::klog::go_quote(&r.policy)
            )));
        }
        st.machine = r.machine;
        st.entries = r.entries;
        info!(file = %file.display(), "State checkpoint: restored state from checkpoint");
    }
    let Some(expected) = expected else {
        return Ok(st);
    };
    if st.machine.is_empty() {
        if !st.entries.is_empty() {
            return Err(refuse(
                "[memorymanager] machine state can not be empty when it has memory assignments"
                    .into(),
            ));
        }
        st.machine = expected;
        return Ok(st);
    }
    validate(&st, expected).map_err(|e| refuse(e.to_string()))?;
    Ok(st)
}

fn allocatable_of(st: &Static) -> Vec<MemoryBlock> {
    st.machine
        .iter()
        .flat_map(|(&id, n)| {
            n.memory_map
                .iter()
                .filter(|(_, t)| t.allocatable > 0)
                .map(move |(r, t)| MemoryBlock {
                    numa_ids: vec![id],
                    resource: r.clone(),
                    bytes: t.allocatable,
                })
        })
        .collect()
}

impl HintProvider for MemoryManager {
    fn name(&self) -> &'static str {
        "memory"
    }

    /// kubelet's `GetTopologyHints`: none for a pod the policy leaves alone; the
    /// blocks it has, for a container already allocated; else every fitting group.
    fn container_hints(&self, pod: &Pod, c: &Container) -> Hints {
        if self.policy == Policy::None || !is_managed(pod) {
            return Hints::new();
        }
        let req = match requested(pod, c) {
            Ok(r) => r,
            Err(e) => {
                info!(pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, err = %e, "Failed to get container requested resources");
                return Hints::new();
            }
        };
        let st = self.state.locked();
        if let Some(blocks) = st.entries.get(pod_uid(pod)).and_then(|p| p.get(&c.name)) {
            info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, "Regenerating TopologyHints, resource was already allocated to pod");
            return regenerate_hints(blocks, &req);
        }
        st.calculate_hints(pod_uid(pod), &req)
    }

    /// kubelet's `GetPodTopologyHints`: the pod's requests as a whole; the first
    /// container with blocks regenerates them.
    fn pod_hints(&self, pod: &Pod) -> Hints {
        if self.policy == Policy::None || !is_managed(pod) {
            return Hints::new();
        }
        let req = match pod_requested(pod) {
            Ok(r) => r,
            Err(e) => {
                info!(pod = %pod_ref(pod), podUID = pod_uid(pod), err = %e, "Failed to get pod requested resources");
                return Hints::new();
            }
        };
        let st = self.state.locked();
        if let Some(pod_entries) = st.entries.get(pod_uid(pod)) {
            let spec = pod.spec.as_ref();
            let names = spec
                .and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten()
                .chain(spec.map(|s| s.containers.iter()).into_iter().flatten());
            for c in names {
                if let Some(blocks) = pod_entries.get(&c.name) {
                    return regenerate_hints(blocks, &req);
                }
            }
        }
        st.calculate_hints(pod_uid(pod), &req)
    }

    fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        if self.policy == Policy::None {
            return Ok(());
        }
        let mut st = self.state.locked();
        match st.allocate(pod, c, affinity) {
            Ok(None) => Ok(()),
            Ok(Some(blocks)) => {
                self.store(&st);
                let nodes = blocks
                    .first()
                    .map(|b| NumaMask::of(b.numa_ids.iter().copied()).to_string())
                    .unwrap_or_default();
                info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, numaNodes = %nodes, "Allocated exclusive memory");
                Ok(())
            }
            Err(e) => {
                crate::metrics::memory_pinning_failed();
                error!(pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, err = %e, "Allocate error");
                Err(AdmitError::unexpected(e))
            }
        }
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
