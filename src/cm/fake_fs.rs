//! An in-memory [`CgroupFs`] for unit tests of the manager and the sync loop: a map of
//! cgroup paths to their limits, and the processes a test puts in them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::driver::CgroupDriver;
use super::fs::QosFile;
use super::fs::{CgroupError, CgroupFs};
use super::manager::{CmConfig, ContainerManager};
use super::name::CgroupName;
use super::resources::{PodCgroupSettings, ResourceConfig};

/// A container manager over a fresh fake tree, cgroupfs driver, root `/root`, every
/// pod cgroup with `pids.max` 50, `kubepods` limited to 2 CPUs and 1 GiB.
pub(crate) fn fake_manager(per_qos: bool) -> (ContainerManager, Arc<FakeCgroupFs>) {
    let fs = Arc::new(FakeCgroupFs::default());
    let cfg = CmConfig {
        driver: CgroupDriver::Cgroupfs,
        cgroup_root: CgroupName(vec!["root".into()]),
        cgroups_per_qos: per_qos,
        pod: PodCgroupSettings {
            cpu_cfs_quota: true,
            cpu_period_us: 100_000,
            pod_pids_limit: 50,
        },
        kubepods: ResourceConfig {
            cpu_shares: Some(2048),
            memory_limit: Some(1 << 30),
            ..ResourceConfig::default()
        },
    };
    (ContainerManager::new(cfg, fs.clone()).unwrap(), fs)
}

#[derive(Debug, Default)]
pub(crate) struct FakeCgroupFs {
    /// Path → (limits as last written, processes inside).
    cgroups: Mutex<BTreeMap<String, (ResourceConfig, Vec<i32>)>>,
    /// The QoS control files written, and those the pretend kernel does not offer.
    qos_files: Mutex<FakeQosFiles>,
    /// Memory each cgroup charges (0 unless a test sets it).
    usage: Mutex<BTreeMap<String, u64>>,
}

#[derive(Debug, Default)]
struct FakeQosFiles {
    values: BTreeMap<(String, QosFile), String>,
    withheld: std::collections::BTreeSet<QosFile>,
    /// v1's rule: a cgroup's CPUs lie within its parent's and hold its children's.
    v1_cpusets: bool,
}

impl FakeQosFiles {
    fn cpus(&self, path: &str) -> Option<Vec<usize>> {
        let text = self.values.get(&(path.to_string(), QosFile::CpusetCpus))?;
        crate::cm::parse_cpu_list(text)
            .ok()
            .filter(|c| !c.is_empty())
    }

    /// Whether v1 takes `value` as `path`'s CPUs.
    fn v1_allows(&self, path: &str, value: &str) -> bool {
        let Ok(new) = crate::cm::parse_cpu_list(value) else {
            return false;
        };
        let within = |outer: &[usize], inner: &[usize]| inner.iter().all(|c| outer.contains(c));
        let parent_ok = path
            .rsplit_once('/')
            .and_then(|(parent, _)| self.cpus(parent))
            .is_none_or(|p| within(&p, &new));
        let below = format!("{path}/");
        let is_child = |p: &str| {
            p.strip_prefix(&below)
                .is_some_and(|rest| !rest.contains('/'))
        };
        let children_ok = self
            .values
            .keys()
            .filter(|(p, f)| *f == QosFile::CpusetCpus && is_child(p))
            .all(|(p, _)| self.cpus(p).is_none_or(|c| within(&new, &c)));
        parent_ok && children_ok
    }
}

/// The QoS control files (koordlet's cpuset and memory QoS files).
impl FakeCgroupFs {
    fn qos(&self) -> std::sync::MutexGuard<'_, FakeQosFiles> {
        self.qos_files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `file` one the kernel does not offer (v1 without Anolis' memory files).
    pub(crate) fn withhold(&self, file: QosFile) {
        self.qos().withheld.insert(file);
    }

    /// Refuses cpusets as cgroup v1 does: outside the parent's, or not holding a
    /// child's (so the order of writes matters).
    pub(crate) fn enforce_v1_cpusets(&self) {
        self.qos().v1_cpusets = true;
    }

    /// What `file` of `path` holds (None: never written).
    pub(crate) fn qos_file(&self, path: &str, file: QosFile) -> Option<String> {
        self.qos().values.get(&(path.to_string(), file)).cloned()
    }
}

impl FakeCgroupFs {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (ResourceConfig, Vec<i32>)>> {
        self.cgroups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every cgroup path, sorted.
    pub(crate) fn paths(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Removes a cgroup and everything below, as something outside oxlet might.
    pub(crate) fn remove_from_outside(&self, path: &str) {
        self.map()
            .retain(|p, _| p != path && !p.starts_with(&format!("{path}/")));
    }

    /// Makes `path` charge `bytes` of memory.
    pub(crate) fn set_memory_usage(&self, path: &str, bytes: u64) {
        let mut usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        usage.insert(path.to_string(), bytes);
    }

    /// Puts a (pretend) process into `path`.
    pub(crate) fn add_proc(&self, path: &str, pid: i32) {
        if let Some(c) = self.map().get_mut(path) {
            c.1.push(pid);
        }
    }

    fn missing(path: &str, op: &'static str) -> CgroupError {
        CgroupError {
            op,
            path: PathBuf::from(path),
            error: std::io::ErrorKind::NotFound.into(),
        }
    }
}

/// `path`'s parents, outermost first.
fn parents(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// Only the values given overwrite what is set.
fn merge(into: &mut ResourceConfig, res: &ResourceConfig) {
    into.cpu_shares = res.cpu_shares.or(into.cpu_shares);
    into.cpu_quota = res.cpu_quota.or(into.cpu_quota);
    into.cpu_period = res.cpu_period.or(into.cpu_period);
    into.memory_limit = res.memory_limit.or(into.memory_limit);
    into.pids_limit = res.pids_limit.or(into.pids_limit);
}

impl CgroupFs for FakeCgroupFs {
    fn create(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        let mut map = self.map();
        for p in parents(path) {
            map.entry(p.to_string()).or_default();
        }
        merge(&mut map.entry(path.to_string()).or_default().0, res);
        Ok(())
    }

    fn update(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        let mut map = self.map();
        let c = map
            .get_mut(path)
            .ok_or_else(|| Self::missing(path, "update"))?;
        merge(&mut c.0, res);
        Ok(())
    }

    fn exists(&self, path: &str) -> bool {
        self.map().contains_key(path)
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        let below = format!("{path}/");
        let mut map = self.map();
        let busy = map
            .iter()
            .any(|(p, c)| (p == path || p.starts_with(&below)) && !c.1.is_empty());
        if busy {
            return Err(CgroupError {
                op: "remove",
                path: PathBuf::from(path),
                error: std::io::Error::from_raw_os_error(16),
            });
        }
        map.retain(|p, _| p != path && !p.starts_with(&below));
        Ok(())
    }

    fn children(&self, path: &str) -> Result<Vec<String>, CgroupError> {
        let map = self.map();
        if !map.contains_key(path) {
            return Err(Self::missing(path, "list"));
        }
        let below = format!("{path}/");
        Ok(map
            .keys()
            .filter_map(|p| p.strip_prefix(&below))
            .filter(|rest| !rest.contains('/'))
            .map(str::to_string)
            .collect())
    }

    fn procs(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        let below = format!("{path}/");
        Ok(self
            .map()
            .iter()
            .filter(|(p, _)| *p == path || p.starts_with(&below))
            .flat_map(|(_, c)| c.1.clone())
            .collect())
    }

    fn resources(&self, path: &str) -> Result<ResourceConfig, CgroupError> {
        self.map()
            .get(path)
            .map(|c| c.0)
            .ok_or_else(|| Self::missing(path, "read"))
    }

    fn memory_usage(&self, path: &str) -> Result<u64, CgroupError> {
        if !self.exists(path) {
            return Err(Self::missing(path, "read"));
        }
        let usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(usage.get(path).copied().unwrap_or(0))
    }

    fn read_qos_file(&self, path: &str, file: QosFile) -> Result<Option<String>, CgroupError> {
        if !self.exists(path) {
            return Err(Self::missing(path, "read"));
        }
        let q = self.qos();
        if q.withheld.contains(&file) {
            return Ok(None);
        }
        // A cgroup whose file was never written reads as empty (v2's `cpuset.cpus`).
        Ok(Some(
            q.values
                .get(&(path.to_string(), file))
                .cloned()
                .unwrap_or_default(),
        ))
    }

    fn write_qos_file(&self, path: &str, file: QosFile, value: &str) -> Result<(), CgroupError> {
        if !self.exists(path) {
            return Err(Self::missing(path, "write"));
        }
        let mut q = self.qos();
        if q.withheld.contains(&file) {
            return Err(CgroupError {
                op: "write",
                path: PathBuf::from(path).join(file.name()),
                error: std::io::ErrorKind::Unsupported.into(),
            });
        }
        if file == QosFile::CpusetCpus && q.v1_cpusets && !q.v1_allows(path, value) {
            return Err(CgroupError {
                op: "write",
                path: PathBuf::from(path).join(file.name()),
                error: std::io::Error::from_raw_os_error(22),
            });
        }
        q.values.insert((path.to_string(), file), value.to_string());
        Ok(())
    }
}
