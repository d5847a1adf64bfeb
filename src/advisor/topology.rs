//! The node's CPU and NUMA topology, as koordlet's `nodeinfo` collector keeps it in the
//! metric cache's key-value store (`node_cpu_info`, `node_numa_info`): each online
//! CPU with its core, socket, NUMA node and L3 cache, and each NUMA node's CPUs and
//! memory. koordlet runs `lscpu -e`; oxlet reads the same facts from sysfs, where
//! `lscpu` finds them. A kernel without NUMA (no `/sys/devices/system/node`) puts every
//! CPU on node 0, as `lscpu` does.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sysfs::{CpuDir, NodeDir, SysfsError};

/// The key-value store's keys (koordlet's).
pub(crate) const CPU_INFO_KEY: &str = "node_cpu_info";
pub(crate) const NUMA_INFO_KEY: &str = "node_numa_info";
/// CPUs described at most (past this, the machine is not one oxlet is sized for).
const MAX_CPUS: usize = 1024;

/// One logical CPU (koordlet's `ProcessorInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Processor {
    #[serde(rename = "cpu")]
    pub cpu_id: usize,
    #[serde(rename = "core")]
    pub core_id: i64,
    #[serde(rename = "socket")]
    pub socket_id: i64,
    #[serde(rename = "node")]
    pub node_id: i64,
    /// The L3 cache's id, when the kernel says.
    #[serde(rename = "l3", skip_serializing_if = "Option::is_none")]
    pub l3_id: Option<i64>,
}

/// Counts and groupings (koordlet's `CPUTotalInfo`), keyed by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CpuTotals {
    #[serde(rename = "numberCPUs")]
    pub number_cpus: usize,
    pub number_cores: usize,
    pub number_sockets: usize,
    pub number_nodes: usize,
    pub node_to_cpu: BTreeMap<i64, Vec<usize>>,
    pub socket_to_cpu: BTreeMap<i64, Vec<usize>>,
}

/// koordlet's `LocalCPUInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeCpuInfo {
    pub processor_infos: Vec<Processor>,
    pub total_info: CpuTotals,
}

impl NodeCpuInfo {
    /// The CPUs, sorted.
    #[cfg(test)]
    pub(crate) fn cpus(&self) -> Vec<usize> {
        self.processor_infos.iter().map(|p| p.cpu_id).collect()
    }
}

/// One NUMA node's CPUs and memory (koordlet's `NUMAInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NumaNode {
    pub numa_node_id: i64,
    pub cpus: Vec<usize>,
    pub mem_total_bytes: Option<u64>,
    pub mem_free_bytes: Option<u64>,
}

/// koordlet's `NodeNUMAInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeNumaInfo {
    pub numa_infos: Vec<NumaNode>,
}

fn number(read: Result<u64, SysfsError>) -> Option<i64> {
    i64::try_from(read.ok()?).ok()
}

/// Reads the topology under `sys` (`/sys` on a node).
pub(crate) fn read(sys: &Path) -> Result<(NodeCpuInfo, NodeNumaInfo), SysfsError> {
    let cpu_dir = CpuDir::under(sys);
    let mut cpus = cpu_dir.online()?;
    cpus.truncate(MAX_CPUS);
    let nodes = numa_nodes(&NodeDir::under(sys));
    let node_of = |cpu: usize| {
        nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map_or(0, |n| n.numa_node_id)
    };
    let processors: Vec<Processor> = cpus
        .iter()
        .map(|&cpu| {
            let dir = cpu_dir.cpu(cpu);
            Processor {
                cpu_id: cpu,
                core_id: number(dir.core_id()).unwrap_or(cpu as i64),
                socket_id: number(dir.package_id()).unwrap_or(0),
                node_id: node_of(cpu),
                l3_id: number(dir.l3_id()),
            }
        })
        .collect();
    let mut totals = CpuTotals {
        number_cpus: processors.len(),
        ..CpuTotals::default()
    };
    let mut cores = std::collections::BTreeSet::new();
    for p in &processors {
        cores.insert((p.socket_id, p.core_id));
        totals
            .node_to_cpu
            .entry(p.node_id)
            .or_default()
            .push(p.cpu_id);
        totals
            .socket_to_cpu
            .entry(p.socket_id)
            .or_default()
            .push(p.cpu_id);
    }
    totals.number_cores = cores.len();
    totals.number_sockets = totals.socket_to_cpu.len();
    totals.number_nodes = totals.node_to_cpu.len();
    let numa = if nodes.is_empty() {
        vec![NumaNode {
            numa_node_id: 0,
            cpus: cpus.clone(),
            mem_total_bytes: None,
            mem_free_bytes: None,
        }]
    } else {
        nodes
    };
    Ok((
        NodeCpuInfo {
            processor_infos: processors,
            total_info: totals,
        },
        NodeNumaInfo { numa_infos: numa },
    ))
}

/// The NUMA nodes of `dir`, each with its `cpulist` (none when it cannot be read)
/// and its `meminfo`'s `MemTotal`/`MemFree`; none when the directory cannot be read.
fn numa_nodes(dir: &NodeDir) -> Vec<NumaNode> {
    let Ok(ids) = dir.node_ids() else {
        return Vec::new();
    };
    (ids.into_iter().take(MAX_CPUS))
        .map(|id| {
            let node = dir.node(id);
            let meminfo = node.meminfo().unwrap_or_default();
            NumaNode {
                numa_node_id: id as i64,
                cpus: node.cpus().unwrap_or_default(),
                mem_total_bytes: meminfo.total_kib.map(|kb| kb * 1024),
                mem_free_bytes: meminfo.free_kib.map(|kb| kb * 1024),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn two_sockets_of_two_cores_with_hyperthreads_on_two_numa_nodes() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write(s, "devices/system/cpu/online", "0-7\n");
        for cpu in 0..8 {
            let (socket, core) = (cpu / 4, (cpu % 4) / 2);
            write(
                s,
                &format!("devices/system/cpu/cpu{cpu}/topology/core_id"),
                &format!("{core}\n"),
            );
            write(
                s,
                &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                &format!("{socket}\n"),
            );
            write(
                s,
                &format!("devices/system/cpu/cpu{cpu}/cache/index3/id"),
                &format!("{socket}\n"),
            );
        }
        write(s, "devices/system/node/node0/cpulist", "0-3\n");
        write(s, "devices/system/node/node1/cpulist", "4-7\n");
        write(
            s,
            "devices/system/node/node1/meminfo",
            "Node 1 MemTotal:       16384 kB\nNode 1 MemFree:        8192 kB\n",
        );
        let (cpu, numa) = read(s).unwrap();
        assert_eq!(cpu.cpus(), (0..8).collect::<Vec<_>>());
        let t = &cpu.total_info;
        assert_eq!(
            (
                t.number_cpus,
                t.number_cores,
                t.number_sockets,
                t.number_nodes
            ),
            (8, 4, 2, 2)
        );
        assert_eq!(t.node_to_cpu[&1], [4, 5, 6, 7]);
        assert_eq!(cpu.processor_infos[5].l3_id, Some(1));
        assert_eq!(numa.numa_infos.len(), 2);
        assert_eq!(numa.numa_infos[1].mem_total_bytes, Some(16 << 20));
        assert_eq!(numa.numa_infos[1].mem_free_bytes, Some(8 << 20));
        // koordlet's JSON names.
        let json = serde_json::to_value(&cpu).unwrap();
        assert_eq!(json["processorInfos"][5]["socket"], 1);
        assert_eq!(json["totalInfo"]["numberCPUs"], 8);
    }

    #[test]
    fn without_numa_every_cpu_is_on_node_zero() {
        let sys = tempfile::tempdir().unwrap();
        write(sys.path(), "devices/system/cpu/online", "0-1\n");
        let (cpu, numa) = read(sys.path()).unwrap();
        assert!(cpu.processor_infos.iter().all(|p| p.node_id == 0));
        assert_eq!(numa.numa_infos[0].cpus, [0, 1]);
        // A corrupt online list is the file's error, named.
        write(sys.path(), "devices/system/cpu/online", "0-x\n");
        let e = read(sys.path()).unwrap_err().to_string();
        assert!(e.contains("online"), "{e}");
    }
}
