//! CPU suppress, `cpuset` policy (koordlet's `adjustByCPUSet`): BestEffort pods get
//! as many whole CPUs as the suppress value rounds up to (at least 2, growing by at
//! most 10 % of the node's CPUs a round), chosen as koordlet's
//! `calculateBESuppressCPUSetPolicy` does: hyper-thread siblings first, spread over
//! NUMA nodes and sockets; never a CPU an LSE pod is pinned to, and from the CPUs
//! LSR pods are pinned to only their share (koord-scheduler's `resource-status`). The
//! set goes on the BestEffort QoS cgroup and every pod and container cgroup below it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::advisor::Processor;
use crate::koordapi::KoordQos;

/// koordlet's `beMinCPUSetCores`.
pub(crate) const MIN_CPUS: usize = 2;

/// How many CPUs BestEffort gets this round (koordlet's rounding in `adjustByCPUSet`):
/// ⌈suppress / 1000⌉, at least [`MIN_CPUS`], and at most ⌈10 % of all CPUs⌉ more than
/// the `old` set had; shrinking is immediate.
pub(crate) fn cpu_count(suppress_milli: f64, old: usize, all: usize) -> usize {
    let want = (suppress_milli / 1000.0).ceil();
    let mut n = if want < MIN_CPUS as f64 {
        MIN_CPUS
    } else {
        want as usize
    };
    let max_increase = all.div_ceil(10);
    if n > old + max_increase {
        n = old + max_increase;
    }
    n
}

/// koordlet's `calculateBESuppressCPUSetPolicy`: the CPUs are grouped by (NUMA node,
/// socket), each group sorted by core then CPU id, the groups by size (largest first,
/// then by first CPU id). Going round the groups, each gives the first free pair of
/// siblings (two CPUs of one core) while two or more are wanted; then, from the group
/// where that stopped, one free CPU each. Empty when fewer CPUs than `want` exist.
pub(crate) fn choose(want: usize, procs: &[Processor]) -> Vec<usize> {
    if procs.len() < want || procs.is_empty() {
        return Vec::new();
    }
    let mut groups: BTreeMap<(i64, i64), Vec<&Processor>> = BTreeMap::new();
    for p in procs {
        groups.entry((p.node_id, p.socket_id)).or_default().push(p);
    }
    let mut buckets: Vec<Vec<&Processor>> = groups.into_values().collect();
    for b in &mut buckets {
        b.sort_by_key(|p| (p.core_id, p.cpu_id));
    }
    buckets.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].cpu_id.cmp(&b[0].cpu_id)));
    let mut need = want;
    let mut used = HashSet::new();
    let mut chosen = Vec::new();
    let n = buckets.len();
    // Sibling pairs, round-robin, until a whole round picks nothing.
    let (mut i, mut before) = (0, None);
    while need > 1 {
        if i == 0 {
            if before == Some(need) {
                break;
            }
            before = Some(need);
        }
        let b = &buckets[i];
        if let Some(j) = (0..b.len().saturating_sub(1))
            .find(|&j| !used.contains(&b[j].cpu_id) && b[j].core_id == b[j + 1].core_id)
        {
            for p in [b[j], b[j + 1]] {
                used.insert(p.cpu_id);
                chosen.push(p.cpu_id);
            }
            need -= 2;
        }
        i = (i + 1) % n;
    }
    // Single CPUs, round-robin from where the pairs stopped.
    let (start, mut before) = (i, None);
    while need > 0 {
        if i == start {
            if before == Some(need) {
                break;
            }
            before = Some(need);
        }
        if let Some(p) = buckets[i].iter().find(|p| !used.contains(&p.cpu_id)) {
            used.insert(p.cpu_id);
            chosen.push(p.cpu_id);
            need -= 1;
        }
        i = (i + 1) % n;
    }
    chosen.sort_unstable();
    chosen
}

/// The annotation koord-scheduler pins a pod's CPUs with (`{"cpuset": "0-3"}`).
const RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";

/// koordlet's `cpuIdToPool`: each CPU some pod's resource status pins, with that
/// pod's koordinator QoS label (a later pod wins a CPU, as in koordlet's map).
pub(crate) fn pinned(pods: &[&Pod]) -> BTreeMap<usize, Option<KoordQos>> {
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        cpuset: String,
    }
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(text) = super::inputs::annotation(pod, RESOURCE_STATUS) else {
            continue;
        };
        let Ok(status) = serde_json::from_str::<Status>(text) else {
            continue;
        };
        let Ok(cpus) = crate::cm::parse_cpu_list(&status.cpuset) else {
            continue;
        };
        for c in cpus {
            out.insert(c, KoordQos::of_label(pod));
        }
    }
    out
}

/// koordlet's pools in `adjustByCPUSet`: CPUs pinned by LSE pods are never given;
/// those pinned by LSR pods are a pool of their own, taking a share of `want`
/// proportional to its size; the rest is the shared pool.
pub(crate) fn choose_in_pools(
    want: usize,
    procs: &[Processor],
    pins: &BTreeMap<usize, Option<KoordQos>>,
) -> Vec<usize> {
    let pool = |p: &Processor| pins.get(&p.cpu_id).copied().flatten();
    let lsr: Vec<Processor> = procs
        .iter()
        .filter(|p| pool(p) == Some(KoordQos::Lsr))
        .cloned()
        .collect();
    let ls: Vec<Processor> = procs
        .iter()
        .filter(|p| !matches!(pool(p), Some(KoordQos::Lsr | KoordQos::Lse)))
        .cloned()
        .collect();
    if lsr.is_empty() && ls.is_empty() {
        return Vec::new();
    }
    let from_lsr = want * lsr.len() / (lsr.len() + ls.len());
    let mut cpus = Vec::new();
    if from_lsr > 0 {
        cpus.extend(choose(from_lsr, &lsr));
    }
    if want > from_lsr {
        cpus.extend(choose(want - from_lsr, &ls));
    }
    cpus.sort_unstable();
    cpus
}

/// All CPUs BestEffort may have (koordlet's `calcBECPUSet`): every CPU but those
/// LSE pods are pinned to.
pub(crate) fn all_but_lse(
    procs: &[Processor],
    pins: &BTreeMap<usize, Option<KoordQos>>,
) -> Vec<usize> {
    let mut all: Vec<usize> = procs
        .iter()
        .map(|p| p.cpu_id)
        .filter(|c| pins.get(c).copied().flatten() != Some(KoordQos::Lse))
        .collect();
    all.sort_unstable();
    all
}

/// `procs` but the CPUs in `reserved` (koordlet's `cpusetReserved`: the Node's
/// reservation annotation's `reservedCPUs`), which are in no pool.
pub(crate) fn without(procs: &[Processor], reserved: &[usize]) -> Vec<Processor> {
    procs
        .iter()
        .filter(|p| !reserved.contains(&p.cpu_id))
        .cloned()
        .collect()
}

/// The CPUs of `/sys/devices/system/cpu/online` as processors when the metric cache
/// has no topology yet: each CPU its own core, on node 0 and socket 0.
pub(crate) fn processors_from_online(cpus: &[usize]) -> Vec<Processor> {
    cpus.iter()
        .map(|&c| Processor {
            cpu_id: c,
            core_id: c as i64,
            socket_id: 0,
            node_id: 0,
            l3_id: None,
        })
        .collect()
}

/// `a ∪ b`, sorted.
pub(crate) fn union(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter()
        .chain(b)
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cpus` given as (cpu, core, socket, node).
    fn topo(cpus: &[(usize, i64, i64, i64)]) -> Vec<Processor> {
        cpus.iter()
            .map(|&(cpu_id, core_id, socket_id, node_id)| Processor {
                cpu_id,
                core_id,
                socket_id,
                node_id,
                l3_id: None,
            })
            .collect()
    }

    /// One socket, one node, `cores` cores with two threads each: CPU c and c+cores
    /// are siblings, as Linux numbers them.
    fn smt(cores: usize) -> Vec<Processor> {
        let mut v = Vec::new();
        for c in 0..cores {
            v.push((c, c as i64, 0, 0));
            v.push((c + cores, c as i64, 0, 0));
        }
        topo(&v)
    }

    #[test]
    fn the_count_rounds_up_keeps_two_and_grows_slowly() {
        assert_eq!(cpu_count(1100.0, 8, 8), 2);
        assert_eq!(cpu_count(-900.0, 8, 8), MIN_CPUS);
        assert_eq!(cpu_count(2000.0, 8, 8), 2);
        assert_eq!(cpu_count(2001.0, 8, 8), 3);
        // 16 CPUs: at most ⌈1.6⌉ = 2 more than the old 3.
        assert_eq!(cpu_count(12_000.0, 3, 16), 5);
        // Shrinking is not capped.
        assert_eq!(cpu_count(1000.0, 16, 16), 2);
    }

    #[test]
    fn siblings_first_on_a_hyper_threaded_socket() {
        // 4 cores × 2 threads: pairs (0,4), (1,5), … in core order.
        let t = smt(4);
        assert_eq!(choose(2, &t), [0, 4]);
        assert_eq!(choose(4, &t), [0, 1, 4, 5]);
        // An odd count: the pairs, then the next free CPU in core order.
        assert_eq!(choose(3, &t), [0, 1, 4]);
        assert_eq!(choose(8, &t), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert!(choose(9, &t).is_empty(), "more than the node has");
    }

    #[test]
    fn spread_over_numa_nodes_largest_first() {
        // Two nodes of 2 cores × 2 threads: node 0 CPUs 0,1,4,5; node 1 CPUs 2,3,6,7.
        let t = topo(&[
            (0, 0, 0, 0),
            (1, 1, 0, 0),
            (4, 0, 0, 0),
            (5, 1, 0, 0),
            (2, 2, 1, 1),
            (3, 3, 1, 1),
            (6, 2, 1, 1),
            (7, 3, 1, 1),
        ]);
        assert_eq!(choose(2, &t), [0, 4]);
        // A pair from each node before a second pair from one.
        assert_eq!(choose(4, &t), [0, 2, 4, 6]);
        assert_eq!(choose(6, &t), [0, 1, 2, 4, 5, 6]);
        // A smaller node comes after a larger one, whatever its ids.
        let uneven = topo(&[
            (0, 0, 0, 0),
            (1, 1, 0, 0),
            (2, 2, 0, 1),
            (3, 2, 0, 1),
            (4, 3, 0, 1),
            (5, 3, 0, 1),
        ]);
        assert_eq!(choose(2, &uneven), [2, 3]);
    }

    #[test]
    fn without_siblings_one_cpu_per_group_in_turn() {
        // No hyper-threads (this machine's kind, and the online-list fallback).
        let t = processors_from_online(&[0, 1, 2, 3]);
        assert_eq!(choose(2, &t), [0, 1]);
        assert_eq!(choose(3, &t), [0, 1, 2]);
        // Two sockets of two CPUs: one from each in turn.
        let t = topo(&[(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 0), (3, 3, 1, 0)]);
        assert_eq!(choose(2, &t), [0, 2]);
        assert_eq!(choose(3, &t), [0, 1, 2]);
    }

    #[test]
    fn lse_pinned_cpus_are_never_given_and_lsr_pinned_ones_share_in_proportion() {
        let pod = |class: &str, cpuset: &str| {
            let mut p = Pod::default();
            p.metadata.labels =
                Some([("koordinator.sh/qosClass".to_string(), class.to_string())].into());
            p.metadata.annotations = Some(
                [(
                    RESOURCE_STATUS.to_string(),
                    format!(r#"{{"cpuset": "{cpuset}"}}"#),
                )]
                .into(),
            );
            p
        };
        let (lse, lsr) = (pod("LSE", "0,4"), pod("LSR", "1,5"));
        let mut broken = pod("LSR", "2");
        broken.metadata.annotations = Some([(RESOURCE_STATUS.to_string(), "{".to_string())].into());
        let pins = pinned(&[&lse, &lsr, &broken]);
        assert_eq!(pins.len(), 4, "a status that is not JSON pins nothing");
        let t = smt(4);
        // 6 CPUs left: 2 LSR-pinned, 4 shared. 4 wanted: 4 × 2 / 6 = 1 from LSR.
        assert_eq!(choose_in_pools(4, &t, &pins), [1, 2, 3, 6]);
        assert_eq!(all_but_lse(&t, &pins), [1, 2, 3, 5, 6, 7]);
        // Nothing pinned: the plain choice.
        assert_eq!(choose_in_pools(4, &t, &BTreeMap::new()), choose(4, &t));
        // Reserved CPUs are in no pool, and not in the set given back either.
        let free = without(&t, &[2, 3]);
        assert_eq!(choose_in_pools(4, &free, &pins), [1, 5, 6, 7]);
        assert_eq!(all_but_lse(&free, &pins), [1, 5, 6, 7]);
    }

    #[test]
    fn union_is_sorted_without_duplicates() {
        assert_eq!(union(&[3, 1], &[1, 2]), [1, 2, 3]);
    }
}
