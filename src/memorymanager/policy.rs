//! kubelet's Static memory policy (`policy_static.go`): Guaranteed pods' containers
//! get their memory and huge pages from a group of NUMA nodes; a node is either in
//! single-node allocations or in one multi-node group, never both; what regular init
//! containers were given is reused by the containers after them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::machine::{NumaMemory, Reserved, hugepage_resource};
use super::state::{Assignments, MachineState, MemoryBlock, MemoryTable, NodeState};
use crate::cm::QosClass;
use crate::topology::{Hints, NumaMask, TopologyHint};

/// Bytes requested per resource (`memory`, `hugepages-*`).
pub(super) type Requested = BTreeMap<String, u64>;

/// Why the Static policy refuses an assignment, or a state read back (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum PolicyError {
    #[error("the memory assignment uses the NUMA that does not exist")]
    NoSuchNuma,
    #[error("the memory assignment uses memory resource that does not exist")]
    NoSuchResource,
    /// A block of the state file could not be replayed.
    #[error("[memorymanager] (pod: {pod}, container: {name}) {why}")]
    Replay {
        pod: String,
        name: String,
        why: Box<PolicyError>,
    },
    #[error("[memorymanager] the expected machine state is different from the real one")]
    MachineStateChanged,
    #[error("[memorymanager] failed to represent quantity as int64")]
    Quantity,
    #[error("[memorymanager] preferred hint violates NUMA node allocation")]
    ViolatesGrouping,
    #[error(
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
    )]
    NoDefaultAffinity,
    #[error("[memorymanager] failed to find NUMA nodes to extend the current topology hint")]
    CannotExtend,
}

/// pod UID → mask → resource → bytes the pod's regular init containers leave for
/// the containers after them (kubelet's `initContainersReusableMemory`).
pub(super) type Reusable = BTreeMap<String, BTreeMap<NumaMask, BTreeMap<String, u64>>>;

/// The state the Static policy works on.
#[derive(Debug, Default)]
pub(super) struct Static {
    pub machine: MachineState,
    pub entries: Assignments,
    pub reusable: Reusable,
}

/// kubelet's `getDefaultMachineState`: each node's huge pages and memory, less
/// what is reserved on it (and, for memory, less its huge pages).
pub(super) fn default_machine_state(machine: &NumaMemory, reserved: &Reserved) -> MachineState {
    let reserved_of = |node: usize, name: &str| {
        reserved
            .get(&node)
            .and_then(|r| r.get(name))
            .copied()
            .unwrap_or(0)
    };
    let mut out = MachineState::new();
    for (&id, node) in &machine.nodes {
        let mut state = NodeState {
            assignments: 0,
            memory_map: BTreeMap::new(),
            cells: vec![id],
        };
        let mut in_hugepages = 0u64;
        for (&kib, &pages) in &node.hugepages {
            let name = hugepage_resource(kib);
            let total = pages.saturating_mul(kib).saturating_mul(1024);
            let system_reserved = reserved_of(id, &name);
            let allocatable = total.saturating_sub(system_reserved);
            state
                .memory_map
                .insert(name, table(total, system_reserved, allocatable));
            in_hugepages += total;
        }
        let system_reserved = reserved_of(id, "memory");
        let allocatable = node
            .memory
            .saturating_sub(system_reserved)
            .saturating_sub(in_hugepages);
        state.memory_map.insert(
            "memory".into(),
            table(node.memory, system_reserved, allocatable),
        );
        out.insert(id, state);
    }
    out
}

fn table(total: u64, system_reserved: u64, allocatable: u64) -> MemoryTable {
    MemoryTable {
        total,
        system_reserved,
        allocatable,
        reserved: 0,
        free: allocatable,
    }
}

/// Takes `bytes` of `resource` from the nodes in turn, and counts the assignment
/// on each (kubelet's `updateMachineState`, also its `validateState` replay).
fn reserve(
    machine: &mut MachineState,
    nodes: &[usize],
    resource: &str,
    mut bytes: u64,
) -> Result<(), PolicyError> {
    for &id in nodes {
        let node = machine.get_mut(&id).ok_or(PolicyError::NoSuchNuma)?;
        node.assignments += 1;
        node.cells = nodes.to_vec();
        let t = (node.memory_map.get_mut(resource)).ok_or(PolicyError::NoSuchResource)?;
        if bytes == 0 || t.free == 0 {
            continue;
        }
        let taken = bytes.min(t.free);
        t.reserved += taken;
        t.free -= taken;
        bytes -= taken;
    }
    Ok(())
}

/// kubelet's `validateState`: the state read back must be the machine's default
/// state with every assignment replayed; else the machine or the reservation changed.
pub(super) fn validate(state: &Static, expected_default: MachineState) -> Result<(), PolicyError> {
    let mut expected = expected_default;
    for (pod, containers) in &state.entries {
        for (name, blocks) in containers {
            for b in blocks {
                reserve(&mut expected, &b.numa_ids, &b.resource, b.bytes).map_err(|why| {
                    PolicyError::Replay {
                        pod: pod.clone(),
                        name: name.clone(),
                        why: Box::new(why),
                    }
                })?;
            }
        }
    }
    if !same_machine_state(&state.machine, &expected) {
        return Err(PolicyError::MachineStateChanged);
    }
    Ok(())
}

/// kubelet's `areMachineStatesEqual`: the same nodes, counts, groups and table
/// sizes, and the same free and reserved bytes summed over each node's group.
fn same_machine_state(a: &MachineState, b: &MachineState) -> bool {
    let sum = |m: &MachineState, cells: &[usize], r: &str| {
        cells.iter().fold((0u64, 0u64), |(f, rs), id| {
            let t = m.get(id).and_then(|n| n.memory_map.get(r));
            (
                f + t.map_or(0, |t| t.free),
                rs + t.map_or(0, |t| t.reserved),
            )
        })
    };
    a.len() == b.len()
        && a.iter().all(|(id, na)| {
            let Some(nb) = b.get(id) else { return false };
            let mut ca = na.cells.clone();
            let mut cb = nb.cells.clone();
            ca.sort_unstable();
            cb.sort_unstable();
            na.assignments == nb.assignments
                && ca == cb
                && na.memory_map.len() == nb.memory_map.len()
                && na.memory_map.iter().all(|(r, ta)| {
                    nb.memory_map.get(r).is_some_and(|tb| {
                        ta.total == tb.total
                            && ta.system_reserved == tb.system_reserved
                            && ta.allocatable == tb.allocatable
                            && sum(a, &na.cells, r) == sum(b, &na.cells, r)
                    })
                })
        })
}

/// True when the Static policy looks at the pod: Guaranteed, without pod-level
/// resources (which the Static policy leaves alone in kubelet 1.36).
pub(super) fn is_managed(pod: &Pod) -> bool {
    QosClass::of(pod) == QosClass::Guaranteed
        && pod.spec.as_ref().is_none_or(|s| s.resources.is_none())
}

/// kubelet's `getRequestedResources`: the container's memory and huge page requests,
/// as admitted (`allocatedResources` in its status, where in-place resize put them).
pub(super) fn requested(pod: &Pod, c: &Container) -> Result<Requested, PolicyError> {
    let status = pod.status.as_ref();
    let statuses = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .chain(
            status
                .and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten(),
        );
    let allocated = statuses
        .filter(|s| s.name == c.name)
        .find_map(|s| s.allocated_resources.as_ref());
    let requests = allocated.or_else(|| c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let mut out = Requested::new();
    for (name, q) in requests.into_iter().flatten() {
        if name != "memory" && !name.starts_with("hugepages-") {
            continue;
        }
        let bytes = crate::quantity::bytes(q)
            .ok()
            .and_then(|b| u64::try_from(b).ok())
            .ok_or(PolicyError::Quantity)?;
        out.insert(name.clone(), bytes);
    }
    Ok(out)
}

fn is_restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// kubelet's `getPodRequestedResources`: per resource, the larger of what the
/// long-running containers (app containers and sidecars) need together and the
/// most any regular init container needs beside the sidecars started before it.
pub(super) fn pod_requested(pod: &Pod) -> Result<Requested, PolicyError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Requested::new());
    };
    let (mut by_init, mut by_sidecars) = (Requested::new(), Requested::new());
    for c in spec.init_containers.iter().flatten() {
        for (name, bytes) in requested(pod, c)? {
            let peak = by_init.entry(name.clone()).or_insert(0);
            let sidecars = by_sidecars.entry(name).or_insert(0);
            if is_restartable(c) {
                *sidecars += bytes;
            } else if *sidecars + bytes > *peak {
                *peak = *sidecars + bytes;
            }
        }
    }
    let mut by_apps = Requested::new();
    for c in &spec.containers {
        for (name, bytes) in requested(pod, c)? {
            *by_apps.entry(name).or_insert(0) += bytes;
        }
    }
    Ok(by_apps
        .into_iter()
        .map(|(name, apps)| {
            let long_running = apps + by_sidecars.get(&name).copied().unwrap_or(0);
            let init = by_init.get(&name).copied().unwrap_or(0);
            (name, long_running.max(init))
        })
        .collect())
}

impl Static {
    fn reusable_of(&self, pod_uid: &str, mask: NumaMask, resource: &str) -> u64 {
        self.reusable
            .get(pod_uid)
            .and_then(|p| p.get(&mask))
            .and_then(|r| r.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// kubelet's `calculateHints`: every node group with enough allocatable memory
    /// for each resource, free for a new allocation under the grouping rule, and with
    /// enough free memory (counting what the pod's init containers leave); the
    /// narrowest such groups are preferred.
    pub(super) fn calculate_hints(&self, pod_uid: &str, req: &Requested) -> Hints {
        let nodes: Vec<usize> = self.machine.keys().copied().collect();
        let mut min_size = nodes.len() as u32;
        let mut fitting = Vec::new();
        for mask in NumaMask::subsets(&nodes) {
            let ids: Vec<usize> = mask.nodes().collect();
            let total = |r: &str, f: fn(&MemoryTable) -> u64| -> u64 {
                ids.iter()
                    .filter_map(|id| self.machine.get(id)?.memory_map.get(r))
                    .map(f)
                    .sum()
            };
            if req.iter().any(|(r, &b)| total(r, |t| t.allocatable) < b) {
                continue;
            }
            min_size = min_size.min(mask.count());
            let single = ids.len() == 1;
            if single && self.machine[&ids[0]].cells.len() > 1 {
                continue;
            }
            let grouped_elsewhere = ids.iter().any(|id| {
                let n = &self.machine[id];
                !single && n.assignments > 0 && (n.cells.len() == 1 || !same_group(&n.cells, &ids))
            });
            if grouped_elsewhere {
                continue;
            }
            if req
                .iter()
                .any(|(r, &b)| total(r, |t| t.free) + self.reusable_of(pod_uid, mask, r) < b)
            {
                continue;
            }
            fitting.push(mask);
        }
        let mut hints = Hints::new();
        for r in req.keys() {
            for &mask in &fitting {
                hints.entry(r.clone()).or_default().push(TopologyHint {
                    numa_affinity: Some(mask),
                    preferred: mask.count() == min_size,
                });
            }
        }
        hints
    }
}

fn same_group(a: &[usize], b: &[usize]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// kubelet's `regenerateHints`: a container that already has blocks gets them back
/// as its only (preferred) hints, if they still match what it requests; else no
/// hints at all.
pub(super) fn regenerate_hints(blocks: &[MemoryBlock], req: &Requested) -> Hints {
    if blocks.len() != req.len() {
        return Hints::new();
    }
    let mut hints: Hints = req.keys().map(|r| (r.clone(), Vec::new())).collect();
    for b in blocks {
        if req.get(&b.resource) != Some(&b.bytes) {
            return Hints::new();
        }
        hints
            .entry(b.resource.clone())
            .or_default()
            .push(TopologyHint {
                numa_affinity: Some(NumaMask::of(b.numa_ids.iter().copied())),
                preferred: true,
            });
    }
    hints
}

/// kubelet's `findBestHint`: preferred first, then the narrowest.
pub(super) fn find_best_hint(hints: &[TopologyHint]) -> Option<TopologyHint> {
    let mut best: Option<TopologyHint> = None;
    for &h in hints {
        let Some(cur) = best else {
            best = Some(h);
            continue;
        };
        let narrower = match (h.numa_affinity, cur.numa_affinity) {
            (Some(a), Some(b)) => a.is_narrower_than(b),
            _ => false,
        };
        if (h.preferred && !cur.preferred) || (h.preferred == cur.preferred && narrower) {
            best = Some(h);
        }
    }
    best
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
