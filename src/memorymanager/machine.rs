//! What the memory manager starts from: each NUMA node's memory and huge pages (read
//! from sysfs, as cadvisor reads them for kubelet) and the memory reserved per node
//! (`--reserved-memory` / `reservedMemory`), checked against node allocatable's
//! reservation as kubelet checks it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::sysfs::{NodeDir, SysNode, SysfsError};

/// Bytes reserved per NUMA node and resource (`memory`, `hugepages-2Mi`, …).
pub(crate) type Reserved = BTreeMap<usize, BTreeMap<String, u64>>;

/// One NUMA node's memory: its total and its huge pages by page size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeMemory {
    /// `MemTotal` of the node, in bytes.
    pub memory: u64,
    /// Page size in KiB → number of pages (`nr_hugepages`).
    pub hugepages: BTreeMap<u64, u64>,
}

/// The machine's memory by NUMA node (what kubelet reads from cadvisor's topology).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NumaMemory {
    pub nodes: BTreeMap<usize, NodeMemory>,
}

impl NumaMemory {
    /// Reads `<root>/nodeN/meminfo` (`Node N MemTotal: X kB`) and
    /// `<root>/nodeN/hugepages/hugepages-<size>kB/nr_hugepages`; root is normally
    /// `/sys/devices/system/node`.
    pub(crate) fn from_sysfs(root: &Path) -> std::io::Result<Self> {
        let mut out = Self::default();
        let dir = NodeDir::at(root);
        for id in dir.node_ids().map_err(SysfsError::into_io)? {
            out.nodes.insert(id, read_node(&dir.node(id))?);
        }
        if out.nodes.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no NUMA node under {}", root.display()),
            ));
        }
        Ok(out)
    }
}

/// A node file's error as the memory manager says it: a missing file named so.
fn file_error(e: SysfsError) -> std::io::Error {
    if e.is_missing() {
        let msg = format!("{} is missing", e.path());
        return std::io::Error::new(std::io::ErrorKind::NotFound, msg);
    }
    e.into_io()
}

fn read_node(node: &SysNode) -> std::io::Result<NodeMemory> {
    let kib = node
        .meminfo()
        .map_err(file_error)?
        .total_kib
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no MemTotal in {}", node.dir().join("meminfo").display()),
            )
        })?;
    let mut node_memory = NodeMemory {
        memory: kib * 1024,
        hugepages: BTreeMap::new(),
    };
    for size in node.hugepage_sizes().map_err(SysfsError::into_io)? {
        let count = node.hugepages(size).map_err(|e| match e {
            SysfsError::NotANumber { .. } => std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad nr_hugepages for {size}kB"),
            ),
            e => file_error(e),
        })?;
        node_memory.hugepages.insert(size, count);
    }
    Ok(node_memory)
}

/// The resource name of a huge page size (kubelet's `HugePageResourceName`):
/// `hugepages-2Mi` for 2048 KiB pages.
pub(super) fn hugepage_resource(page_kib: u64) -> String {
    let bytes = i64::try_from(page_kib.saturating_mul(1024)).unwrap_or(i64::MAX);
    format!("hugepages-{}", crate::quantity::canonical(bytes, true))
}

fn is_memory_resource(name: &str) -> bool {
    name == "memory" || name.starts_with("hugepages-")
}

/// kubelet's `validateReservedMemory`: every reserved NUMA node exists, and for
/// Why `reservedMemory` does not fit the machine or node allocatable (kubelet's words;
/// the amounts and kind already in Go's quotes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ReservedError {
    #[error(
        "the reserved memory configuration references a NUMA node {0} that does not exist on this machine"
    )]
    NoSuchNode(usize),
    #[error(
        "the total amount {total} of type {kind} is not equal to the value {allocatable} determined by Node Allocatable feature"
    )]
    Total {
        total: String,
        kind: String,
        allocatable: String,
    },
}

/// `memory` and each huge page size the reservations over all nodes add up to what
/// node allocatable reserves (kube-reserved + system-reserved + the hard eviction
/// threshold), `node_reserved`.
pub(super) fn validate_reserved(
    machine: &NumaMemory,
    reserved: &Reserved,
    node_reserved: &BTreeMap<String, u64>,
) -> Result<(), ReservedError> {
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for (node, limits) in reserved {
        if !machine.nodes.contains_key(node) {
            return Err(ReservedError::NoSuchNode(*node));
        }
        for (name, bytes) in limits {
            *totals.entry(name).or_default() += bytes;
        }
    }
    let mut kinds: Vec<&str> = totals.keys().copied().collect();
    kinds.extend(
        node_reserved
            .keys()
            .map(String::as_str)
            .filter(|n| is_memory_resource(n)),
    );
    kinds.sort_unstable();
    kinds.dedup();
    for kind in kinds {
        let total = totals.get(kind).copied().unwrap_or(0);
        let allocatable = node_reserved.get(kind).copied().unwrap_or(0);
        if total != allocatable {
            let q = |b: u64| crate::quantity::canonical(i64::try_from(b).unwrap_or(i64::MAX), true);
            return Err(ReservedError::Total {
                total: crate::klog::go_quote(&q(total)),
                kind: crate::klog::go_quote(kind),
                allocatable: crate::klog::go_quote(&q(allocatable)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_memory_and_huge_pages_come_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node0");
        std::fs::create_dir_all(node.join("hugepages/hugepages-2048kB")).unwrap();
        std::fs::write(
            node.join("meminfo"),
            "Node 0 MemTotal:       16384 kB\nNode 0 MemFree:        100 kB\n",
        )
        .unwrap();
        std::fs::write(node.join("hugepages/hugepages-2048kB/nr_hugepages"), "4\n").unwrap();
        let m = NumaMemory::from_sysfs(dir.path()).unwrap();
        assert_eq!(m.nodes[&0].memory, 16384 * 1024);
        assert_eq!(m.nodes[&0].hugepages[&2048], 4);
        assert_eq!(hugepage_resource(2048), "hugepages-2Mi");
        assert_eq!(hugepage_resource(1048576), "hugepages-1Gi");
    }

    #[test]
    fn reservations_must_add_up_to_node_allocatables() {
        let mut machine = NumaMemory::default();
        machine.nodes.insert(0, NodeMemory::default());
        let mut r = Reserved::new();
        r.entry(0).or_default().insert("memory".into(), 1 << 30);
        let node = |b: u64| BTreeMap::from([("memory".to_string(), b), ("cpu".to_string(), 7)]);
        assert!(validate_reserved(&machine, &r, &node(1 << 30)).is_ok());
        assert_eq!(
            validate_reserved(&machine, &r, &node(1100 << 20))
                .unwrap_err()
                .to_string(),
            "the total amount \"1Gi\" of type \"memory\" is not equal to the value \"1100Mi\" determined by Node Allocatable feature"
        );
        r.entry(3).or_default().insert("memory".into(), 1 << 30);
        assert_eq!(
            validate_reserved(&machine, &r, &node(2 << 30))
                .unwrap_err()
                .to_string(),
            "the reserved memory configuration references a NUMA node 3 that does not exist on this machine"
        );
    }
}
