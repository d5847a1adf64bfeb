//! The managers built in kubelet's order (CPU, memory, devices, DRA, then the topology
//! manager over the first three as hint providers), and the admission handler.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::info;

use crate::contracts::{PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::cpumanager::{CpuManager, CpuManagerSettings, CpuTopology};
use crate::devicemanager::DeviceManager;
use crate::dra::DraManager;
use crate::memorymanager::{MemoryManager, MemoryManagerSettings, NumaMemory};
use crate::pod::pod_uid;
use crate::tasks::Tasks;
use crate::topology::{HintProvider, NumaInfo, TopologyManager, TopologySettings};

/// The pods admitted and not finished, as the pod manager and the statuses know them,
/// and whether every pod source has said what it has (until then a pod missing from
/// the list may only not be read yet, so nothing is forgotten: kubelet's
/// `sourcesReady` guard on `removeStaleState`).
pub(crate) struct ActivePods {
    pub pods: Box<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>,
    pub sources_ready: Box<dyn Fn() -> bool + Send + Sync>,
}

/// What the managers are built from (the agent turns the options into these).
pub(crate) struct ResourceManagerSettings {
    /// Where the state files and sockets live (kubelet's root dir).
    pub root_dir: PathBuf,
    /// The host's `/sys`, where the CPU, NUMA and memory layout is read.
    pub sys_root: PathBuf,
    pub cpu: CpuManagerSettings,
    pub memory: MemoryManagerSettings,
    /// kube-reserved + system-reserved + the hard memory eviction threshold, per
    /// resource: what `reservedMemory` must add up to.
    pub memory_node_reserved: BTreeMap<String, u64>,
    pub topology: TopologySettings,
}

/// Why the managers cannot start: one of them refused its settings or its state file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("failed to initialize the cpu manager: {0}")]
    Cpu(#[from] crate::cpumanager::CpuManagerError),
    #[error("failed to initialize the memory manager: {0}")]
    Memory(#[from] crate::memorymanager::MemoryManagerError),
    #[error("failed to initialize the topology manager: {0}")]
    Topology(#[from] crate::topology::TopologyError),
    #[error("failed to initialize the device manager: {0}")]
    Devices(#[from] crate::devicemanager::DeviceError),
    #[error("reading the machine's layout under {path}: {err}")]
    Machine { path: String, err: std::io::Error },
}

/// The managers, shared by admission, the runtime, the reconcile loop and the API.
pub(crate) struct ResourceManagers {
    pub(super) cpu: Arc<CpuManager>,
    pub(super) memory: Arc<MemoryManager>,
    pub(super) devices: Arc<DeviceManager>,
    pub(super) dra: Option<Arc<DraManager>>,
    pub(super) topology: TopologyManager,
    /// Set once the pod manager exists (the managers are built before it).
    active: std::sync::OnceLock<ActivePods>,
}

impl ResourceManagers {
    /// Builds every manager; a bad setting or state file stops the start with the
    /// manager's own words. `dra` is None without an apiserver (no claims to read).
    pub(crate) fn new(
        s: &ResourceManagerSettings,
        dra: Option<Arc<DraManager>>,
        tasks: &Tasks,
    ) -> Result<Self, StartError> {
        let machine = |e: std::io::Error| StartError::Machine {
            path: s.sys_root.join("devices/system/node").display().to_string(),
            err: e,
        };
        let node_dir = s.sys_root.join("devices/system/node");
        let numa = NumaInfo::from_sysfs(&node_dir).map_err(machine)?;
        let cpu_topology = CpuTopology::discover(&s.sys_root)?;
        let cpu = Arc::new(CpuManager::new(s.cpu.clone(), cpu_topology)?);
        // A host without NUMA nodes in sysfs runs the `None` policy, which needs none.
        let memory_layout = match NumaMemory::from_sysfs(&node_dir) {
            Ok(m) => m,
            Err(_) if s.memory.policy == "None" => NumaMemory::default(),
            Err(e) => return Err(machine(e)),
        };
        let memory = Arc::new(MemoryManager::new(
            &s.memory,
            memory_layout,
            &s.memory_node_reserved,
        )?);
        let devices_dir = s.root_dir.join(crate::devicemanager::DEVICE_PLUGINS_DIR);
        let devices = DeviceManager::new(&devices_dir, numa.nodes().to_vec(), tasks.clone())?;
        let providers: Vec<Arc<dyn HintProvider>> =
            vec![cpu.clone(), memory.clone(), devices.clone()];
        let topology = TopologyManager::new(&s.topology, numa, providers)?;
        info!(
            cpuManagerPolicy = cpu.policy_name(),
            memoryManagerPolicy = memory.policy_name(),
            topologyManagerPolicy = topology.policy_name(),
            topologyManagerScope = topology.scope_name(),
            dra = dra.is_some(),
            "resource managers started"
        );
        Ok(Self {
            cpu,
            memory,
            devices,
            dra,
            topology,
            active: std::sync::OnceLock::new(),
        })
    }

    /// Where the active pods are read from, once the pod manager exists.
    pub(crate) fn set_active_pods(&self, active: ActivePods) {
        let _ = self.active.set(active);
    }

    /// The active pods' UIDs once every source is ready (None before).
    pub(crate) fn active_pod_uids_when_ready(&self) -> Option<Vec<String>> {
        let active = self.active.get().filter(|a| (a.sources_ready)())?;
        Some(
            (active.pods)()
                .iter()
                .map(|p| pod_uid(p).to_string())
                .collect(),
        )
    }

    /// The active pods (none before [`Self::set_active_pods`]).
    pub(super) fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.active.get().map(|a| (a.pods)()).unwrap_or_default()
    }

    /// Whether the CPU manager keeps containers' cpusets (its `static` policy), so the
    /// reconcile loop has work.
    pub(crate) fn reconciles_cpusets(&self) -> bool {
        self.cpu.policy_name() != "none"
    }

    /// The device manager, whose tasks the agent starts.
    pub(crate) fn devices(&self) -> &Arc<DeviceManager> {
        &self.devices
    }

    /// The DRA manager, when there is one.
    pub(crate) fn dra(&self) -> Option<&Arc<DraManager>> {
        self.dra.as_ref()
    }

    /// Forgets what pods no longer active hold (kubelet's `removeStaleState`, which
    /// each manager runs before it hands anything out).
    pub(super) fn remove_stale(&self) {
        let Some(active) = self.active.get().filter(|a| (a.sources_ready)()) else {
            return;
        };
        let pods = (active.pods)();
        let mut containers = BTreeSet::new();
        let mut uids = BTreeSet::new();
        for p in &pods {
            let uid = pod_uid(p).to_string();
            for c in container_names(p) {
                containers.insert((uid.clone(), c.to_string()));
            }
            uids.insert(uid);
        }
        self.cpu.remove_stale(&containers);
        self.memory.remove_stale(&containers);
        self.devices.remove_stale(&uids);
    }
}

/// The names of the pod's init and regular containers.
pub(super) fn container_names(pod: &Pod) -> impl Iterator<Item = &str> {
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let regular = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    init.iter().chain(regular).map(|c| c.name.as_str())
}

/// kubelet's `GetAllocateResourcesPodAdmitHandler`: the topology manager's admission,
/// which asks the CPU, memory and device managers for hints and allocates from each.
pub(crate) struct ResourceAdmission(pub Arc<ResourceManagers>);

impl PodAdmitHandler for ResourceAdmission {
    fn name(&self) -> &'static str {
        "resourceAllocation"
    }

    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        let m = &self.0;
        m.remove_stale();
        m.topology.admit(attrs.pod).map_err(|e| Rejection {
            reason: e.reason,
            message: e.message,
        })
    }
}
