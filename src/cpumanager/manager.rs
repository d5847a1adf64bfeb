//! The CPU manager (kubelet's `cpu_manager.go` with its `none` and `static`
//! policies): which CPUs each container may use, kept in `cpu_manager_state`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{error, info};

use super::assign;
use super::assign::TakeError;
use super::options::{CpuManagerPolicy, StaticOptions};
use super::state::{self, Saved, StateError};
use super::topology::CpuTopology;
use super::{CpuManagerError, CpuSet};
use crate::locks::Locked as _;
use crate::topology::NumaMask;

/// What the CPU manager is told at start.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuManagerSettings {
    /// `cpuManagerPolicy`.
    pub policy: CpuManagerPolicy,
    /// `cpuManagerPolicyOptions`.
    pub options: BTreeMap<String, String>,
    /// `reservedSystemCPUs` (`--reserved-cpus`): the reserved CPUs themselves.
    pub reserved_system_cpus: Option<CpuSet>,
    /// kubeReserved + systemReserved cpu, in millicores.
    pub reserved_millicpu: u64,
    /// The root directory, where `cpu_manager_state` lives.
    pub state_dir: PathBuf,
}

/// The state behind the lock: the file's content plus what is only in memory.
pub(super) struct Inner {
    pub saved: Saved,
    /// CPUs a pod's finished init containers left for its next containers (kubelet's
    /// `cpusToReuse`), for one pod at a time.
    pub reuse: BTreeMap<String, CpuSet>,
    /// The shared pool changed since [`CpuManager::take_changes`] last asked.
    pub changed: bool,
}

/// The CPU manager: `Send + Sync`, every method takes `&self`.
pub(crate) struct CpuManager {
    pub(super) policy: CpuManagerPolicy,
    pub(super) topology: CpuTopology,
    pub(super) options: StaticOptions,
    pub(super) reserved: CpuSet,
    /// The reserved CPUs with their cores' other threads (for `full-pcpus-only`).
    pub(super) reserved_physical: CpuSet,
    file: PathBuf,
    pub(super) inner: Mutex<Inner>,
}

impl CpuManager {
    /// Sets the policy up on `topology` and restores `cpu_manager_state`; a file
    /// from another policy, with a bad checksum or that does not fit the
    /// reservation stops the start, as kubelet's does.
    pub(crate) fn new(
        settings: CpuManagerSettings,
        topology: CpuTopology,
    ) -> Result<CpuManager, CpuManagerError> {
        let file = settings.state_dir.join(state::STATE_FILE);
        let (options, reserved) = match settings.policy {
            CpuManagerPolicy::None => {
                if !settings.options.is_empty() {
                    let shown: Vec<String> = settings
                        .options
                        .iter()
                        .map(|(k, v)| format!("{k}:{v}"))
                        .collect();
                    return Err(CpuManagerError::Options(format!(
                        "None policy: received unsupported options=map[{}]",
                        shown.join(" ")
                    )));
                }
                (StaticOptions::default(), CpuSet::new())
            }
            CpuManagerPolicy::Static => {
                let options = StaticOptions::parse(&settings.options)?;
                let reserved = reserve(&settings, &topology, options)?;
                (options, reserved)
            }
        };
        let reserved_physical = topology.whole_cores_of(&reserved);
        let manager = CpuManager {
            policy: settings.policy,
            options,
            reserved_physical,
            file,
            inner: Mutex::new(Inner {
                saved: Saved {
                    policy: settings.policy.as_str().into(),
                    ..Saved::default()
                },
                reuse: BTreeMap::new(),
                changed: false,
            }),
            topology,
            reserved,
        };
        if manager.policy == CpuManagerPolicy::Static {
            info!(
                reserved = %manager.reserved,
                reserved_physical_cpus = %manager.reserved_physical,
                "static policy: reserved CPUs not available for exclusive assignment"
            );
            // kubelet's static policy makes its alignment series exist at start.
            let scope = crate::metrics::ALIGN_SCOPE_CONTAINER;
            crate::metrics::aligned_compute_series(
                scope,
                crate::metrics::ALIGNED_PHYSICAL_CPU,
                true,
            );
            crate::metrics::aligned_compute_series(
                scope,
                crate::metrics::ALIGNED_UNCORE_CACHE,
                false,
            );
        }
        manager.restore()?;
        Ok(manager)
    }

    fn state_error(&self, why: String) -> CpuManagerError {
        CpuManagerError::State {
            file: self.file.display().to_string(),
            why,
        }
    }

    /// kubelet's `restoreState` and the static policy's `validateState`.
    fn restore(&self) -> Result<(), CpuManagerError> {
        let saved = state::read(&self.file).map_err(|why| self.state_error(why.to_string()))?;
        let mut inner = self.inner.locked();
        match saved {
            None => {}
            Some(saved) if saved.policy != self.policy.as_str() => {
                return Err(self.state_error(format!(
                    "configured policy {:?} differs from state checkpoint policy {:?}",
                    self.policy.as_str(),
                    saved.policy
                )));
            }
            Some(saved) => {
                info!(default_cpu_set = %saved.default_set, file = %self.file.display(), "restored CPU manager state from checkpoint");
                inner.saved = saved;
            }
        }
        if self.policy == CpuManagerPolicy::Static {
            self.validate(&mut inner)
                .map_err(|why| CpuManagerError::InvalidState {
                    file: self.file.display().to_string(),
                    why: why.to_string(),
                })?;
        }
        self.store(&inner.saved)
            .map_err(|e| self.state_error(e.to_string()))?;
        self.publish_pools(&inner);
        Ok(())
    }

    /// The pools kubelet's gauges show: CPUs in the shared pool that exclusive CPUs
    /// come from, CPUs held exclusively, and those per NUMA node of the machine
    /// (every node, 0 included).
    pub(super) fn pool_sizes(&self, inner: &Inner) -> (usize, usize, BTreeMap<usize, usize>) {
        let exclusive = (inner.saved.assignments.values())
            .flat_map(|c| c.values())
            .fold(CpuSet::new(), |a, s| a.union(s));
        let per_numa = (self.topology.numa_nodes().into_iter())
            .map(|n| (n, self.topology.select(&exclusive, |i| i.numa, &[n]).len()))
            .collect();
        (self.available(inner).len(), exclusive.len(), per_numa)
    }

    /// Sets the CPU manager's gauges; the static policy's alone (kubelet's `none`
    /// policy leaves them at 0).
    pub(super) fn publish_pools(&self, inner: &Inner) {
        if self.policy != CpuManagerPolicy::Static {
            return;
        }
        let (shared, exclusive, per_numa) = self.pool_sizes(inner);
        crate::metrics::cpu_pools(shared, exclusive, &per_numa);
    }

    /// Every CPU the static policy hands out or shares (all but the reserved ones
    /// under `strict-cpu-reservation`).
    fn managed_cpus(&self) -> CpuSet {
        let all = self.topology.all();
        if self.options.strict_cpu_reservation {
            all.difference(&self.reserved)
        } else {
            all
        }
    }

    fn validate(&self, inner: &mut Inner) -> Result<(), StateError> {
        let all = self.managed_cpus();
        let s = &inner.saved;
        if s.default_set.is_empty() {
            if !s.assignments.is_empty() {
                return Err(StateError::EmptyDefault);
            }
            inner.saved.default_set = all.clone();
            inner.changed = true;
            info!(default_cpu_set = %all, "static policy initialized");
            return Ok(());
        }
        let shared_reserved = self.reserved.intersection(&s.default_set);
        if self.options.strict_cpu_reservation && !shared_reserved.is_empty() {
            return Err(StateError::StrictReservedShared {
                reserved: shared_reserved,
                default: s.default_set.clone(),
            });
        }
        if !self.options.strict_cpu_reservation && shared_reserved != self.reserved {
            return Err(StateError::ReservedMissing {
                reserved: self.reserved.clone(),
                default: s.default_set.clone(),
            });
        }
        let mut known = s.default_set.clone();
        for (pod, containers) in &s.assignments {
            for (name, cpus) in containers {
                if !cpus.intersection(&s.default_set).is_empty() {
                    return Err(StateError::Overlap {
                        pod: pod.clone(),
                        name: name.clone(),
                        cpus: cpus.clone(),
                        default: s.default_set.clone(),
                    });
                }
                known = known.union(cpus);
            }
        }
        if known != all {
            return Err(StateError::Mismatch { all, known });
        }
        Ok(())
    }

    fn store(&self, saved: &Saved) -> std::io::Result<()> {
        state::write(&self.file, saved)
    }

    /// Writes the state after a change; a failed write is logged and the memory
    /// kept, as kubelet's checkpoint state does.
    fn persist(&self, inner: &Inner) {
        if let Err(e) = self.store(&inner.saved) {
            error!(file = %self.file.display(), error = %e, "failed to store CPU manager state to checkpoint");
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// `none` or `static`.
    pub(crate) fn policy_name(&self) -> &'static str {
        self.policy.as_str()
    }

    /// What a container's `cpuset.cpus` must be now: its exclusive CPUs, else the
    /// shared pool; `None` under the `none` policy (the manager pins nothing).
    pub(crate) fn cpuset_for(&self, pod_uid: &str, container: &str) -> Option<CpuSet> {
        if self.policy == CpuManagerPolicy::None {
            return None;
        }
        let inner = self.lock();
        let own = inner
            .saved
            .assignments
            .get(pod_uid)
            .and_then(|c| c.get(container));
        Some(own.unwrap_or(&inner.saved.default_set).clone())
    }

    /// The container's exclusive CPUs, if it has any.
    pub(crate) fn exclusive_cpus(&self, pod_uid: &str, container: &str) -> Option<CpuSet> {
        let inner = self.lock();
        inner
            .saved
            .assignments
            .get(pod_uid)?
            .get(container)
            .cloned()
    }

    #[cfg(test)]
    /// The shared pool (kubelet's default CPU set): every managed CPU not given out
    /// exclusively; empty under `none`.
    pub(crate) fn shared_pool(&self) -> CpuSet {
        self.lock().saved.default_set.clone()
    }

    #[cfg(test)]
    /// The CPUs kept from exclusive assignment.
    pub(crate) fn reserved_cpus(&self) -> CpuSet {
        self.reserved.clone()
    }

    /// The CPUs that can be given out exclusively (the pod resources API's
    /// `GetAllocatableResources`): all but the reserved; none under `none`.
    pub(crate) fn allocatable_cpus(&self) -> CpuSet {
        match self.policy {
            CpuManagerPolicy::None => CpuSet::new(),
            CpuManagerPolicy::Static => self.topology.all().difference(&self.reserved),
        }
    }

    /// True when the shared pool changed since the last call: every shared
    /// container's `cpuset.cpus` needs the new pool.
    pub(crate) fn take_changes(&self) -> bool {
        std::mem::take(&mut self.lock().changed)
    }

    /// Forgets a container's exclusive CPUs; those no other container of its pod
    /// holds go back to the shared pool.
    pub(crate) fn remove_container(&self, pod_uid: &str, container: &str) {
        let mut inner = self.lock();
        if self.release(&mut inner, pod_uid, container) {
            self.persist(&inner);
        }
    }

    /// kubelet's `removeStaleState`: drops the assignments of containers not in
    /// `active` (pod UID, container name).
    pub(crate) fn remove_stale(&self, active: &BTreeSet<(String, String)>) {
        let mut inner = self.lock();
        let stale: Vec<(String, String)> = inner
            .saved
            .assignments
            .iter()
            .flat_map(|(pod, cs)| cs.keys().map(move |c| (pod.clone(), c.clone())))
            .filter(|key| !active.contains(key))
            .collect();
        let mut any = false;
        for (pod, container) in stale {
            info!(pod_uid = %pod, container = %container, "CPU manager: removing stale assignment of a container no longer active");
            any |= self.release(&mut inner, &pod, &container);
        }
        if any {
            self.persist(&inner);
        }
    }

    fn release(&self, inner: &mut Inner, pod_uid: &str, container: &str) -> bool {
        let Some(pod) = inner.saved.assignments.get_mut(pod_uid) else {
            return false;
        };
        let Some(cpus) = pod.remove(container) else {
            return false;
        };
        let in_use = pod.values().fold(CpuSet::new(), |a, s| a.union(s));
        if pod.is_empty() {
            inner.saved.assignments.remove(pod_uid);
        }
        let back = cpus.difference(&in_use);
        if !back.is_empty() {
            inner.saved.default_set = inner.saved.default_set.union(&back);
            inner.changed = true;
        }
        self.publish_pools(inner);
        info!(
            pod_uid = %pod_uid,
            container = %container,
            released = %back,
            "static policy: released exclusive CPUs of a removed container"
        );
        info!(cpuset = %inner.saved.default_set, "shared pool now");
        true
    }

    /// kubelet's `takeByTopology` with the configured options.
    pub(super) fn take_by_topology(
        &self,
        available: &CpuSet,
        n: usize,
    ) -> Result<CpuSet, TakeError> {
        take(&self.topology, self.options, available, n)
    }

    /// kubelet's `allocateCPUs`: the CPUs on `affinity`'s NUMA nodes first, the rest
    /// from anywhere; `reusable` are a finished init container's CPUs.
    pub(super) fn allocate_cpus(
        &self,
        inner: &Inner,
        n: usize,
        affinity: Option<NumaMask>,
        reusable: &CpuSet,
    ) -> Result<CpuSet, TakeError> {
        let allocatable = self.available(inner).union(reusable);
        let mut result = CpuSet::new();
        if let Some(mask) = affinity {
            let nodes: Vec<usize> = mask.nodes().collect();
            let aligned = self.topology.select(&allocatable, |i| i.numa, &nodes);
            let k = n.min(aligned.len());
            result = self.take_by_topology(&aligned, k)?;
        }
        if n > result.len() {
            let rest = self.take_by_topology(&allocatable.difference(&result), n - result.len())?;
            result = result.union(&rest);
        }
        Ok(result)
    }

    /// The shared pool minus the reserved CPUs: what exclusive CPUs come from.
    pub(super) fn available(&self, inner: &Inner) -> CpuSet {
        inner.saved.default_set.difference(&self.reserved)
    }

    /// Records an allocation and writes it.
    pub(super) fn assign(&self, inner: &mut Inner, pod: &Pod, container: &Container, cpus: CpuSet) {
        let uid = pod_uid(pod);
        inner.saved.default_set = inner.saved.default_set.difference(&cpus);
        inner.changed = true;
        inner
            .saved
            .assignments
            .entry(uid.clone())
            .or_default()
            .insert(container.name.clone(), cpus.clone());
        update_reuse(inner, pod, container, &cpus);
        self.persist(inner);
        self.publish_pools(inner);
        info!(
            pod = %pod_ref(pod),
            pod_uid = %uid,
            container = %container.name,
            cpuset = %cpus,
            "static policy: allocated exclusive CPUs"
        );
        info!(cpuset = %inner.saved.default_set, "shared pool now");
    }
}

/// The reserved CPUs: `reservedSystemCPUs` as given, else ceil(reserved cpu) CPUs
/// taken by topology from the whole machine (kubelet's `NewStaticPolicy`).
fn reserve(
    settings: &CpuManagerSettings,
    topology: &CpuTopology,
    options: StaticOptions,
) -> Result<CpuSet, CpuManagerError> {
    if let Some(given) = settings
        .reserved_system_cpus
        .as_ref()
        .filter(|s| !s.is_empty())
    {
        if !given.is_subset_of(&topology.all()) {
            return Err(CpuManagerError::Reservation(format!(
                "[cpumanager] reserved CPUs {given} are not a subset of the online CPUs {}",
                topology.all()
            )));
        }
        return Ok(given.clone());
    }
    if settings.reserved_millicpu == 0 {
        return Err(CpuManagerError::Reservation(
            "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero".into(),
        ));
    }
    let n = settings.reserved_millicpu.div_ceil(1000) as usize;
    let got = take(topology, options, &topology.all(), n).unwrap_or_default();
    if got.len() != n {
        return Err(CpuManagerError::Reservation(format!(
            "[cpumanager] unable to reserve the required amount of CPUs (size of {got} did not equal {n})"
        )));
    }
    Ok(got)
}

fn take(
    topology: &CpuTopology,
    options: StaticOptions,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, TakeError> {
    if options.distribute_across_numa {
        let group = if options.full_pcpus_only {
            topology.cpus_per_core()
        } else {
            1
        };
        return assign::take_distributed(topology, available, n, group);
    }
    assign::take_packed(topology, available, n, options.prefer_uncore_cache)
}

/// kubelet's `updateCPUsToReuse`: a finished (non-restartable) init container's CPUs
/// may go to the pod's next containers; an app container or a sidecar takes its
/// CPUs out of that pool. Only the latest pod's pool is kept.
fn update_reuse(inner: &mut Inner, pod: &Pod, container: &Container, cpus: &CpuSet) {
    let uid = pod_uid(pod);
    inner.reuse.retain(|k, _| *k == uid);
    let pool = inner.reuse.entry(uid).or_default();
    let init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|inits| inits.iter().find(|c| c.name == container.name));
    *pool = match init {
        Some(c) if c.restart_policy.as_deref() != Some("Always") => pool.union(cpus),
        _ => pool.difference(cpus),
    };
}

/// Marks a container already assigned as seen (kubelet's path for a container
/// present in the state): its CPUs enter or leave the reuse pool.
pub(super) fn note_existing(inner: &mut Inner, pod: &Pod, container: &Container, cpus: &CpuSet) {
    update_reuse(inner, pod, container, cpus);
}

pub(super) fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

pub(super) fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}
