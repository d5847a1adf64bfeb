//! The device manager's state (kubelet's `ManagerImpl`): the plugins' endpoints and
//! options, their devices and health, what each container holds, the checkpoint, and
//! the node's capacity and allocatable that follow from them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::api;
use super::checkpoint::{self, CHECKPOINT_FILE};
use super::endpoint::PluginClient;
use super::pod_devices::{NO_TOPOLOGY, PodDevices};
use super::{ContainerDevices, DeviceError, DeviceResources};
use crate::locks::Locked as _;
use crate::tasks::Tasks;

/// kubelet's `endpointStopGracePeriod`: how long a resource whose plugin went away
/// stays on the node (with nothing allocatable) before it is removed.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(5 * 60);
/// Largest checkpoint read back.
const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;

/// A resource's plugin: its client while connected, its options, and when it went away.
pub(super) struct EndpointInfo {
    /// Which connection this is (a re-registration makes a new one).
    pub id: u64,
    pub client: Option<Arc<PluginClient>>,
    pub options: api::DevicePluginOptions,
    pub stopped_at: Option<Instant>,
}

#[derive(Default)]
pub(super) struct State {
    pub endpoints: BTreeMap<String, EndpointInfo>,
    pub all_devices: BTreeMap<String, BTreeMap<String, api::Device>>,
    pub healthy: BTreeMap<String, BTreeSet<String>>,
    pub unhealthy: BTreeMap<String, BTreeSet<String>>,
    pub allocated: BTreeMap<String, BTreeSet<String>>,
    pub pod_devices: PodDevices,
    /// The devices an init container of the pod being admitted leaves to the next
    /// containers (kubelet's `devicesToReuse`), by pod UID.
    pub reuse: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl State {
    /// kubelet's `isDevicePluginResource`: registered now, or held by a pod.
    pub(super) fn is_device_resource(&self, resource: &str) -> bool {
        self.healthy.contains_key(resource) || self.allocated.contains_key(resource)
    }

    /// The NUMA nodes of a known device (empty: no topology).
    pub(super) fn numa_of(&self, resource: &str, id: &str) -> Vec<i64> {
        self.all_devices
            .get(resource)
            .and_then(|d| d.get(id))
            .and_then(|d| d.topology.as_ref())
            .map(|t| t.nodes.iter().map(|n| n.id).collect())
            .unwrap_or_default()
    }

    fn checkpoint_data(&self) -> checkpoint::Data {
        let entries = self.pod_devices.to_entries();
        checkpoint::Data {
            entries: (!entries.is_empty()).then_some(entries),
            registered: Some(
                self.healthy
                    .iter()
                    .map(|(r, ids)| (r.clone(), Some(ids.iter().cloned().collect())))
                    .collect(),
            ),
        }
    }
}

/// kubelet's device manager.
pub(crate) struct DeviceManager {
    pub(super) dir: PathBuf,
    pub(super) numa_nodes: Vec<usize>,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    next_id: AtomicU64,
    /// Ends the plugins' `ListAndWatch` streams when the manager stops.
    pub(super) stop: CancellationToken,
    /// Where the `ListAndWatch` readers run, as named tasks.
    tasks: Tasks,
}

impl DeviceManager {
    /// A manager for the plugins of `dir` (`<root-dir>/device-plugins`, created 0750),
    /// its allocations read back from the checkpoint there. A resource the checkpoint
    /// names starts with no devices and a stopped plugin: it stays on the node at zero
    /// for the grace period unless its plugin registers again. Each plugin's
    /// `ListAndWatch` is read by a task in `tasks`.
    pub(crate) fn new(
        dir: &Path,
        numa_nodes: Vec<usize>,
        tasks: Tasks,
    ) -> Result<Arc<Self>, DeviceError> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(|e| DeviceError::Io(format!("creating {}: {e}", dir.display())))?;
        info!(path = %dir.join(super::KUBELET_SOCKET).display(), "Creating Device Plugin manager");
        let m = DeviceManager {
            dir: dir.to_path_buf(),
            numa_nodes,
            state: Mutex::new(State::default()),
            changes: watch::channel(0).0,
            next_id: AtomicU64::new(1),
            stop: CancellationToken::new(),
            tasks,
        };
        m.read_checkpoint(Instant::now());
        Ok(Arc::new(m))
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.locked()
    }

    #[cfg(test)]
    /// Fires (the value counts up) when capacity, allocatable or health change.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(super) fn notify(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    fn read_checkpoint(&self, now: Instant) {
        let file = self.dir.join(CHECKPOINT_FILE);
        let body = match crate::private_file::read_bounded(&file, MAX_CHECKPOINT_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => {
                info!(
                    checkpoint = CHECKPOINT_FILE,
                    "No device checkpoint to read; starting with no allocations"
                );
                return;
            }
            Err(e) => {
                error!(err = %e, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
                return;
            }
        };
        let data = match checkpoint::decode(&body) {
            Ok(d) => d,
            Err(e) => {
                error!(err = %e, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date");
                return;
            }
        };
        let mut st = self.state();
        st.pod_devices = PodDevices::from_entries(data.entries.as_deref().unwrap_or_default());
        st.allocated = st.pod_devices.devices();
        for resource in data.registered.unwrap_or_default().into_keys() {
            st.healthy.insert(resource.clone(), BTreeSet::new());
            st.unhealthy.insert(resource.clone(), BTreeSet::new());
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            st.endpoints.insert(
                resource,
                EndpointInfo {
                    id,
                    client: None,
                    options: api::DevicePluginOptions::default(),
                    stopped_at: Some(now),
                },
            );
        }
        info!(
            pods = st.pod_devices.pods().len(),
            resources = st.endpoints.len(),
            "Read device allocations from checkpoint"
        );
    }

    /// Writes the checkpoint (atomically, 0600); a failure is logged, as kubelet does.
    pub(super) fn write_checkpoint(&self) {
        let data = self.state().checkpoint_data();
        let file = self.dir.join(CHECKPOINT_FILE);
        match crate::private_file::write_atomically(&file, &checkpoint::encode(&data)) {
            Ok(()) => debug!(checkpoint = CHECKPOINT_FILE, "Checkpoint file written"),
            Err(e) => {
                error!(err = %e, checkpoint = CHECKPOINT_FILE, "Failed to write checkpoint file");
            }
        }
    }

    /// A plugin answered: connects to it, takes its options, makes it the resource's
    /// endpoint and follows its `ListAndWatch` until it ends (kubelet's
    /// `connectClient` and `PluginConnected`).
    pub(super) async fn connect_plugin(
        self: &Arc<Self>,
        resource: &str,
        socket: &Path,
    ) -> Result<(), DeviceError> {
        let client = PluginClient::connect(socket)
            .await
            .map_err(|e| DeviceError::Plugin(e.to_string()))?;
        let options = client.options().await.map_err(|s| {
            DeviceError::Plugin(format!(
                "failed to get device plugin options: {}",
                s.message()
            ))
        })?;
        let stream = client
            .list_and_watch()
            .await
            .map_err(|s| DeviceError::Plugin(format!("ListAndWatch failed: {}", s.message())))?;
        let client = Arc::new(client);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.state().endpoints.insert(
            resource.to_string(),
            EndpointInfo {
                id,
                client: Some(client),
                options: options.clone(),
                stopped_at: None,
            },
        );
        info!(resourceName = %resource, endpoint = %socket.display(), preStartRequired = options.pre_start_required, getPreferredAllocationAvailable = options.get_preferred_allocation_available, "Device plugin connected");
        let m = Arc::clone(self);
        let resource = resource.to_string();
        self.tasks
            .spawn_pass("device-plugin-list-and-watch", async move {
                m.follow(resource, id, stream).await;
                Ok(())
            });
        Ok(())
    }

    /// Reads a plugin's `ListAndWatch` until it ends, then marks its devices unhealthy
    /// unless a newer connection took its place.
    async fn follow(
        self: Arc<Self>,
        resource: String,
        id: u64,
        mut stream: tonic::Streaming<api::ListAndWatchResponse>,
    ) {
        loop {
            tokio::select! {
                () = self.stop.cancelled() => return,
                next = stream.next() => match next {
                    Some(Ok(resp)) => self.update_devices(&resource, resp.devices),
                    Some(Err(s)) => {
                        warn!(resourceName = %resource, err = %s.message(), "ListAndWatch ended with an error");
                        break;
                    }
                    None => break,
                },
            }
        }
        self.disconnect(&resource, Some(id), Instant::now());
    }

    /// kubelet's `PluginDisconnected`: every device of the resource unhealthy, the
    /// grace period started. `id`: only if that connection is still the endpoint.
    pub(super) fn disconnect(&self, resource: &str, id: Option<u64>, now: Instant) {
        {
            let mut st = self.state();
            let Some(ep) = st.endpoints.get_mut(resource) else {
                return;
            };
            if id.is_some_and(|id| id != ep.id) || ep.stopped_at.is_some() {
                return;
            }
            ep.stopped_at = Some(now);
            ep.client = None;
            let healthy = st.healthy.insert(resource.to_string(), BTreeSet::new());
            st.unhealthy
                .entry(resource.to_string())
                .or_default()
                .extend(healthy.into_iter().flatten());
        }
        info!(resourceName = %resource, "Endpoint became unhealthy: its device plugin went away; all its devices are unhealthy");
        self.notify();
    }

    /// kubelet's `genericDeviceUpdateCallback`: the plugin's latest device list.
    pub(super) fn update_devices(&self, resource: &str, devices: Vec<api::Device>) {
        let (total, healthy) = {
            let mut st = self.state();
            let old = st.all_devices.remove(resource).unwrap_or_default();
            let mut h = BTreeSet::new();
            let mut u = BTreeSet::new();
            let mut all = BTreeMap::new();
            for d in devices {
                let is_healthy = d.health == api::HEALTHY;
                if let Some(prev) = old.get(&d.id).filter(|p| p.health != d.health) {
                    info!(resourceName = %resource, device = %d.id, from = %prev.health, to = %d.health, "Device health changed");
                }
                if is_healthy {
                    h.insert(d.id.clone());
                } else {
                    u.insert(d.id.clone());
                }
                all.insert(d.id.clone(), d);
            }
            let counts = (all.len(), h.len());
            st.all_devices.insert(resource.to_string(), all);
            st.healthy.insert(resource.to_string(), h);
            st.unhealthy.insert(resource.to_string(), u);
            counts
        };
        self.write_checkpoint();
        info!(resourceName = %resource, totalCount = total, healthyCount = healthy, "Processed device updates for resource");
        self.notify();
    }

    /// kubelet's `GetCapacity`, now.
    pub(crate) fn resources(&self) -> DeviceResources {
        self.resources_at(Instant::now())
    }

    /// kubelet's `GetCapacity` at `now`: capacity counts every device, allocatable the
    /// healthy ones; a resource whose plugin has been gone past the grace period is
    /// removed (and reported once in `removed`).
    pub(super) fn resources_at(&self, now: Instant) -> DeviceResources {
        let mut out = DeviceResources::default();
        let removed_any = {
            let mut st = self.state();
            let expired: BTreeSet<String> = st
                .healthy
                .keys()
                .chain(st.unhealthy.keys())
                .filter(|r| {
                    st.endpoints.get(*r).is_none_or(|ep| {
                        ep.stopped_at
                            .is_some_and(|t| now.duration_since(t) >= STOP_GRACE)
                    })
                })
                .cloned()
                .collect();
            for r in &expired {
                st.endpoints.remove(r);
                st.healthy.remove(r);
                st.unhealthy.remove(r);
                info!(resourceName = %r, "Removing resource: its device plugin has been gone for the grace period");
            }
            for (r, ids) in &st.healthy {
                let n = i64::try_from(ids.len()).unwrap_or(i64::MAX);
                out.capacity.insert(r.clone(), n);
                out.allocatable.insert(r.clone(), n);
            }
            for (r, ids) in &st.unhealthy {
                let n = i64::try_from(ids.len()).unwrap_or(i64::MAX);
                *out.capacity.entry(r.clone()).or_default() += n;
            }
            out.removed = expired.into_iter().collect();
            !out.removed.is_empty()
        };
        if removed_any {
            self.write_checkpoint();
        }
        out
    }

    /// The plugin of `resource` went away as far as `now` is concerned (tests: the
    /// grace period without waiting for it).
    #[cfg(test)]
    pub(super) fn stopped_since(&self, resource: &str) -> Option<Instant> {
        self.state().endpoints.get(resource)?.stopped_at
    }

    /// An endpoint for `resource` without a plugin behind it (unit tests).
    #[cfg(test)]
    pub(super) fn fake_endpoint(&self, resource: &str) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ep = EndpointInfo {
            id,
            client: None,
            options: api::DevicePluginOptions::default(),
            stopped_at: None,
        };
        self.state().endpoints.insert(resource.to_string(), ep);
    }

    /// kubelet's `UpdateAllocatedDevices`: frees the devices of pods no longer active.
    pub(crate) fn remove_stale(&self, active_pod_uids: &BTreeSet<String>) {
        let removed = {
            let mut st = self.state();
            let stale: BTreeSet<String> = st
                .pod_devices
                .pods()
                .into_iter()
                .filter(|u| !active_pod_uids.contains(u))
                .collect();
            if stale.is_empty() {
                return;
            }
            st.pod_devices.remove_pods(&stale);
            st.allocated = st.pod_devices.devices();
            st.reuse.retain(|u, _| !stale.contains(u));
            stale
        };
        for uid in &removed {
            info!(podUID = %uid, "Freed the devices of a pod that is no longer active");
        }
        self.write_checkpoint();
        self.notify();
    }

    /// The devices a container holds, by resource and NUMA node (the pod resources API).
    pub(crate) fn container_devices(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Vec<ContainerDevices> {
        let st = self.state();
        let Some(rs) = st.pod_devices.container(pod_uid, container) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (resource, a) in rs {
            for (node, ids) in &a.by_numa {
                out.push(ContainerDevices {
                    resource: resource.clone(),
                    device_ids: ids.iter().cloned().collect(),
                    numa_nodes: if *node == NO_TOPOLOGY {
                        Vec::new()
                    } else {
                        vec![*node]
                    },
                });
            }
        }
        out
    }

    /// Every healthy device, one entry each with its NUMA nodes (kubelet's
    /// `GetAllocatableDevices`, for the pod resources API).
    pub(crate) fn allocatable_devices(&self) -> Vec<ContainerDevices> {
        let st = self.state();
        let mut out = Vec::new();
        for (resource, ids) in &st.healthy {
            for id in ids {
                out.push(ContainerDevices {
                    resource: resource.clone(),
                    device_ids: vec![id.clone()],
                    numa_nodes: st.numa_of(resource, id),
                });
            }
        }
        out
    }

    /// The client and options of `resource`'s connected plugin.
    pub(super) fn endpoint(
        &self,
        resource: &str,
    ) -> Option<(Arc<PluginClient>, api::DevicePluginOptions)> {
        let st = self.state();
        let ep = st.endpoints.get(resource)?;
        Some((Arc::clone(ep.client.as_ref()?), ep.options.clone()))
    }
}
