//! A set of NUMA nodes (kubelet's `bitmask.BitMask`): one bit per node id, at most
//! 64 nodes (kubelet refuses more than 8 unless `max-allowable-numa-nodes` says so).

/// The NUMA nodes a resource would come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct NumaMask(u64);

impl NumaMask {
    /// The largest NUMA node id a mask holds.
    pub(crate) const MAX_NODE: usize = 63;

    /// The mask of `nodes`; ids past [`Self::MAX_NODE`] are left out.
    pub(crate) fn of(nodes: impl IntoIterator<Item = usize>) -> Self {
        let bits = nodes
            .into_iter()
            .filter(|&n| n <= Self::MAX_NODE)
            .fold(0u64, |m, n| m | 1 << n);
        Self(bits)
    }

    /// True when no node is in the mask.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many nodes are in the mask.
    pub(crate) fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when `node` is in the mask.
    pub(crate) fn contains(self, node: usize) -> bool {
        node <= Self::MAX_NODE && self.0 & (1 << node) != 0
    }

    /// The nodes in both masks (kubelet's `And`).
    pub(crate) fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// The nodes in either mask (kubelet's `Or`).
    #[cfg(test)]
    pub(crate) fn or(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// True when every node of `self` is in `other`.
    pub(crate) fn is_subset_of(self, other: Self) -> bool {
        self.0 & !other.0 == 0
    }

    /// kubelet's `IsNarrowerThan`: fewer nodes, or as many with lower ids.
    pub(crate) fn is_narrower_than(self, other: Self) -> bool {
        match self.count().cmp(&other.count()) {
            std::cmp::Ordering::Equal => self.0 < other.0,
            o => o == std::cmp::Ordering::Less,
        }
    }

    /// The node ids, lowest first.
    pub(crate) fn nodes(self) -> impl Iterator<Item = usize> {
        (0..=Self::MAX_NODE).filter(move |&n| self.contains(n))
    }

    /// kubelet's `IsLessThan`: the lower number when read as bits, which is the mask
    /// with more of the low-numbered nodes.
    pub(crate) fn is_less_than(self, other: Self) -> bool {
        self.0 < other.0
    }

    /// Every non-empty mask over `nodes` (kubelet's `IterateBitMasks`): the single
    /// nodes first, then the pairs, and so on, each size in the order of `nodes`.
    pub(crate) fn subsets(nodes: &[usize]) -> Vec<NumaMask> {
        fn walk(rest: &[usize], taken: &mut Vec<usize>, size: usize, out: &mut Vec<NumaMask>) {
            if taken.len() == size {
                out.push(NumaMask::of(taken.iter().copied()));
                return;
            }
            for (i, &n) in rest.iter().enumerate() {
                taken.push(n);
                walk(&rest[i + 1..], taken, size, out);
                taken.pop();
            }
        }
        let mut out = Vec::new();
        for size in 1..=nodes.len() {
            walk(nodes, &mut Vec::new(), size, &mut out);
        }
        out
    }
}

impl std::fmt::Display for NumaMask {
    /// As kubelet logs a mask: the node ids, e.g. `0,1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self.nodes().map(|n| n.to_string()).collect();
        f.write_str(&ids.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::NumaMask;

    #[test]
    fn masks_combine_and_compare_as_kubelets_bitmask() {
        let a = NumaMask::of([0]);
        let ab = NumaMask::of([0, 1]);
        assert!(a.is_subset_of(ab) && !ab.is_subset_of(a));
        assert_eq!(a.and(ab), a);
        assert_eq!(a.or(NumaMask::of([1])), ab);
        assert!(a.is_narrower_than(ab));
        assert!(NumaMask::of([0]).is_narrower_than(NumaMask::of([1])));
        assert!(!NumaMask::of([1]).is_narrower_than(NumaMask::of([0])));
        assert_eq!(ab.to_string(), "0,1");
        assert_eq!(NumaMask::of([64]), NumaMask::default());
        assert!(NumaMask::of([0, 1]).is_less_than(NumaMask::of([2])));
    }

    #[test]
    fn subsets_come_by_size_then_in_node_order_as_kubelets_iterate_bit_masks() {
        let all: Vec<String> = NumaMask::subsets(&[0, 1, 2])
            .into_iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(all, ["0", "1", "2", "0,1", "0,2", "1,2", "0,1,2"]);
        assert!(NumaMask::subsets(&[]).is_empty());
    }
}
