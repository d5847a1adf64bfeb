//! Admission's side of the device manager: the topology hints (kubelet's
//! `topology_hints.go`), the choice of device ids (kubelet's `devicesToAllocate`,
//! with init containers' devices reused by the next containers), then, outside the
//! admission lock, the plugin's `Allocate` for what was chosen.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{debug, info};

use super::DeviceManager;
use super::manager::State;
use super::pod_devices::{Allocation, NO_TOPOLOGY};
use super::{DeviceError, DeviceRunOptions};
use crate::topology::{AdmitError, HintProvider, Hints, NumaMask, TopologyHint};

/// A container's device requests: the device plugin resources of its limits (requests
/// equal limits for extended resources).
fn container_requests(st: &State, c: &Container) -> BTreeMap<String, usize> {
    c.resources
        .iter()
        .flat_map(|r| r.limits.iter().flatten())
        .filter(|(name, _)| st.is_device_resource(name))
        .filter_map(|(name, q)| {
            let n = crate::quantity::bytes(q).ok()?;
            Some((name.clone(), usize::try_from(n).ok()?))
        })
        .collect()
}

/// The pod's requests (kubelet's `PodLimits`): the regular containers and sidecars
/// together, or the largest init container if that is more.
fn pod_requests(st: &State, pod: &Pod) -> BTreeMap<String, usize> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    let inits = spec.init_containers.iter().flatten();
    let sidecars = inits
        .clone()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for c in spec.containers.iter().chain(sidecars) {
        for (r, n) in container_requests(st, c) {
            *out.entry(r).or_default() += n;
        }
    }
    for c in inits.filter(|c| c.restart_policy.as_deref() != Some("Always")) {
        for (r, n) in container_requests(st, c) {
            let e = out.entry(r).or_default();
            *e = (*e).max(n);
        }
    }
    out
}

fn pod_ref(pod: &Pod) -> String {
    crate::pod::pod_ref(pod)
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// Why devices could not be given to a container (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum AllocateError {
    #[error(
        "pod {uid:?} container {container:?} changed request for resource {resource:?} from {from} to {to}"
    )]
    ChangedRequest {
        uid: String,
        container: String,
        resource: String,
        from: usize,
        to: usize,
    },
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoHealthy(String),
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    NoLongerHealthy(String),
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        resource: String,
        requested: usize,
        available: usize,
    },
    #[error("unknown Device Plugin {0}")]
    UnknownPlugin(String),
    /// The plugin's `Allocate` failed: its message.
    #[error("{0}")]
    Plugin(String),
    #[error("no containers return in allocation response")]
    NoContainerResponse,
    #[error("device plugin GetPreferredAllocation rpc failed with err: {0}")]
    Preferred(String),
}

impl DeviceManager {
    /// Does any device of the resource say where it is? Only then are hints given.
    fn has_topology(st: &State, resource: &str) -> bool {
        st.all_devices.get(resource).is_some_and(|d| {
            d.values()
                .any(|d| d.topology.as_ref().is_some_and(|t| !t.nodes.is_empty()))
        })
    }

    fn in_mask(st: &State, resource: &str, id: &str, mask: NumaMask) -> bool {
        st.numa_of(resource, id)
            .into_iter()
            .any(|n| usize::try_from(n).is_ok_and(|n| mask.contains(n)))
    }

    /// kubelet's `generateDeviceTopologyHints`: every NUMA node combination with enough
    /// devices (the reusable ones all inside it); the narrowest that could hold the
    /// request are preferred.
    fn device_hints(
        &self,
        st: &State,
        resource: &str,
        available: &BTreeSet<String>,
        reusable: &BTreeSet<String>,
        request: usize,
    ) -> Vec<TopologyHint> {
        let nodes = &self.numa_nodes;
        let mut min_size = nodes.len() as u32;
        let mut hints = Vec::new();
        let all: Vec<&String> = st
            .all_devices
            .get(resource)
            .map(|d| d.keys().collect())
            .unwrap_or_default();
        for bits in 1u64..(1u64 << nodes.len().min(63)) {
            let mask = NumaMask::of(
                nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, n)| *n),
            );
            let in_mask = all
                .iter()
                .filter(|d| Self::in_mask(st, resource, d, mask))
                .count();
            if in_mask >= request && mask.count() < min_size {
                min_size = mask.count();
            }
            let mut matching = 0;
            let mut reusable_outside = false;
            for d in reusable {
                let has_topology = st
                    .all_devices
                    .get(resource)
                    .and_then(|m| m.get(d))
                    .is_some_and(|d| d.topology.is_some());
                if !has_topology {
                    continue;
                }
                if !Self::in_mask(st, resource, d, mask) {
                    reusable_outside = true;
                    break;
                }
                matching += 1;
            }
            if reusable_outside {
                continue;
            }
            matching += available
                .iter()
                .filter(|d| Self::in_mask(st, resource, d, mask))
                .count();
            if matching >= request {
                hints.push(TopologyHint {
                    numa_affinity: Some(mask),
                    preferred: false,
                });
            }
        }
        for h in &mut hints {
            h.preferred = h.numa_affinity.is_some_and(|m| m.count() == min_size);
        }
        hints
    }

    fn available(st: &State, resource: &str) -> BTreeSet<String> {
        let allocated = st.allocated.get(resource);
        st.healthy
            .get(resource)
            .map(|h| {
                h.iter()
                    .filter(|d| !allocated.is_some_and(|a| a.contains(*d)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    fn hints_for(
        &self,
        st: &State,
        pod: &Pod,
        requests: BTreeMap<String, usize>,
        allocated_of: impl Fn(&State, &str) -> BTreeSet<String>,
        reusable_of: impl Fn(&State, &str) -> BTreeSet<String>,
    ) -> Hints {
        let mut out = Hints::new();
        for (resource, requested) in requests {
            if !Self::has_topology(st, &resource) {
                debug!(resource = %resource, pod = %pod_ref(pod), request = requested, "Resource does not have a topology preference");
                continue;
            }
            let allocated = allocated_of(st, &resource);
            if !allocated.is_empty() {
                if allocated.len() != requested {
                    info!(resource = %resource, pod = %pod_ref(pod), request = requested, allocated = allocated.len(), "Resource already allocated to pod with different number than request");
                    out.insert(resource, Vec::new());
                } else {
                    debug!(resource = %resource, pod = %pod_ref(pod), "Regenerating TopologyHints for resource already allocated to pod");
                    let hints =
                        self.device_hints(st, &resource, &allocated, &BTreeSet::new(), requested);
                    out.insert(resource, hints);
                }
                continue;
            }
            let available = Self::available(st, &resource);
            let reusable = reusable_of(st, &resource);
            let n = available.union(&reusable).count();
            if n < requested {
                info!(resource = %resource, pod = %pod_ref(pod), request = requested, available = n, "Unable to generate topology hints: requested number of devices unavailable");
                out.insert(resource, Vec::new());
                continue;
            }
            let hints = self.device_hints(st, &resource, &available, &reusable, requested);
            out.insert(resource, hints);
        }
        out
    }

    /// kubelet's `devicesToAllocate` without the plugin's preference (asked for later,
    /// in [`Self::complete_allocation`]): the ids `container` gets of `resource`, reused
    /// ones first, then the ones on the chosen NUMA nodes, then the rest. Empty when
    /// the container already holds them.
    fn pick(
        st: &mut State,
        uid: &str,
        container: &str,
        resource: &str,
        required: usize,
        reusable: &BTreeSet<String>,
        affinity: Option<NumaMask>,
    ) -> Result<BTreeSet<String>, AllocateError> {
        let held = st
            .pod_devices
            .get(uid, container, resource)
            .map(Allocation::ids);
        let mut needed = required;
        if let Some(h) = &held {
            if h.len() != required {
                return Err(AllocateError::ChangedRequest {
                    uid: uid.to_owned(),
                    container: container.to_owned(),
                    resource: resource.to_owned(),
                    from: h.len(),
                    to: required,
                });
            }
            needed = 0;
        }
        let Some(healthy) = st.healthy.get(resource) else {
            return Err(AllocateError::Unregistered(resource.to_owned()));
        };
        if healthy.is_empty() {
            return Err(AllocateError::NoHealthy(resource.to_owned()));
        }
        if held.as_ref().is_some_and(|h| !h.is_subset(healthy)) {
            return Err(AllocateError::NoLongerHealthy(resource.to_owned()));
        }
        if needed == 0 {
            return Ok(BTreeSet::new());
        }
        let mut picked: BTreeSet<String> = reusable.iter().take(needed).cloned().collect();
        needed -= picked.len();
        if needed == 0 {
            return Ok(picked);
        }
        let available: BTreeSet<String> = Self::available(st, resource)
            .difference(&picked)
            .cloned()
            .collect();
        if available.len() < needed {
            return Err(AllocateError::Unavailable {
                resource: resource.to_owned(),
                requested: needed,
                available: available.len(),
            });
        }
        for d in Self::by_affinity(st, resource, &available, affinity)
            .into_iter()
            .take(needed)
        {
            picked.insert(d);
        }
        Ok(picked)
    }

    /// kubelet's `filterByAffinity`, flattened: the devices on the affinity's nodes
    /// first, then those on other nodes, then those without topology; within each, the
    /// nodes with fewer free devices first.
    fn by_affinity(
        st: &State,
        resource: &str,
        available: &BTreeSet<String>,
        affinity: Option<NumaMask>,
    ) -> Vec<String> {
        let Some(mask) = affinity.filter(|_| Self::has_topology(st, resource)) else {
            return available.iter().cloned().collect();
        };
        let mut per_node: BTreeMap<i64, BTreeSet<&String>> = BTreeMap::new();
        for d in available {
            let nodes = st.numa_of(resource, d);
            if nodes.is_empty() {
                per_node.entry(NO_TOPOLOGY).or_default().insert(d);
            }
            for n in nodes {
                per_node.entry(n).or_default().insert(d);
            }
        }
        let in_mask = |n: i64| usize::try_from(n).is_ok_and(|n| mask.contains(n));
        let mut nodes: Vec<i64> = per_node.keys().copied().collect();
        nodes.sort_by_key(|&n| {
            let group = if in_mask(n) {
                0
            } else if n == NO_TOPOLOGY {
                2
            } else {
                1
            };
            (group, per_node[&n].len(), n)
        });
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for n in nodes {
            for d in &per_node[&n] {
                if seen.insert(*d) {
                    out.push((*d).clone());
                }
            }
        }
        out
    }

    /// kubelet's `allocateContainerResources` up to the RPC: picks and records.
    fn allocate_container(
        &self,
        st: &mut State,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AllocateError> {
        let uid = uid(pod);
        for (resource, needed) in container_requests(st, container) {
            let reusable = st
                .reuse
                .get(&uid)
                .and_then(|r| r.get(&resource))
                .cloned()
                .unwrap_or_default();
            let picked = Self::pick(
                st,
                &uid,
                &container.name,
                &resource,
                needed,
                &reusable,
                affinity,
            )?;
            if picked.is_empty() {
                continue;
            }
            let mut by_numa: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
            for d in &picked {
                let nodes = st.numa_of(&resource, d);
                if nodes.is_empty() {
                    by_numa.entry(NO_TOPOLOGY).or_default().insert(d.clone());
                }
                for n in nodes {
                    by_numa.entry(n).or_default().insert(d.clone());
                }
            }
            st.allocated
                .entry(resource.clone())
                .or_default()
                .extend(picked.iter().cloned());
            info!(pod = %pod_ref(pod), podUID = %uid, containerName = %container.name, resourceName = %resource, devices = %join(&picked), reused = picked.intersection(&reusable).count(), "Picked devices for container");
            st.pod_devices.insert(
                &uid,
                &container.name,
                &resource,
                Allocation {
                    by_numa,
                    resp: None,
                },
            );
        }
        Ok(())
    }

    /// Runs the plugins' `Allocate` for the devices picked for `pod` at admission, and
    /// keeps their answers (checkpointed). On a failure the pod's unanswered picks are
    /// released and the pod is refused as kubelet refuses it.
    pub(crate) async fn complete_allocation(&self, pod: &Pod) -> Result<(), AdmitError> {
        let uid = uid(pod);
        let pending: Vec<(String, String, Vec<String>)> = {
            let st = self.state();
            st.pod_devices
                .pod(&uid)
                .into_iter()
                .flatten()
                .flat_map(|(c, rs)| {
                    rs.iter()
                        .filter(|(_, a)| a.resp.is_none())
                        .map(|(r, a)| (c.clone(), r.clone(), a.ids().into_iter().collect()))
                })
                .collect()
        };
        for (container, resource, ids) in pending {
            if let Err(e) = self.allocate_rpc(pod, &container, &resource, ids).await {
                let mut st = self.state();
                st.pod_devices.remove_unanswered(&uid);
                st.allocated = st.pod_devices.devices();
                drop(st);
                info!(pod = %pod_ref(pod), podUID = %uid, containerName = %container, resourceName = %resource, err = %e, "Device allocation failed; released the pod's devices");
                return Err(AdmitError::unexpected(e));
            }
        }
        Ok(())
    }

    async fn allocate_rpc(
        &self,
        pod: &Pod,
        container: &str,
        resource: &str,
        ids: Vec<String>,
    ) -> Result<(), AllocateError> {
        let Some((client, opts)) = self.endpoint(resource) else {
            return Err(AllocateError::UnknownPlugin(resource.to_owned()));
        };
        let ids = if opts.get_preferred_allocation_available {
            self.preferred(&client, pod, container, resource, ids)
                .await?
        } else {
            ids
        };
        debug!(devices = %ids.join(","), resourceName = %resource, pod = %pod_ref(pod), containerName = %container, "Making allocation request for device plugin");
        let started = std::time::Instant::now();
        let resp = client.allocate(ids.clone()).await;
        crate::metrics::device_plugin_allocation(resource, started.elapsed());
        let resp = resp.map_err(|s| AllocateError::Plugin(s.message().to_string()))?;
        let Some(first) = resp.container_responses.into_iter().next() else {
            return Err(AllocateError::NoContainerResponse);
        };
        let uid = uid(pod);
        {
            let mut st = self.state();
            if let Some(a) = st.pod_devices.get_mut(&uid, container, resource) {
                a.resp = Some(first);
            }
        }
        self.write_checkpoint();
        info!(pod = %pod_ref(pod), podUID = %uid, containerName = %container, resourceName = %resource, devices = %ids.join(","), "Allocated devices for container");
        Ok(())
    }

    /// Asks the plugin which devices it prefers (kubelet's
    /// `callGetPreferredAllocationIfAvailable`), from the picked ones and the free ones on
    /// the same NUMA nodes, so the topology manager's alignment holds; a usable answer
    /// replaces the pick.
    async fn preferred(
        &self,
        client: &super::endpoint::PluginClient,
        pod: &Pod,
        container: &str,
        resource: &str,
        picked: Vec<String>,
    ) -> Result<Vec<String>, AllocateError> {
        let uid = uid(pod);
        let candidates: BTreeSet<String> = {
            let st = self.state();
            let nodes: BTreeSet<i64> = picked
                .iter()
                .flat_map(|d| st.numa_of(resource, d))
                .collect();
            let free = Self::available(&st, resource)
                .into_iter()
                .filter(|d| st.numa_of(resource, d).iter().all(|n| nodes.contains(n)));
            free.chain(picked.iter().cloned()).collect()
        };
        debug!(resourceName = %resource, containerName = %container, podUID = %uid, "Issuing a GetPreferredAllocation call for container");
        let answer = client
            .preferred(
                candidates.iter().cloned().collect(),
                Vec::new(),
                picked.len(),
            )
            .await
            .map_err(|s| AllocateError::Preferred(s.message().to_string()))?;
        let answer: BTreeSet<String> = answer.into_iter().collect();
        let usable = answer.len() == picked.len() && answer.is_subset(&candidates);
        if !usable || answer.iter().eq(picked.iter()) {
            return Ok(picked);
        }
        let mut st = self.state();
        let mut by_numa: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
        for d in &answer {
            let nodes = st.numa_of(resource, d);
            if nodes.is_empty() {
                by_numa.entry(NO_TOPOLOGY).or_default().insert(d.clone());
            }
            for n in nodes {
                by_numa.entry(n).or_default().insert(d.clone());
            }
        }
        if let Some(a) = st.pod_devices.get_mut(&uid, container, resource) {
            a.by_numa = by_numa;
        }
        st.allocated = st.pod_devices.devices();
        info!(pod = %pod_ref(pod), containerName = %container, resourceName = %resource, devices = %join(&answer), "Took the device plugin's preferred allocation");
        Ok(answer.into_iter().collect())
    }

    /// kubelet's `GetDeviceRunContainerOptions` (the settings only): what the container
    /// is run with because of its devices. `None` when it holds none.
    pub(crate) fn run_options(&self, pod_uid: &str, container: &str) -> Option<DeviceRunOptions> {
        self.state().pod_devices.run_options(pod_uid, container)
    }

    /// kubelet's `callPreStartContainerIfNeeded`, for each resource of the container
    /// whose plugin asked for it.
    pub(crate) async fn pre_start(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<(), DeviceError> {
        let held: Vec<(String, Vec<String>)> = {
            let st = self.state();
            st.pod_devices
                .container(pod_uid, container)
                .into_iter()
                .flatten()
                .map(|(r, a)| (r.clone(), a.ids().into_iter().collect()))
                .collect()
        };
        for (resource, ids) in held {
            let Some((client, opts)) = self.endpoint(&resource) else {
                return Err(DeviceError::Plugin(format!(
                    "endpoint not found in cache for a registered resource: {resource}"
                )));
            };
            if !opts.pre_start_required {
                continue;
            }
            debug!(containerName = %container, podUID = %pod_uid, resourceName = %resource, "Issuing a PreStartContainer call for container");
            client.pre_start(ids).await.map_err(|s| {
                DeviceError::Plugin(format!(
                    "device plugin PreStartContainer rpc failed with err: {}",
                    s.message()
                ))
            })?;
        }
        Ok(())
    }
}

fn join(ids: &BTreeSet<String>) -> String {
    ids.iter().cloned().collect::<Vec<_>>().join(",")
}

impl HintProvider for DeviceManager {
    fn name(&self) -> &'static str {
        "devices"
    }

    fn container_hints(&self, pod: &Pod, container: &Container) -> Hints {
        let st = self.state();
        let uid = uid(pod);
        let requests = container_requests(&st, container);
        self.hints_for(
            &st,
            pod,
            requests,
            |st, r| {
                st.pod_devices
                    .get(&uid, &container.name, r)
                    .map(Allocation::ids)
                    .unwrap_or_default()
            },
            |st, r| {
                st.reuse
                    .get(&uid)
                    .and_then(|m| m.get(r))
                    .cloned()
                    .unwrap_or_default()
            },
        )
    }

    fn pod_hints(&self, pod: &Pod) -> Hints {
        let st = self.state();
        let uid = uid(pod);
        let requests = pod_requests(&st, pod);
        self.hints_for(
            &st,
            pod,
            requests,
            |st, r| st.pod_devices.pod_resource(&uid, r),
            |_, _| BTreeSet::new(),
        )
    }

    /// kubelet's `Allocate(pod, container)`: picks the container's devices; an init
    /// container's are left for the next containers to reuse unless it is a sidecar.
    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        let uid = uid(pod);
        let mut st = self.state();
        st.reuse.retain(|u, _| *u == uid);
        st.reuse.entry(uid.clone()).or_default();
        self.allocate_container(&mut st, pod, container, affinity)
            .map_err(AdmitError::unexpected)?;
        let is_init = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .find(|c| c.name == container.name);
        let held: Vec<(String, BTreeSet<String>)> = st
            .pod_devices
            .container(&uid, &container.name)
            .into_iter()
            .flatten()
            .map(|(r, a)| (r.clone(), a.ids()))
            .collect();
        let keep_for_next = is_init.is_some_and(|c| c.restart_policy.as_deref() != Some("Always"));
        let reuse = st.reuse.entry(uid).or_default();
        for (r, ids) in held {
            let set = reuse.entry(r).or_default();
            if keep_for_next {
                set.extend(ids);
            } else {
                set.retain(|d| !ids.contains(d));
            }
        }
        Ok(())
    }
}
