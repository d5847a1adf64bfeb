//! The Static policy's allocation and release (kubelet's `Allocate` and
//! `RemoveContainer` of `policy_static.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::policy::{PolicyError, Requested, Static, find_best_hint, is_managed, requested};
use super::state::{MachineState, MemoryBlock};
use crate::topology::NumaMask;

impl Static {
    /// Gives `c` its memory at `affinity` (the topology manager's choice, `None`
    /// for anywhere); idempotent: a container with blocks keeps them. The hint the
    /// topology manager chose is taken as not preferred (the provider trait carries
    /// the mask alone), so kubelet's two "failed to find the … preferred hint"
    /// refusals never happen here.
    pub(super) fn allocate(
        &mut self,
        pod: &Pod,
        c: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<Option<Vec<MemoryBlock>>, PolicyError> {
        if !is_managed(pod) {
            return Ok(None);
        }
        // kubelet counts the request before looking for a container it already pinned.
        crate::metrics::memory_pinning_requested();
        let uid = crate::pod::pod_uid(pod).to_owned();
        if let Some(blocks) = self.entries.get(&uid).and_then(|p| p.get(&c.name)).cloned() {
            self.update_reusable(pod, c, &blocks);
            return Ok(None);
        }
        let req = requested(pod, c)?;
        let mut mask = match affinity {
            Some(m) => m,
            None => self.default_mask(&uid, &req)?,
        };
        if !satisfies(&self.machine, mask, &req) {
            mask = self.extend(&uid, &req, mask)?;
        }
        if violates_grouping(&self.machine, mask) {
            return Err(PolicyError::ViolatesGrouping);
        }
        let ids: Vec<usize> = mask.nodes().collect();
        let mut machine = self.machine.clone();
        let mut blocks = Vec::new();
        for (resource, &bytes) in &req {
            blocks.push(MemoryBlock {
                numa_ids: ids.clone(),
                resource: resource.clone(),
                bytes,
            });
            let reusable = self.reusable_of_pod(&uid, mask, resource);
            update_machine_state(&mut machine, &ids, resource, bytes.saturating_sub(reusable));
        }
        self.update_reusable(pod, c, &blocks);
        self.machine = machine;
        self.entries
            .entry(uid.clone())
            .or_default()
            .insert(c.name.clone(), blocks.clone());
        self.update_init_blocks(pod, c, &blocks);
        Ok(Some(blocks))
    }

    fn reusable_of_pod(&self, uid: &str, mask: NumaMask, resource: &str) -> u64 {
        self.reusable
            .get(uid)
            .and_then(|p| p.get(&mask))
            .and_then(|r| r.get(resource))
            .copied()
            .unwrap_or(0)
    }

    /// kubelet's `getDefaultHint`: the best of the policy's own hints.
    fn default_mask(&self, uid: &str, req: &Requested) -> Result<NumaMask, PolicyError> {
        let hints = self.calculate_hints(uid, req);
        if hints.is_empty() {
            return Err(PolicyError::NoDefaultAffinity);
        }
        hints
            .get("memory")
            .and_then(|h| find_best_hint(h))
            .and_then(|h| h.numa_affinity)
            .ok_or(PolicyError::NoDefaultAffinity)
    }

    /// kubelet's `extendTopologyManagerHint`: the best of the policy's hints that
    /// contain the topology manager's (narrowed) mask.
    fn extend(&self, uid: &str, req: &Requested, mask: NumaMask) -> Result<NumaMask, PolicyError> {
        let hints = self.calculate_hints(uid, req);
        let containing: Vec<_> = hints
            .get("memory")
            .into_iter()
            .flatten()
            .filter(|h| h.numa_affinity.is_some_and(|a| mask.is_subset_of(a)))
            .copied()
            .collect();
        find_best_hint(&containing)
            .and_then(|h| h.numa_affinity)
            .ok_or(PolicyError::CannotExtend)
    }

    /// kubelet's `updatePodReusableMemory`: a regular init container's blocks become
    /// reusable by the containers after it; an app container uses them up. Only the
    /// pod being admitted is remembered.
    pub(super) fn update_reusable(&mut self, pod: &Pod, c: &Container, blocks: &[MemoryBlock]) {
        let uid = crate::pod::pod_uid(pod).to_owned();
        self.reusable.retain(|k, _| *k == uid);
        let pod_reusable = self.reusable.entry(uid).or_default();
        if is_regular_init(pod, c) {
            for b in blocks {
                let mask = NumaMask::of(b.numa_ids.iter().copied());
                let held = pod_reusable
                    .entry(mask)
                    .or_default()
                    .entry(b.resource.clone())
                    .or_insert(0);
                *held = (*held).max(b.bytes);
            }
            return;
        }
        for b in blocks {
            let mask = NumaMask::of(b.numa_ids.iter().copied());
            if let Some(held) = pod_reusable
                .get_mut(&mask)
                .and_then(|r| r.get_mut(&b.resource))
            {
                *held = held.saturating_sub(b.bytes);
            }
        }
    }

    /// kubelet's `updateInitContainersMemoryBlocks`: what a container reused is taken
    /// off the blocks of the regular init containers before it, so the pod's blocks
    /// add up to what it holds.
    fn update_init_blocks(&mut self, pod: &Pod, c: &Container, blocks: &[MemoryBlock]) {
        let uid = crate::pod::pod_uid(pod).to_owned();
        let inits: Vec<&Container> = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .collect();
        for block in blocks {
            let mut left = block.bytes;
            for init in &inits {
                if init.name == c.name || left == 0 {
                    break;
                }
                if init.restart_policy.as_deref() == Some("Always") {
                    continue;
                }
                let Some(theirs) = self
                    .entries
                    .get_mut(&uid)
                    .and_then(|p| p.get_mut(&init.name))
                else {
                    continue;
                };
                for b in theirs.iter_mut() {
                    if b.bytes == 0
                        || b.resource != block.resource
                        || !same_nodes(&b.numa_ids, &block.numa_ids)
                    {
                        continue;
                    }
                    let taken = b.bytes.min(left);
                    b.bytes -= taken;
                    left -= taken;
                }
            }
        }
    }

    /// kubelet's `RemoveContainer`: the container's blocks go back to their nodes,
    /// and a node left without assignments is a group of its own again.
    pub(super) fn remove_container(&mut self, pod_uid: &str, container: &str) -> bool {
        let Some(blocks) = self
            .entries
            .get_mut(pod_uid)
            .and_then(|p| p.remove(container))
        else {
            return false;
        };
        if self.entries.get(pod_uid).is_some_and(BTreeMap::is_empty) {
            self.entries.remove(pod_uid);
        }
        for b in blocks {
            let mut released = b.bytes;
            for &id in &b.numa_ids {
                let Some(node) = self.machine.get_mut(&id) else {
                    continue;
                };
                node.assignments -= 1;
                if node.assignments == 0 {
                    node.cells = vec![id];
                }
                let Some(t) = node.memory_map.get_mut(&b.resource) else {
                    continue;
                };
                if released == 0 || t.reserved == 0 {
                    continue;
                }
                let back = released.min(t.reserved);
                t.free += back;
                t.reserved -= back;
                released -= back;
            }
        }
        true
    }
}

/// kubelet's `updateMachineState`: `bytes` taken from the nodes in turn, each node
/// counted and grouped.
fn update_machine_state(machine: &mut MachineState, ids: &[usize], resource: &str, mut bytes: u64) {
    for id in ids {
        let Some(node) = machine.get_mut(id) else {
            continue;
        };
        node.assignments += 1;
        node.cells = ids.to_vec();
        let Some(t) = node.memory_map.get_mut(resource) else {
            continue;
        };
        if bytes == 0 || t.free == 0 {
            continue;
        }
        let taken = bytes.min(t.free);
        t.reserved += taken;
        t.free -= taken;
        bytes -= taken;
    }
}

/// kubelet's `isAffinitySatisfyRequest`: enough free memory of every kind on the mask.
fn satisfies(machine: &MachineState, mask: NumaMask, req: &Requested) -> bool {
    req.iter().all(|(r, &bytes)| {
        let free: u64 = mask
            .nodes()
            .filter_map(|id| machine.get(&id)?.memory_map.get(r))
            .map(|t| t.free)
            .sum();
        free >= bytes
    })
}

/// kubelet's `isAffinityViolatingNUMAAllocations`: a multi-node mask may not use a
/// node that serves single-node allocations or another group.
fn violates_grouping(machine: &MachineState, mask: NumaMask) -> bool {
    let ids: Vec<usize> = mask.nodes().collect();
    if ids.len() == 1 {
        return false;
    }
    ids.iter().any(|id| {
        machine.get(id).is_some_and(|n| {
            n.assignments > 0 && (n.cells.len() == 1 || !same_nodes(&n.cells, &ids))
        })
    })
}

fn same_nodes(a: &[usize], b: &[usize]) -> bool {
    NumaMask::of(a.iter().copied()) == NumaMask::of(b.iter().copied())
}

fn is_regular_init(pod: &Pod, c: &Container) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .find(|i| i.name == c.name)
        .is_some_and(|i| i.restart_policy.as_deref() != Some("Always"))
}
