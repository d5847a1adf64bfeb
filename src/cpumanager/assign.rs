//! Choosing which CPUs to hand out (kubelet's `cpu_assignment.go`): topology-aware
//! best fit. Packed: whole NUMA nodes and sockets first (the larger of the two
//! first), then whole L3 (uncore) caches when asked, then whole cores, then single
//! threads, always from the most used part of the machine first so that large free
//! parts stay whole. Distributed (`distribute-cpus-across-numa`): spread evenly over
//! the fewest NUMA nodes that can hold the request.

use super::CpuSet;
use super::topology::{CpuInfo, CpuTopology};

type Key = fn(&CpuInfo) -> usize;
const NUMA: Key = |i| i.numa;
const SOCKET: Key = |i| i.socket;
const CORE: Key = |i| i.core;
const UNCORE: Key = |i| i.uncore_cache;

/// Why CPUs could not be taken (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum TakeError {
    /// The set cannot hold the request.
    #[error(
        "not enough cpus available to satisfy request: requested={requested}, available={available}"
    )]
    NotEnough { requested: usize, available: usize },
    /// Every stage ran and the request is still not met.
    #[error("failed to allocate cpus")]
    Failed,
    /// The distribution over NUMA nodes left CPUs untaken.
    #[error("accounting error, not enough CPUs allocated, remaining: {remaining}")]
    Accounting { remaining: usize },
}

fn not_enough(requested: usize, available: usize) -> TakeError {
    TakeError::NotEnough {
        requested,
        available,
    }
}

/// What is left to take and what has been taken.
struct Acc<'a> {
    topo: &'a CpuTopology,
    free: CpuSet,
    needed: usize,
    result: CpuSet,
    /// NUMA nodes hold sockets (or one each): sort and take by NUMA node first.
    numa_first: bool,
}

impl<'a> Acc<'a> {
    fn new(topo: &'a CpuTopology, available: &CpuSet, needed: usize) -> Self {
        Self {
            topo,
            free: available.intersection(&topo.all()),
            needed,
            result: CpuSet::new(),
            numa_first: topo.num_sockets >= topo.num_numa_nodes,
        }
    }

    fn free_in(&self, key: Key, id: usize) -> CpuSet {
        self.topo.select(&self.free, key, &[id])
    }

    fn total_in(&self, key: Key, id: usize) -> usize {
        self.topo.select(&self.topo.all(), key, &[id]).len()
    }

    fn is_whole(&self, key: Key, id: usize) -> bool {
        self.free_in(key, id).len() == self.total_in(key, id)
    }

    /// The `key` ids among `within`, fewest free CPUs first, then by id.
    fn sorted(&self, within: &CpuSet, key: Key) -> Vec<usize> {
        let mut ids = self.topo.keys_of(within, key);
        ids.sort_by_key(|&id| (self.free_in(key, id).len(), id));
        ids
    }

    /// The upper level's ids, then each one's lower level ids under it.
    fn nested(&self, upper: &[usize], upper_key: Key, lower: Key) -> Vec<usize> {
        let mut out = Vec::new();
        for &u in upper {
            out.extend(self.sorted(&self.free_in(upper_key, u), lower));
        }
        out
    }

    fn sorted_numa(&self) -> Vec<usize> {
        if self.numa_first {
            self.sorted(&self.free, NUMA)
        } else {
            self.nested(&self.sorted(&self.free, SOCKET), SOCKET, NUMA)
        }
    }

    fn sorted_sockets(&self) -> Vec<usize> {
        if self.numa_first {
            self.nested(&self.sorted_numa(), NUMA, SOCKET)
        } else {
            self.sorted(&self.free, SOCKET)
        }
    }

    fn sorted_cores(&self) -> Vec<usize> {
        if self.numa_first {
            self.nested(&self.sorted_sockets(), SOCKET, CORE)
        } else {
            self.nested(&self.sorted_numa(), NUMA, CORE)
        }
    }

    fn sorted_uncore_caches(&self) -> Vec<usize> {
        self.nested(&self.sorted_numa(), NUMA, UNCORE)
    }

    /// Every free CPU, core by core in [`Self::sorted_cores`]' order.
    fn sorted_cpus(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for core in self.sorted_cores() {
            out.extend(self.free_in(CORE, core).iter());
        }
        out
    }

    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.free = self.free.difference(cpus);
        self.needed = self.needed.saturating_sub(cpus.len());
    }

    fn satisfied(&self) -> bool {
        self.needed == 0
    }

    /// Takes every whole unit of `key` (in `order`) that fits in what is still needed.
    fn take_whole(&mut self, order: Vec<usize>, key: Key) {
        for id in order {
            if self.is_whole(key, id) && self.needed >= self.total_in(key, id) {
                let cpus = self.free_in(key, id);
                self.take(&cpus);
            }
        }
    }

    fn take_whole_numa_nodes(&mut self) {
        let order = self.sorted_numa();
        self.take_whole(order, NUMA);
    }

    fn take_whole_sockets(&mut self) {
        let order = self.sorted_sockets();
        self.take_whole(order, SOCKET);
    }

    /// `prefer-align-cpus-by-uncorecache`: whole uncore caches while the request is
    /// at least one, then the rest from a single cache's free whole cores when they
    /// hold exactly what is still needed.
    fn take_uncore_caches(&mut self) {
        let size = self.topo.cpus_per_uncore_cache();
        for cache in self.sorted_uncore_caches() {
            if self.needed >= size {
                let order = self.sorted_uncore_caches();
                self.take_whole(order, UNCORE);
            }
            if self.satisfied() {
                return;
            }
            let per_core = self.topo.cpus_per_core();
            let cores_needed = self.needed / per_core;
            let in_cache = self.free_in(UNCORE, cache);
            let whole: Vec<usize> = self
                .sorted(&in_cache, CORE)
                .into_iter()
                .filter(|&c| self.is_whole(CORE, c))
                .take(cores_needed)
                .collect();
            let cpus = self.topo.select(&self.free, CORE, &whole);
            if cores_needed > 0 && cpus.len() == self.needed {
                self.take(&cpus);
                return;
            }
        }
    }

    fn take_whole_cores(&mut self) {
        let order = self.sorted_cores();
        self.take_whole(order, CORE);
    }

    fn take_threads(&mut self) {
        for cpu in self.sorted_cpus() {
            if self.satisfied() {
                return;
            }
            self.take(&[cpu].into_iter().collect());
        }
    }
}

/// kubelet's `takeByTopologyNUMAPacked`.
pub(super) fn take_packed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
    uncore: bool,
) -> Result<CpuSet, TakeError> {
    let mut acc = Acc::new(topo, available, n);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if n > acc.free.len() {
        return Err(not_enough(n, available.len()));
    }
    let numa_first = acc.numa_first;
    let mut stage = 0;
    while !acc.satisfied() && stage < 5 {
        match stage {
            0 | 1 if numa_first == (stage == 0) => acc.take_whole_numa_nodes(),
            0 | 1 => acc.take_whole_sockets(),
            2 if uncore => acc.take_uncore_caches(),
            2 => {}
            3 => acc.take_whole_cores(),
            _ => acc.take_threads(),
        }
        stage += 1;
    }
    if acc.satisfied() {
        return Ok(acc.result);
    }
    Err(TakeError::Failed)
}

/// Every `k`-subset of `items`, in lexical order (kubelet's `iterateCombinations`,
/// and by size its `IterateBitMasks`).
pub(super) fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    if k == 0 || k > items.len() {
        return if k == 0 { vec![vec![]] } else { vec![] };
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        for mut rest in combinations(&items[i + 1..], k - 1) {
            rest.insert(0, first);
            out.push(rest);
        }
    }
    out
}

/// The population standard deviation, rounded to 3 places as kubelet rounds it.
fn balance(values: &[usize]) -> f64 {
    let n = values.len().max(1) as f64;
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    let mean = round(values.iter().sum::<usize>() as f64 / n);
    let var = values
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    round(var.sqrt())
}

/// The best spread for one NUMA combination: its balance score and the nodes that
/// take the remainder, or `None` when the combination cannot hold the request.
fn score_combo(
    free: &std::collections::BTreeMap<usize, usize>,
    combo: &[usize],
    n: usize,
    group: usize,
) -> Option<(f64, Vec<usize>)> {
    let total: usize = combo.iter().map(|c| free[c]).sum();
    let groups: usize = combo.iter().map(|c| free[c] / group).sum();
    let share = n / combo.len() / group * group;
    if total < n || groups * group < n || combo.iter().any(|c| free[c] < share) {
        return None;
    }
    let mut after = free.clone();
    for c in combo {
        *after.get_mut(c)? -= share;
    }
    let remainder = n - share * combo.len();
    if remainder == 0 {
        return Some((
            balance(&after.values().copied().collect::<Vec<_>>()),
            vec![],
        ));
    }
    let candidates: Vec<usize> = combo
        .iter()
        .copied()
        .filter(|c| after[c] >= group)
        .collect();
    let mut best: Option<(f64, Vec<usize>)> = None;
    for k in (1..=candidates.len()).rev() {
        for subset in combinations(&candidates, k) {
            if subset.iter().map(|c| after[c]).sum::<usize>() < remainder {
                continue;
            }
            let mut local = after.clone();
            let mut left = remainder;
            while left > 0 {
                let before = left;
                for c in &subset {
                    if left > 0 && local[c] >= group {
                        *local.get_mut(c)? -= group;
                        left = left.saturating_sub(group);
                    }
                }
                if left == before {
                    break;
                }
            }
            let score = balance(&local.values().copied().collect::<Vec<_>>());
            if best.as_ref().is_none_or(|(b, _)| score < *b) {
                best = Some((score, subset));
            }
        }
    }
    best
}

/// kubelet's `takeByTopologyNUMADistributed`: the fewest NUMA nodes over which the
/// request spreads evenly in groups of `group` CPUs (whole cores under
/// `full-pcpus-only`), the remainder where it keeps the nodes most balanced; packed
/// when no such spread exists.
pub(super) fn take_distributed(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
    group: usize,
) -> Result<CpuSet, TakeError> {
    if group == 0 || !n.is_multiple_of(group) {
        return take_packed(topo, available, n, false);
    }
    let mut acc = Acc::new(topo, available, n);
    if acc.satisfied() {
        return Ok(acc.result);
    }
    if n > acc.free.len() {
        return Err(not_enough(n, available.len()));
    }
    let numas = acc.sorted_numa();
    let free: std::collections::BTreeMap<usize, usize> = numas
        .iter()
        .map(|&m| (m, acc.free_in(NUMA, m).len()))
        .collect();
    let (min, max) = numa_range(topo, numas.len(), n, group);
    for k in min..=max {
        let mut best: Option<(f64, Vec<usize>, Vec<usize>)> = None;
        for combo in combinations(&numas, k) {
            if best.as_ref().is_some_and(|b| b.0 == 0.0) {
                break;
            }
            if let Some((score, rest)) = score_combo(&free, &combo, n, group)
                && best.as_ref().is_none_or(|b| score < b.0)
            {
                best = Some((score, combo, rest));
            }
        }
        let Some((_, combo, rest)) = best else {
            continue;
        };
        let share = n / combo.len() / group * group;
        for &m in &combo {
            let cpus = take_packed(topo, &acc.free_in(NUMA, m), share, false)?;
            acc.take(&cpus);
        }
        let mut left = n - share * combo.len();
        while left > 0 {
            let before = left;
            for &m in &rest {
                if left > 0 && acc.free_in(NUMA, m).len() >= group {
                    let cpus = take_packed(topo, &acc.free_in(NUMA, m), group, false)?;
                    acc.take(&cpus);
                    left -= group;
                }
            }
            if left == before {
                return Err(TakeError::Accounting { remaining: left });
            }
        }
        return Ok(acc.result);
    }
    take_packed(topo, available, n, false)
}

/// The fewest and most NUMA nodes a request of `n` in groups of `group` could span.
fn numa_range(
    topo: &CpuTopology,
    numas_available: usize,
    n: usize,
    group: usize,
) -> (usize, usize) {
    let nodes = topo.num_numa_nodes.max(1);
    let groups = (topo.num_cpus() - 1) / group + 1;
    let per_node = (groups - 1) / nodes + 1;
    let needed = (n - 1) / group + 1;
    ((needed - 1) / per_node + 1, needed.min(numas_available))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpumanager::topology::fake::two_socket_ht;

    fn topo() -> CpuTopology {
        let dir = tempfile::tempdir().unwrap();
        two_socket_ht(dir.path());
        CpuTopology::discover(dir.path()).unwrap()
    }

    fn set(s: &str) -> CpuSet {
        CpuSet::parse(s).unwrap()
    }

    #[test]
    fn packed_takes_whole_cores_then_threads_from_the_fuller_socket() {
        let t = topo();
        let all = t.all();
        // Two CPUs: one whole core, the lowest.
        assert_eq!(take_packed(&t, &all, 2, false).unwrap().to_string(), "0,8");
        // Eight: a whole socket (NUMA node).
        assert_eq!(
            take_packed(&t, &all, 8, false).unwrap().to_string(),
            "0-3,8-11"
        );
        // With CPU 0 gone, socket 0 is the fuller one: one CPU fills core 0's sibling.
        let less = all.difference(&set("0"));
        assert_eq!(take_packed(&t, &less, 1, false).unwrap().to_string(), "8");
        // Three from socket 0 minus CPU 0: a whole core, then the lone sibling.
        assert_eq!(
            take_packed(&t, &less, 3, false).unwrap().to_string(),
            "1,8-9"
        );
        assert_eq!(
            take_packed(&t, &set("1-2"), 3, false)
                .unwrap_err()
                .to_string(),
            "not enough cpus available to satisfy request: requested=3, available=2"
        );
    }

    #[test]
    fn distributed_spreads_over_both_nodes() {
        let t = topo();
        // Ten CPUs need both nodes: four whole cores' worth each, the remainder on one.
        let got = take_distributed(&t, &t.all(), 10, 2).unwrap();
        assert_eq!(got.to_string(), "0-2,4-5,8-10,12-13");
        // Fits in one node: stays there, packed.
        let one = take_distributed(&t, &t.all(), 4, 2).unwrap();
        assert_eq!(one.to_string(), "0-1,8-9");
    }

    #[test]
    fn uncore_cache_alignment_keeps_a_request_in_one_cache() {
        let t = topo();
        // Socket 0 lost CPUs 0 and 8; 6 CPUs fit whole in socket (cache) 0's rest.
        let avail = t.all().difference(&set("0,8"));
        let got = take_packed(&t, &avail, 6, true).unwrap();
        assert_eq!(got.to_string(), "1-3,9-11");
    }
}
