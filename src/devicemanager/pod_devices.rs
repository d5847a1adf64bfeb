//! Which devices each container holds (kubelet's `podDevices`), with the plugin's
//! answer to `Allocate` once it came, and what the container is run with because of
//! them (kubelet's `deviceRunContainerOptions`).

use std::collections::{BTreeMap, BTreeSet};

use tracing::{debug, error};

use super::api::ContainerAllocateResponse;
use super::checkpoint::Entry;
use super::{DeviceRunOptions, DeviceSpec, MountSpec};

/// The NUMA node kubelet files a device under when it has no topology.
pub(super) const NO_TOPOLOGY: i64 = -1;

/// One container's devices of one resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Allocation {
    /// Device ids by NUMA node (a device on two nodes is under both).
    pub by_numa: BTreeMap<i64, BTreeSet<String>>,
    /// The plugin's answer; `None` while the devices are picked but `Allocate` has not
    /// been made yet.
    pub resp: Option<ContainerAllocateResponse>,
}

impl Allocation {
    pub(super) fn ids(&self) -> BTreeSet<String> {
        self.by_numa.values().flatten().cloned().collect()
    }
}

/// Pod UID → container → resource → allocation.
#[derive(Debug, Clone, Default)]
pub(super) struct PodDevices(BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>);

impl PodDevices {
    pub(super) fn pods(&self) -> BTreeSet<String> {
        self.0.keys().cloned().collect()
    }

    pub(super) fn insert(&mut self, uid: &str, container: &str, resource: &str, a: Allocation) {
        self.0
            .entry(uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), a);
    }

    pub(super) fn get(&self, uid: &str, container: &str, resource: &str) -> Option<&Allocation> {
        self.0.get(uid)?.get(container)?.get(resource)
    }

    pub(super) fn get_mut(
        &mut self,
        uid: &str,
        container: &str,
        resource: &str,
    ) -> Option<&mut Allocation> {
        self.0.get_mut(uid)?.get_mut(container)?.get_mut(resource)
    }

    /// The container's allocations by resource.
    pub(super) fn container(
        &self,
        uid: &str,
        container: &str,
    ) -> Option<&BTreeMap<String, Allocation>> {
        self.0.get(uid)?.get(container)
    }

    /// The pod's containers and their allocations.
    pub(super) fn pod(&self, uid: &str) -> Option<&BTreeMap<String, BTreeMap<String, Allocation>>> {
        self.0.get(uid)
    }

    /// The pod's devices of `resource`, over all its containers.
    pub(super) fn pod_resource(&self, uid: &str, resource: &str) -> BTreeSet<String> {
        self.0
            .get(uid)
            .into_iter()
            .flat_map(|cs| cs.values())
            .filter_map(|rs| rs.get(resource))
            .flat_map(Allocation::ids)
            .collect()
    }

    pub(super) fn remove_pods(&mut self, uids: &BTreeSet<String>) {
        self.0.retain(|uid, _| !uids.contains(uid));
    }

    /// Drops the picks of `uid` that never got their `Allocate` answer.
    pub(super) fn remove_unanswered(&mut self, uid: &str) {
        if let Some(cs) = self.0.get_mut(uid) {
            for rs in cs.values_mut() {
                rs.retain(|_, a| a.resp.is_some());
            }
            cs.retain(|_, rs| !rs.is_empty());
            if cs.is_empty() {
                self.0.remove(uid);
            }
        }
    }

    /// Every device held (picked or allocated), by resource.
    pub(super) fn devices(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for rs in self.0.values().flat_map(BTreeMap::values) {
            for (resource, a) in rs {
                out.entry(resource.clone()).or_default().extend(a.ids());
            }
        }
        out
    }

    /// Checkpoint entries: the answered allocations only, as kubelet writes them.
    pub(super) fn to_entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for (uid, cs) in &self.0 {
            for (container, rs) in cs {
                for (resource, a) in rs {
                    let Some(resp) = &a.resp else { continue };
                    let by_numa = a
                        .by_numa
                        .iter()
                        .map(|(n, ids)| (*n, Some(ids.iter().cloned().collect())))
                        .collect();
                    out.push(Entry {
                        pod_uid: uid.clone(),
                        container: container.clone(),
                        resource: resource.clone(),
                        device_ids: Some(by_numa),
                        alloc_resp: Some(prost::Message::encode_to_vec(resp)),
                    });
                }
            }
        }
        out
    }

    /// Loads checkpoint entries (an entry whose answer does not decode is skipped, as
    /// kubelet does).
    pub(super) fn from_entries(entries: &[Entry]) -> Self {
        let mut out = PodDevices::default();
        for e in entries {
            let resp = match e
                .alloc_resp
                .as_deref()
                .map(<ContainerAllocateResponse as prost::Message>::decode)
            {
                Some(Ok(r)) => r,
                Some(Err(err)) => {
                    error!(podUID = %e.pod_uid, containerName = %e.container, resourceName = %e.resource, err = %err, "Can't unmarshal allocResp");
                    continue;
                }
                None => ContainerAllocateResponse::default(),
            };
            let by_numa = e
                .device_ids
                .iter()
                .flatten()
                .map(|(n, ids)| (*n, ids.iter().flatten().cloned().collect()))
                .collect();
            out.insert(
                &e.pod_uid,
                &e.container,
                &e.resource,
                Allocation {
                    by_numa,
                    resp: Some(resp),
                },
            );
        }
        out
    }

    /// kubelet's `deviceRunContainerOptions`: the answers of all the container's
    /// resources merged; the first setting for a path or name wins, a conflicting later
    /// one is logged and dropped.
    pub(super) fn run_options(&self, uid: &str, container: &str) -> Option<DeviceRunOptions> {
        let rs = self.container(uid, container)?;
        let mut opts = DeviceRunOptions::default();
        let mut dev_paths: BTreeMap<String, String> = BTreeMap::new();
        let mut mount_paths: BTreeMap<String, String> = BTreeMap::new();
        for resp in rs.values().filter_map(|a| a.resp.as_ref()) {
            for (k, v) in &resp.envs {
                merge_setting(&mut opts.envs, k, v, "Environment variable");
            }
            for d in &resp.devices {
                if first_mapping(&mut dev_paths, &d.container_path, &d.host_path, "device") {
                    opts.devices.push(DeviceSpec {
                        container_path: d.container_path.clone(),
                        host_path: d.host_path.clone(),
                        permissions: d.permissions.clone(),
                    });
                }
            }
            for m in &resp.mounts {
                if first_mapping(&mut mount_paths, &m.container_path, &m.host_path, "mount") {
                    opts.mounts.push(MountSpec {
                        container_path: m.container_path.clone(),
                        host_path: m.host_path.clone(),
                        read_only: m.read_only,
                    });
                }
            }
            for (k, v) in &resp.annotations {
                merge_setting(&mut opts.annotations, k, v, "Annotation");
            }
            for c in &resp.cdi_devices {
                if !opts.cdi_devices.contains(&c.name) {
                    opts.cdi_devices.push(c.name.clone());
                }
            }
        }
        Some(opts)
    }
}

fn merge_setting(into: &mut BTreeMap<String, String>, k: &str, v: &str, what: &str) {
    match into.get(k) {
        Some(existing) if existing != v => {
            error!(name = %k, first = %existing, second = %v, "{what} has conflicting setting");
        }
        Some(_) => debug!(name = %k, "Skip existing {what}"),
        None => {
            into.insert(k.to_string(), v.to_string());
        }
    }
}

/// True when `container_path` is new (and records it).
fn first_mapping(
    seen: &mut BTreeMap<String, String>,
    container_path: &str,
    host_path: &str,
    what: &str,
) -> bool {
    match seen.get(container_path) {
        Some(h) => {
            if h != host_path {
                error!(containerPath = %container_path, first = %h, second = %host_path, "Container {what} has conflicting mapping host paths");
            }
            false
        }
        None => {
            seen.insert(container_path.to_string(), host_path.to_string());
            true
        }
    }
}
