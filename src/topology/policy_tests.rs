//! The merge cases of kubelet's `policy_test.go` (`commonPolicyMergeTestCases` and
//! the per-policy ones), on 1, 2 and 4 NUMA nodes.

use std::collections::BTreeMap;

use super::*;

fn m(nodes: &[usize]) -> NumaMask {
    NumaMask::of(nodes.iter().copied())
}

fn h(nodes: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: Some(m(nodes)),
        preferred,
    }
}

fn any(preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: None,
        preferred,
    }
}

fn provider(resources: &[(&str, Vec<TopologyHint>)]) -> Hints {
    resources
        .iter()
        .map(|(r, l)| (r.to_string(), l.clone()))
        .collect()
}

fn policy(name: PolicyName, nodes: &[usize], options: PolicyOptions) -> Policy {
    Policy::new(
        name,
        NumaInfo::new(nodes.to_vec(), BTreeMap::new()),
        options,
    )
}

fn merge(name: PolicyName, nodes: &[usize], providers: &[Hints]) -> (TopologyHint, bool) {
    policy(name, nodes, PolicyOptions::default()).merge(providers)
}

#[test]
fn best_effort_merges_as_kubelet_on_two_nodes() {
    let be = |p: &[Hints]| merge(PolicyName::BestEffort, &[0, 1], p);
    // no provider, or one without preference: every node, preferred
    assert_eq!(be(&[]), (h(&[0, 1], true), true));
    assert_eq!(be(&[Hints::new()]), (h(&[0, 1], true), true));
    assert_eq!(
        be(&[provider(&[("r", vec![any(true)])])]),
        (h(&[0, 1], true), true)
    );
    assert_eq!(
        be(&[provider(&[("r", vec![any(false)])])]),
        (h(&[0, 1], false), true)
    );
    // a resource that cannot be placed at all
    assert_eq!(be(&[provider(&[("r", vec![])])]), (h(&[0, 1], false), true));
    // two providers, the same single node, both preferred
    let p0 = provider(&[("cpu", vec![h(&[0], true)])]);
    let q0 = provider(&[("mem", vec![h(&[0], true)])]);
    assert_eq!(be(&[p0.clone(), q0.clone()]), (h(&[0], true), true));
    // no common node: every node, not preferred (best-effort still admits)
    let q1 = provider(&[("mem", vec![h(&[1], true)])]);
    assert_eq!(be(&[p0.clone(), q1]), (h(&[0, 1], false), true));
    // one preferred, one not
    let q0n = provider(&[("mem", vec![h(&[0], false)])]);
    assert_eq!(be(&[p0.clone(), q0n]), (h(&[0], false), true));
    // a provider with two hints, one matching the other's single hint
    let p01 = provider(&[("cpu", vec![h(&[0], true), h(&[1], true)])]);
    assert_eq!(be(&[p01, q0.clone()]), (h(&[0], true), true));
    // the narrower preferred hint both offer wins
    let both = provider(&[("cpu", vec![h(&[0], true), h(&[0, 1], false)])]);
    assert_eq!(be(&[both.clone(), both]), (h(&[0], true), true));
    // a wider preferred hint beats narrower non-preferred ones
    let a = provider(&[("cpu", vec![h(&[1], true), h(&[0, 1], true)])]);
    let b = provider(&[("mem", vec![h(&[0], true), h(&[1], false), h(&[0, 1], true)])]);
    assert_eq!(be(&[a, b]), (h(&[0, 1], true), true));
    // the same with both resources from one provider
    let one = provider(&[
        ("cpu", vec![h(&[1], true), h(&[0, 1], true)]),
        (
            "memory",
            vec![h(&[0], true), h(&[1], false), h(&[0, 1], true)],
        ),
    ]);
    assert_eq!(be(&[one]), (h(&[0, 1], true), true));
    // a provider without preference leaves the other's hint
    assert_eq!(be(&[Hints::new(), q0]), (h(&[0], true), true));
    // two preferred hints of different masks merge into a non-preferred one
    let x = provider(&[("cpu", vec![h(&[0, 1], true)])]);
    let y = provider(&[("mem", vec![h(&[0], true)])]);
    assert_eq!(be(&[x, y]), (h(&[0], false), true));
}

#[test]
fn restricted_refuses_what_best_effort_admits() {
    let r = |p: &[Hints]| merge(PolicyName::Restricted, &[0, 1], p);
    let p0 = provider(&[("cpu", vec![h(&[0], true)])]);
    let q1 = provider(&[("mem", vec![h(&[1], true)])]);
    assert_eq!(r(&[p0.clone(), q1]), (h(&[0, 1], false), false));
    let q0 = provider(&[("mem", vec![h(&[0], true)])]);
    assert_eq!(r(&[p0, q0]), (h(&[0], true), true));
    assert_eq!(r(&[provider(&[("r", vec![])])]), (h(&[0, 1], false), false));
}

#[test]
fn single_numa_node_keeps_single_node_hints_and_turns_every_node_into_any() {
    let s = |p: &[Hints]| merge(PolicyName::SingleNumaNode, &[0, 1], p);
    // only a two-node hint: nothing left, refused
    let wide = provider(&[("cpu", vec![h(&[0, 1], true)])]);
    assert_eq!(s(&[wide]), (any(false), false));
    // no preference: every node becomes "any", admitted
    assert_eq!(s(&[Hints::new()]), (any(true), true));
    let p = provider(&[("cpu", vec![h(&[0], true), h(&[1], true), h(&[0, 1], true)])]);
    let q = provider(&[("mem", vec![h(&[1], true), h(&[0, 1], true)])]);
    assert_eq!(s(&[p, q]), (h(&[1], true), true));
    // a non-preferred single node is filtered out too
    let n = provider(&[("cpu", vec![h(&[0], false)])]);
    assert_eq!(s(&[n]), (any(false), false));
}

#[test]
fn one_numa_node_machines_merge_to_node_zero() {
    let p = provider(&[("cpu", vec![h(&[0], true)])]);
    assert_eq!(
        merge(PolicyName::BestEffort, &[0], std::slice::from_ref(&p)),
        (h(&[0], true), true)
    );
    assert_eq!(
        merge(PolicyName::Restricted, &[0], std::slice::from_ref(&p)),
        (h(&[0], true), true)
    );
    // on one node, single-numa-node's "every node" is "any"
    assert_eq!(
        merge(PolicyName::SingleNumaNode, &[0], &[p]),
        (any(true), true)
    );
    let none = provider(&[("cpu", vec![])]);
    assert_eq!(
        merge(PolicyName::SingleNumaNode, &[0], &[none]),
        (any(false), false)
    );
}

#[test]
fn non_preferred_hints_creep_up_to_the_widest_narrowest_mask() {
    let p = provider(&[("cpu", vec![h(&[0, 1], false), h(&[0, 1, 2], false)])]);
    let q = provider(&[("mem", vec![h(&[0, 1, 2, 3], false)])]);
    let (best, admit) = merge(PolicyName::BestEffort, &[0, 1, 2, 3], &[p, q]);
    assert_eq!((best, admit), (h(&[0, 1, 2], false), true));
}

#[test]
fn prefer_closest_numa_nodes_picks_the_nearer_pair() {
    let rows = [
        vec![10, 11, 20, 20],
        vec![11, 10, 20, 20],
        vec![20, 20, 10, 11],
        vec![20, 20, 11, 10],
    ];
    let numa = NumaInfo::new(vec![0, 1, 2, 3], rows.into_iter().enumerate().collect());
    let p = provider(&[("cpu", vec![h(&[0, 2], true), h(&[2, 3], true)])]);
    let closest = PolicyOptions {
        prefer_closest_numa: true,
        ..PolicyOptions::default()
    };
    let with = Policy::new(PolicyName::BestEffort, numa.clone(), closest);
    assert_eq!(with.merge(std::slice::from_ref(&p)).0, h(&[2, 3], true));
    let without = Policy::new(
        PolicyName::BestEffort,
        numa.clone(),
        PolicyOptions::default(),
    );
    assert_eq!(without.merge(std::slice::from_ref(&p)).0, h(&[0, 2], true));
    // single-numa-node never looks at distances
    let snn = Policy::new(PolicyName::SingleNumaNode, numa, closest);
    let singles = provider(&[("cpu", vec![h(&[3], true), h(&[1], true)])]);
    assert_eq!(snn.merge(&[singles]).0, h(&[1], true));
}
