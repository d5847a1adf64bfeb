//! The machine's CPU layout (kubelet's `topology.CPUTopology`, which kubelet builds
//! from cAdvisor's machine info): which socket, NUMA node, core and L3 (uncore) cache
//! each online logical CPU belongs to, read from sysfs under a root a test can move.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{CpuManagerError, CpuSet};
use crate::sysfs::{CpuDir, NodeDir, SysfsError};

/// Where one logical CPU sits. `core` is the lowest CPU id among the core's threads,
/// so core ids are unique across sockets (kubelet's `getUniqueCoreID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuInfo {
    pub numa: usize,
    pub socket: usize,
    pub core: usize,
    pub uncore_cache: usize,
}

/// The online CPUs and where each sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuTopology {
    pub cpus: BTreeMap<usize, CpuInfo>,
    pub num_sockets: usize,
    pub num_numa_nodes: usize,
    pub num_cores: usize,
    pub num_uncore_caches: usize,
}

impl CpuTopology {
    /// Reads the layout under `sys_root` (the host's `/sys`): the online CPUs, each
    /// one's package and thread siblings, the NUMA nodes' CPU lists and the L3 cache
    /// id; without NUMA nodes every CPU is on node 0, without an L3 id the socket is
    /// the uncore cache, as kubelet does.
    pub(crate) fn discover(sys_root: &Path) -> Result<Self, CpuManagerError> {
        let cpu_dir = CpuDir::under(sys_root);
        let online: CpuSet = (cpu_dir.online())
            .map_err(|e| topology_error(e, "online CPUs"))?
            .into_iter()
            .collect();
        let numa_of = numa_nodes(&NodeDir::under(sys_root))?;
        let mut cpus = BTreeMap::new();
        for cpu in online.iter() {
            let dir = cpu_dir.cpu(cpu);
            let socket = index(dir.package_id())?;
            let siblings: CpuSet = (dir.thread_siblings())
                .map_err(|e| topology_error(e, &format!("cpu{cpu} siblings")))?
                .into_iter()
                .collect();
            let core = siblings.intersection(&online).iter().next().unwrap_or(cpu);
            let uncore_cache = match dir.l3_id() {
                Err(e) if e.is_missing() => socket,
                l3 => index(l3)?,
            };
            let numa = numa_of.get(&cpu).copied().unwrap_or(0);
            cpus.insert(
                cpu,
                CpuInfo {
                    numa,
                    socket,
                    core,
                    uncore_cache,
                },
            );
        }
        Self::from_cpus(cpus)
    }

    /// A topology from its CPUs (what discovery and the tests build).
    pub(crate) fn from_cpus(cpus: BTreeMap<usize, CpuInfo>) -> Result<Self, CpuManagerError> {
        if cpus.is_empty() {
            return Err(CpuManagerError::Topology("no online CPU".into()));
        }
        let count = |f: fn(&CpuInfo) -> usize| cpus.values().map(f).collect::<BTreeSet<_>>().len();
        Ok(Self {
            num_sockets: count(|c| c.socket),
            num_numa_nodes: count(|c| c.numa),
            num_cores: count(|c| c.core),
            num_uncore_caches: count(|c| c.uncore_cache),
            cpus,
        })
    }

    pub(crate) fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Threads per core (kubelet's `CPUsPerCore`), 1 without SMT.
    pub(crate) fn cpus_per_core(&self) -> usize {
        (self.num_cpus() / self.num_cores).max(1)
    }

    pub(crate) fn cpus_per_uncore_cache(&self) -> usize {
        (self.num_cpus() / self.num_uncore_caches).max(1)
    }

    /// Every online CPU.
    pub(crate) fn all(&self) -> CpuSet {
        self.cpus.keys().copied().collect()
    }

    /// The NUMA node ids, ascending.
    pub(crate) fn numa_nodes(&self) -> Vec<usize> {
        let s: BTreeSet<usize> = self.cpus.values().map(|c| c.numa).collect();
        s.into_iter().collect()
    }

    /// The CPUs of `set` whose `key` is in `ids`.
    pub(crate) fn select(&self, set: &CpuSet, key: fn(&CpuInfo) -> usize, ids: &[usize]) -> CpuSet {
        set.filter(|c| self.cpus.get(&c).is_some_and(|i| ids.contains(&key(i))))
    }

    /// The distinct `key` values of the CPUs of `set`, ascending.
    pub(crate) fn keys_of(&self, set: &CpuSet, key: fn(&CpuInfo) -> usize) -> Vec<usize> {
        let s: BTreeSet<usize> = set
            .iter()
            .filter_map(|c| self.cpus.get(&c))
            .map(key)
            .collect();
        s.into_iter().collect()
    }

    /// Every CPU of the cores the CPUs of `set` are on.
    pub(crate) fn whole_cores_of(&self, set: &CpuSet) -> CpuSet {
        let cores = self.keys_of(set, |i| i.core);
        self.select(&self.all(), |i| i.core, &cores)
    }
}

/// A sysfs error in the CPU manager's words: a bad CPU list is said with `what`.
fn topology_error(e: SysfsError, what: &str) -> CpuManagerError {
    match e {
        SysfsError::CpuList { error, .. } => CpuManagerError::Topology(format!("{what}: {error}")),
        e => CpuManagerError::Topology(e.to_string()),
    }
}

/// An id read from sysfs, as an index.
fn index(read: Result<u64, SysfsError>) -> Result<usize, CpuManagerError> {
    read.map(|id| id as usize)
        .map_err(|e| CpuManagerError::Topology(e.to_string()))
}

/// CPU id to NUMA node, from each `nodeN/cpulist`; empty without the node directory.
fn numa_nodes(dir: &NodeDir) -> Result<BTreeMap<usize, usize>, CpuManagerError> {
    let mut out = BTreeMap::new();
    let Ok(ids) = dir.node_ids() else {
        return Ok(out);
    };
    for id in ids {
        let list =
            (dir.node(id).cpus()).map_err(|e| topology_error(e, &format!("node{id} cpulist")))?;
        for cpu in list {
            out.insert(cpu, id);
        }
    }
    Ok(out)
}

/// Fake sysfs trees for the room's tests.
#[cfg(test)]
pub(crate) mod fake {
    use std::path::Path;

    /// One CPU of a fake machine: (id, socket, numa, core siblings as a list, L3 id).
    pub(crate) struct FakeCpu<'a> {
        pub id: usize,
        pub socket: usize,
        pub numa: usize,
        pub siblings: &'a str,
        pub l3: Option<usize>,
    }

    /// Writes a sysfs tree for `cpus` under `root`, every CPU online.
    pub(crate) fn write_sysfs(root: &Path, cpus: &[FakeCpu<'_>]) {
        let cpu_dir = root.join("devices/system/cpu");
        std::fs::create_dir_all(&cpu_dir).unwrap();
        let ids: Vec<usize> = cpus.iter().map(|c| c.id).collect();
        std::fs::write(
            cpu_dir.join("online"),
            crate::cm::format_cpu_list(&ids) + "\n",
        )
        .unwrap();
        let mut nodes: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for c in cpus {
            let t = cpu_dir.join(format!("cpu{}/topology", c.id));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("physical_package_id"), format!("{}\n", c.socket)).unwrap();
            std::fs::write(t.join("die_id"), "0\n").unwrap();
            std::fs::write(t.join("core_id"), format!("{}\n", c.id)).unwrap();
            std::fs::write(t.join("thread_siblings_list"), format!("{}\n", c.siblings)).unwrap();
            if let Some(l3) = c.l3 {
                let cache = cpu_dir.join(format!("cpu{}/cache/index3", c.id));
                std::fs::create_dir_all(&cache).unwrap();
                std::fs::write(cache.join("id"), format!("{l3}\n")).unwrap();
            }
            nodes.entry(c.numa).or_default().push(c.id);
        }
        for (n, ids) in nodes {
            let d = root.join(format!("devices/system/node/node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), crate::cm::format_cpu_list(&ids) + "\n").unwrap();
        }
    }

    /// Two sockets, one NUMA node each, 8 cores of 2 threads, numbered as Linux does:
    /// core n (0-7) has threads n and n+8, so socket 0 (NUMA node 0) is CPUs
    /// 0-3,8-11 and socket 1 (NUMA node 1) is 4-7,12-15.
    pub(crate) fn two_socket_ht(root: &Path) {
        let mut cpus = Vec::new();
        let lists: Vec<String> = (0..8).map(|c| format!("{},{}", c, c + 8)).collect();
        for id in 0..16usize {
            let core = id % 8;
            let socket = core / 4;
            cpus.push((id, socket, core));
        }
        let fakes: Vec<FakeCpu<'_>> = cpus
            .iter()
            .map(|&(id, socket, core)| FakeCpu {
                id,
                socket,
                numa: socket,
                siblings: &lists[core],
                l3: None,
            })
            .collect();
        write_sysfs(root, &fakes);
    }
}

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;

    #[test]
    fn a_two_socket_smt_machine_is_read_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        two_socket_ht(dir.path());
        let t = CpuTopology::discover(dir.path()).unwrap();
        assert_eq!(t.num_cpus(), 16);
        assert_eq!(t.num_sockets, 2);
        assert_eq!(t.num_numa_nodes, 2);
        assert_eq!(t.num_cores, 8);
        assert_eq!(t.cpus_per_core(), 2);
        assert_eq!(t.cpus[&9].core, 1);
        assert_eq!(t.cpus[&12].socket, 1);
        assert_eq!(t.cpus[&12].numa, 1);
        // No L3 id: the socket stands for the uncore cache.
        assert_eq!(t.cpus[&12].uncore_cache, 1);
        assert_eq!(
            t.whole_cores_of(&CpuSet::parse("1").unwrap()).to_string(),
            "1,9"
        );
    }

    #[test]
    fn without_numa_nodes_every_cpu_is_on_node_zero_and_l3_ids_are_read() {
        let dir = tempfile::tempdir().unwrap();
        write_sysfs(
            dir.path(),
            &[
                FakeCpu {
                    id: 0,
                    socket: 0,
                    numa: 0,
                    siblings: "0",
                    l3: Some(7),
                },
                FakeCpu {
                    id: 1,
                    socket: 0,
                    numa: 0,
                    siblings: "1",
                    l3: Some(7),
                },
            ],
        );
        std::fs::remove_dir_all(dir.path().join("devices/system/node")).unwrap();
        let t = CpuTopology::discover(dir.path()).unwrap();
        assert_eq!(t.numa_nodes(), [0]);
        assert_eq!(t.cpus[&1].uncore_cache, 7);
        assert_eq!(t.cpus_per_core(), 1);
    }
}
