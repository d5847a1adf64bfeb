//! `/sys/devices/system/node`: the NUMA nodes (`nodeN`), and each node's `cpulist`,
//! `distance` row, `meminfo` (`Node N MemTotal:` and `MemFree:`) and huge pages
//! (`hugepages/hugepages-<size>kB/nr_hugepages`).

use std::path::{Path, PathBuf};

use super::{SysfsError, numbered, read_cpu_list, read_number, read_text};

/// The NUMA node directory of a sysfs tree.
pub(crate) struct NodeDir {
    dir: PathBuf,
}

impl NodeDir {
    /// The node directory under `sys` (`/sys` on a node).
    pub(crate) fn under(sys: &Path) -> Self {
        Self::at(&sys.join("devices/system/node"))
    }

    /// The node directory at `dir` (`/sys/devices/system/node` on a node).
    pub(crate) fn at(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// The NUMA node ids, ascending; missing on a kernel without NUMA.
    pub(crate) fn node_ids(&self) -> Result<Vec<usize>, SysfsError> {
        Ok(numbered(&self.dir, "node")?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// Node `id`'s directory.
    pub(crate) fn node(&self, id: usize) -> SysNode {
        SysNode {
            dir: self.dir.join(format!("node{id}")),
        }
    }
}

/// One NUMA node's directory (`nodeN`).
pub(crate) struct SysNode {
    dir: PathBuf,
}

/// A node's `meminfo`, the lines read of it, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeMeminfo {
    pub total_kib: Option<u64>,
    pub free_kib: Option<u64>,
}

impl SysNode {
    /// The node's directory (for callers' messages).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `cpulist`: the node's CPUs, ascending.
    pub(crate) fn cpus(&self) -> Result<Vec<usize>, SysfsError> {
        read_cpu_list(&self.dir.join("cpulist"))
    }

    /// `distance`: the distance to each node, by node id.
    pub(crate) fn distances(&self) -> Result<Vec<u64>, SysfsError> {
        let path = self.dir.join("distance");
        parse_distances(&read_text(&path)?).ok_or_else(|| SysfsError::Parse {
            path: path.display().to_string(),
            what: "not a row of distances",
        })
    }

    /// `meminfo`'s `MemTotal` and `MemFree`.
    pub(crate) fn meminfo(&self) -> Result<NodeMeminfo, SysfsError> {
        Ok(parse_node_meminfo(&read_text(&self.dir.join("meminfo"))?))
    }

    /// The huge page sizes the node has (`hugepages/hugepages-<size>kB`), in KiB; none
    /// when the directory cannot be read.
    pub(crate) fn hugepage_sizes(&self) -> Result<Vec<u64>, SysfsError> {
        let dir = self.dir.join("hugepages");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut sizes = Vec::new();
        for e in entries.take(super::MAX_ENTRIES) {
            let name = e
                .map_err(|error| super::read_error(&dir, error))?
                .file_name();
            let size = (name.to_str())
                .and_then(|n| n.strip_prefix("hugepages-"))
                .and_then(|n| n.strip_suffix("kB"))
                .and_then(|n| n.parse::<u64>().ok());
            sizes.extend(size);
        }
        Ok(sizes)
    }

    /// `nr_hugepages` of the `size_kib` pages.
    pub(crate) fn hugepages(&self, size_kib: u64) -> Result<u64, SysfsError> {
        let file = format!("hugepages/hugepages-{size_kib}kB/nr_hugepages");
        read_number(&self.dir.join(file))
    }
}

/// A distance row: `10 21` (space-separated, as kubelet splits it).
fn parse_distances(text: &str) -> Option<Vec<u64>> {
    text.split_whitespace().map(|d| d.parse().ok()).collect()
}

/// `Node 0 MemTotal:  16384 kB` and its `MemFree` line; a line that does not parse is
/// not there.
fn parse_node_meminfo(text: &str) -> NodeMeminfo {
    let field = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.split_once(key)?.1;
            rest.split_whitespace().next()?.parse().ok()
        })
    };
    NodeMeminfo {
        total_kib: field("MemTotal:"),
        free_kib: field("MemFree:"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::write_fake;
    use super::*;

    #[test]
    fn a_node_is_read_from_its_directory() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write_fake(s, "devices/system/node/node1/cpulist", "4-7\n");
        write_fake(s, "devices/system/node/node1/distance", "21 10\n");
        write_fake(s, "devices/system/node/node0/distance", "10 x\n");
        write_fake(
            s,
            "devices/system/node/node1/meminfo",
            "Node 1 MemTotal:       16384 kB\nNode 1 MemFree:        8192 kB\n",
        );
        write_fake(
            s,
            "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages",
            "4\n",
        );
        write_fake(s, "devices/system/node/possible", "0-1\n");
        let dir = NodeDir::under(s);
        assert_eq!(dir.node_ids().unwrap(), [0, 1]);
        let n = dir.node(1);
        assert_eq!(n.cpus().unwrap(), [4, 5, 6, 7]);
        assert_eq!(n.distances().unwrap(), [21, 10]);
        assert!(matches!(
            dir.node(0).distances(),
            Err(SysfsError::Parse { .. })
        ));
        let m = n.meminfo().unwrap();
        assert_eq!((m.total_kib, m.free_kib), (Some(16384), Some(8192)));
        assert_eq!(n.hugepage_sizes().unwrap(), [2048]);
        assert_eq!(n.hugepages(2048).unwrap(), 4);
        assert!(dir.node(0).hugepage_sizes().unwrap().is_empty());
        assert!(
            NodeDir::under(&s.join("absent"))
                .node_ids()
                .unwrap_err()
                .is_missing()
        );
    }
}
