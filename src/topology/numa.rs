//! The machine's NUMA nodes and the distances between them (kubelet's `NUMAInfo`),
//! read from sysfs (`<root>/nodeN/distance`, root normally
//! `/sys/devices/system/node`), and the two ways kubelet picks between two masks.

use std::collections::BTreeMap;
use std::path::Path;

use super::NumaMask;

/// The node ids and, for each, its distance row (indexed by node id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NumaInfo {
    nodes: Vec<usize>,
    distances: BTreeMap<usize, Vec<u64>>,
}

impl NumaInfo {
    /// Nodes with known distance rows (tests, and callers that read them elsewhere).
    pub(crate) fn new(nodes: Vec<usize>, distances: BTreeMap<usize, Vec<u64>>) -> Self {
        let mut nodes = nodes;
        nodes.sort_unstable();
        nodes.dedup();
        Self { nodes, distances }
    }

    /// The nodes under `root` (`node0`, `node1`, …) and their distance rows; a machine
    /// whose kernel shows no node directory is one node, 0, as cadvisor reports it.
    /// A node whose distance file is missing or unreadable has no row: only
    /// `prefer-closest-numa-nodes` needs them, and [`Self::has_distances`] tells.
    pub(crate) fn from_sysfs(root: &Path) -> std::io::Result<Self> {
        let dir = crate::sysfs::NodeDir::at(root);
        let mut nodes = match dir.node_ids() {
            Ok(ids) => ids,
            Err(e) if e.is_missing() => Vec::new(),
            Err(e) => return Err(e.into_io()),
        };
        nodes.retain(|&id| id <= NumaMask::MAX_NODE);
        if nodes.is_empty() {
            nodes.push(0);
        }
        let mut distances = BTreeMap::new();
        for &id in &nodes {
            if let Ok(row) = dir.node(id).distances() {
                distances.insert(id, row);
            }
        }
        Ok(Self::new(nodes, distances))
    }

    /// The node ids, lowest first.
    pub(crate) fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// True when every node has a distance row.
    pub(crate) fn has_distances(&self) -> bool {
        self.nodes.iter().all(|n| self.distances.contains_key(n))
    }

    /// Every node: the affinity that means "anywhere" (kubelet's `DefaultAffinityMask`).
    pub(crate) fn default_affinity(&self) -> NumaMask {
        NumaMask::of(self.nodes.iter().copied())
    }

    /// kubelet's `Narrowest`.
    pub(crate) fn narrowest(&self, a: NumaMask, b: NumaMask) -> NumaMask {
        if a.is_narrower_than(b) { a } else { b }
    }

    /// kubelet's `Closest`: the narrower mask; of two as wide, the one whose nodes
    /// are closer on average; of two as close, the one with lower node ids.
    pub(crate) fn closest(&self, a: NumaMask, b: NumaMask) -> NumaMask {
        if a.count() != b.count() {
            return self.narrowest(a, b);
        }
        let (da, db) = (self.average_distance(a), self.average_distance(b));
        if da == db {
            return if a.is_less_than(b) { a } else { b };
        }
        if da < db { a } else { b }
    }

    /// The mean distance over every ordered pair of the mask's nodes (each with
    /// itself too), as kubelet's `CalculateAverageFor`.
    fn average_distance(&self, mask: NumaMask) -> f64 {
        if mask.is_empty() {
            return 0.0;
        }
        let (mut sum, mut count) = (0.0, 0.0);
        for a in mask.nodes() {
            for b in mask.nodes() {
                let d = self
                    .distances
                    .get(&a)
                    .and_then(|row| row.get(b))
                    .copied()
                    .unwrap_or(0);
                sum += d as f64;
                count += 1.0;
            }
        }
        sum / count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_and_distances_come_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        for (id, row) in [(0, "10 21\n"), (1, "21 10\n")] {
            let node = dir.path().join(format!("node{id}"));
            std::fs::create_dir_all(&node).unwrap();
            std::fs::write(node.join("distance"), row).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("power")).unwrap();
        let info = NumaInfo::from_sysfs(dir.path()).unwrap();
        assert_eq!(info.nodes(), [0, 1]);
        assert!(info.has_distances());
        assert_eq!(info.default_affinity(), NumaMask::of([0, 1]));

        let none = NumaInfo::from_sysfs(&dir.path().join("absent")).unwrap();
        assert_eq!(none.nodes(), [0]);
        assert!(!none.has_distances());
    }

    #[test]
    fn closest_prefers_the_nearer_pair_then_the_lower_ids() {
        let rows = [
            vec![10, 11, 20, 20],
            vec![11, 10, 20, 20],
            vec![20, 20, 10, 11],
            vec![20, 20, 11, 10],
        ];
        let info = NumaInfo::new(vec![0, 1, 2, 3], rows.into_iter().enumerate().collect());
        let m = |n: &[usize]| NumaMask::of(n.iter().copied());
        assert_eq!(info.closest(m(&[0, 2]), m(&[2, 3])), m(&[2, 3]));
        assert_eq!(info.closest(m(&[0, 1]), m(&[2, 3])), m(&[0, 1]));
        assert_eq!(info.closest(m(&[0]), m(&[2, 3])), m(&[0]));
        assert_eq!(info.narrowest(m(&[1]), m(&[0])), m(&[0]));
    }
}
