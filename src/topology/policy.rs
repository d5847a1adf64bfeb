//! How a policy merges the providers' hints into one (kubelet's `policy.go` and
//! `policy_*.go`): every resource's hints, one from each, are ANDed together in
//! every combination (the permutation walk), the best merged hint is kept by
//! kubelet's `compare` rules, and the policy says whether the pod may be admitted
//! with it.

use super::{Hints, NumaInfo, NumaMask, PolicyName, PolicyOptions, TopologyHint};

/// A policy with what it needs to merge.
pub(super) struct Policy {
    pub name: PolicyName,
    numa: NumaInfo,
    options: PolicyOptions,
}

impl Policy {
    pub(super) fn new(name: PolicyName, numa: NumaInfo, options: PolicyOptions) -> Self {
        Self {
            name,
            numa,
            options,
        }
    }

    /// The best hint over the providers' hints, and whether the pod may be admitted
    /// with it (kubelet's `Merge`): best-effort admits any; restricted and
    /// single-numa-node only a preferred one. Policy `none` asks nothing and admits.
    pub(super) fn merge(&self, providers: &[Hints]) -> (TopologyHint, bool) {
        let any = TopologyHint {
            numa_affinity: None,
            preferred: false,
        };
        match self.name {
            PolicyName::None => (any, true),
            PolicyName::BestEffort => {
                (self.merge_filtered(filter_providers_hints(providers)), true)
            }
            PolicyName::Restricted => {
                let best = self.merge_filtered(filter_providers_hints(providers));
                (best, best.preferred)
            }
            PolicyName::SingleNumaNode => {
                let filtered = filter_single_numa_hints(filter_providers_hints(providers));
                let mut best = self.merge_filtered(filtered);
                if best.numa_affinity == Some(self.numa.default_affinity()) {
                    best.numa_affinity = None;
                }
                (best, best.preferred)
            }
        }
    }

    /// kubelet's `HintMerger.Merge`: the best of every permutation's merged hint, or
    /// every node, not preferred, when none has a node left.
    fn merge_filtered(&self, hints: Vec<Vec<TopologyHint>>) -> TopologyHint {
        let default = self.numa.default_affinity();
        let merger = Merger {
            policy: self,
            best_non_preferred: max_of_min_affinity_counts(&hints),
        };
        let mut best: Option<(NumaMask, bool)> = None;
        let mut walk = Vec::with_capacity(hints.len());
        permutations(&hints, &mut walk, &mut |perm| {
            let candidate = merge_permutation(default, perm);
            best = merger.compare(best, candidate);
        });
        let (mask, preferred) = best.unwrap_or((default, false));
        TopologyHint {
            numa_affinity: Some(mask),
            preferred,
        }
    }
}

/// One list of hints per resource of every provider (kubelet's `filterProvidersHints`):
/// a provider with no hints at all has no preference (any node, preferred); a
/// resource with an empty list cannot be placed (any node, not preferred).
fn filter_providers_hints(providers: &[Hints]) -> Vec<Vec<TopologyHint>> {
    let any = |preferred| TopologyHint {
        numa_affinity: None,
        preferred,
    };
    let mut out = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            out.push(vec![any(true)]);
            continue;
        }
        for list in hints.values() {
            if list.is_empty() {
                out.push(vec![any(false)]);
            } else {
                out.push(list.clone());
            }
        }
    }
    out
}

/// single-numa-node keeps only preferred hints on one node or on any node
/// (kubelet's `filterSingleNumaHints`).
fn filter_single_numa_hints(all: Vec<Vec<TopologyHint>>) -> Vec<Vec<TopologyHint>> {
    all.into_iter()
        .map(|hints| {
            hints
                .into_iter()
                .filter(|h| h.preferred && h.numa_affinity.is_none_or(|m| m.count() == 1))
                .collect()
        })
        .collect()
}

/// Calls `f` with every combination of one hint per list, the first list varying
/// slowest (kubelet's `iterateAllProviderTopologyHints`).
fn permutations<'a>(
    lists: &'a [Vec<TopologyHint>],
    acc: &mut Vec<&'a TopologyHint>,
    f: &mut dyn FnMut(&[&TopologyHint]),
) {
    let Some((first, rest)) = lists.split_first() else {
        f(acc);
        return;
    };
    for h in first {
        acc.push(h);
        permutations(rest, acc, f);
        acc.pop();
    }
}

/// kubelet's `mergePermutation`: the AND of the hints' masks (an any-node hint
/// counts as every node); preferred only when every hint is preferred and every
/// hint with a mask has the same mask.
fn merge_permutation(default: NumaMask, perm: &[&TopologyHint]) -> (NumaMask, bool) {
    let mut preferred = true;
    let mut first: Option<NumaMask> = None;
    let mut merged = default;
    for h in perm {
        if let Some(m) = h.numa_affinity {
            if *first.get_or_insert(m) != m {
                preferred = false;
            }
            merged = merged.and(m);
        }
        if !h.preferred {
            preferred = false;
        }
    }
    (merged, preferred)
}

/// The widest of the narrowest masks any resource offers (kubelet's
/// `maxOfMinAffinityCounts`): what a non-preferred hint should aim for.
fn max_of_min_affinity_counts(hints: &[Vec<TopologyHint>]) -> u32 {
    hints
        .iter()
        .filter_map(|list| {
            list.iter()
                .filter_map(|h| h.numa_affinity)
                .reduce(|best, m| if m.is_narrower_than(best) { m } else { best })
        })
        .map(NumaMask::count)
        .max()
        .unwrap_or(0)
}

/// kubelet's `HintMerger`: the rules by which a merged hint replaces the best so far.
struct Merger<'a> {
    policy: &'a Policy,
    best_non_preferred: u32,
}

impl Merger<'_> {
    /// Of two masks, the one the options prefer; the current one when they are equal.
    fn compare_masks(
        &self,
        current: (NumaMask, bool),
        candidate: (NumaMask, bool),
    ) -> (NumaMask, bool) {
        if candidate.0 == current.0 {
            return current;
        }
        let numa = &self.policy.numa;
        let closest = self.policy.name != PolicyName::SingleNumaNode
            && self.policy.options.prefer_closest_numa;
        let best = if closest {
            numa.closest(current.0, candidate.0)
        } else {
            numa.narrowest(current.0, candidate.0)
        };
        if best == current.0 {
            current
        } else {
            candidate
        }
    }

    /// kubelet's `compare`: a preferred hint beats a non-preferred one; two
    /// preferred ones compare by mask; two non-preferred ones aim for a mask as wide
    /// as `best_non_preferred` and no wider.
    fn compare(
        &self,
        current: Option<(NumaMask, bool)>,
        candidate: (NumaMask, bool),
    ) -> Option<(NumaMask, bool)> {
        if candidate.0.is_empty() {
            return current;
        }
        let Some(current) = current else {
            return Some(candidate);
        };
        let best = match (current.1, candidate.1) {
            (false, true) => candidate,
            (true, false) => current,
            (true, true) => self.compare_masks(current, candidate),
            (false, false) => self.compare_non_preferred(current, candidate),
        };
        Some(best)
    }

    fn compare_non_preferred(
        &self,
        current: (NumaMask, bool),
        candidate: (NumaMask, bool),
    ) -> (NumaMask, bool) {
        let target = self.best_non_preferred;
        let (cur, cand) = (current.0.count(), candidate.0.count());
        if cur > target {
            return self.compare_masks(current, candidate);
        }
        if cur == target {
            return if cand == target {
                self.compare_masks(current, candidate)
            } else {
                current
            };
        }
        if cand > target {
            return current;
        }
        if cand == target || cand > cur {
            return candidate;
        }
        if cand < cur {
            return current;
        }
        self.compare_masks(current, candidate)
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
