//! Admission per scope with fake hint providers (the one boundary these tests fake).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::*;
use crate::topology::NumaMask;

/// A provider that answers with fixed hints and records its allocations.
struct FakeProvider {
    name: &'static str,
    container_hints: BTreeMap<String, Hints>,
    pod_hints: Hints,
    fail_on: Option<String>,
    allocated: Mutex<Vec<(String, Option<NumaMask>)>>,
}

impl FakeProvider {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            container_hints: BTreeMap::new(),
            pod_hints: Hints::new(),
            fail_on: None,
            allocated: Mutex::new(Vec::new()),
        }
    }

    fn allocated(&self) -> Vec<(String, Option<NumaMask>)> {
        self.allocated.lock().unwrap().clone()
    }
}

impl HintProvider for FakeProvider {
    fn name(&self) -> &'static str {
        self.name
    }
    fn container_hints(&self, _pod: &Pod, c: &Container) -> Hints {
        self.container_hints
            .get(&c.name)
            .cloned()
            .unwrap_or_default()
    }
    fn pod_hints(&self, _pod: &Pod) -> Hints {
        self.pod_hints.clone()
    }
    fn allocate(
        &self,
        _pod: &Pod,
        c: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        if self.fail_on.as_deref() == Some(c.name.as_str()) {
            return Err(AdmitError::unexpected("no room"));
        }
        self.allocated
            .lock()
            .unwrap()
            .push((c.name.clone(), affinity));
        Ok(())
    }
}

fn hint(nodes: &[usize], preferred: bool) -> TopologyHint {
    TopologyHint {
        numa_affinity: Some(NumaMask::of(nodes.iter().copied())),
        preferred,
    }
}

fn hints(resource: &str, list: Vec<TopologyHint>) -> Hints {
    [(resource.to_string(), list)].into_iter().collect()
}

fn pod(inits: &[&str], apps: &[&str]) -> Pod {
    let c = |n: &&str| Container {
        name: n.to_string(),
        ..Default::default()
    };
    let mut p = Pod::default();
    p.metadata.name = Some("p".into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("uid-1".into());
    p.spec = Some(PodSpec {
        init_containers: (!inits.is_empty()).then(|| inits.iter().map(c).collect()),
        containers: apps.iter().map(c).collect(),
        ..Default::default()
    });
    p
}

fn settings(policy: &str, scope: &str) -> TopologySettings {
    TopologySettings {
        policy: policy.into(),
        scope: scope.into(),
        options: BTreeMap::new(),
    }
}

fn two_nodes() -> NumaInfo {
    NumaInfo::new(vec![0, 1], BTreeMap::new())
}

fn manager(policy: &str, scope: &str, providers: &[Arc<FakeProvider>]) -> TopologyManager {
    let providers = providers
        .iter()
        .map(|p| p.clone() as Arc<dyn HintProvider>)
        .collect();
    TopologyManager::new(&settings(policy, scope), two_nodes(), providers).unwrap()
}

#[test]
fn container_scope_walks_init_containers_first_and_stores_each_affinity() {
    let mut cpu = FakeProvider::new("cpu");
    cpu.container_hints
        .insert("init".into(), hints("cpu", vec![hint(&[1], true)]));
    cpu.container_hints.insert(
        "app".into(),
        hints("cpu", vec![hint(&[0], true), hint(&[1], true)]),
    );
    let mut mem = FakeProvider::new("memory");
    mem.container_hints
        .insert("app".into(), hints("memory", vec![hint(&[0], true)]));
    let (cpu, mem) = (Arc::new(cpu), Arc::new(mem));
    let tm = manager("restricted", "container", &[cpu.clone(), mem.clone()]);
    assert_eq!(
        (tm.policy_name(), tm.scope_name()),
        ("restricted", "container")
    );

    tm.admit(&pod(&["init"], &["app"])).unwrap();
    let n = |nodes: &[usize]| Some(NumaMask::of(nodes.iter().copied()));
    assert_eq!(
        cpu.allocated(),
        [("init".into(), n(&[1])), ("app".into(), n(&[0]))]
    );
    assert_eq!(mem.allocated(), cpu.allocated());
    assert_eq!(tm.affinity("uid-1", "app"), Some(hint(&[0], true)));
    assert_eq!(tm.affinity("uid-1", "init"), Some(hint(&[1], true)));

    tm.remove_container("uid-1", "init");
    assert_eq!(tm.affinity("uid-1", "init"), None);
    tm.remove_pod("uid-1");
    assert_eq!(tm.affinity("uid-1", "app"), None);
}

#[test]
fn a_non_preferred_best_hint_is_refused_with_kubelets_reason_and_message() {
    let mut cpu = FakeProvider::new("cpu");
    cpu.container_hints
        .insert("app".into(), hints("cpu", vec![hint(&[0], true)]));
    let mut dev = FakeProvider::new("devices");
    dev.container_hints
        .insert("app".into(), hints("gpu", vec![hint(&[1], true)]));
    let (cpu, dev) = (Arc::new(cpu), Arc::new(dev));
    for policy in ["restricted", "single-numa-node"] {
        let tm = manager(policy, "container", &[cpu.clone(), dev.clone()]);
        let err = tm.admit(&pod(&[], &["ok", "app"])).unwrap_err();
        assert_eq!(err.reason, "TopologyAffinityError");
        assert_eq!(
            err.message,
            "Resources cannot be allocated with Topology locality"
        );
        assert_eq!(tm.affinity("uid-1", "app"), None, "{policy}");
        // the container before it was admitted and allocated, and stays so
        assert!(tm.affinity("uid-1", "ok").is_some(), "{policy}");
    }
    // best-effort admits the same pod with every node, not preferred
    let tm = manager("best-effort", "container", &[cpu.clone(), dev.clone()]);
    tm.admit(&pod(&[], &["app"])).unwrap();
    assert_eq!(tm.affinity("uid-1", "app"), Some(hint(&[0, 1], false)));
}

#[test]
fn pod_scope_merges_once_and_allocates_every_container_at_it() {
    let mut cpu = FakeProvider::new("cpu");
    cpu.pod_hints = hints("cpu", vec![hint(&[0], true), hint(&[1], true)]);
    let mut mem = FakeProvider::new("memory");
    mem.pod_hints = hints("memory", vec![hint(&[1], true)]);
    let (cpu, mem) = (Arc::new(cpu), Arc::new(mem));
    let tm = manager("single-numa-node", "pod", &[cpu.clone(), mem.clone()]);
    tm.admit(&pod(&["i"], &["a", "b"])).unwrap();
    let one = Some(NumaMask::of([1]));
    assert_eq!(
        cpu.allocated(),
        [("i".into(), one), ("a".into(), one), ("b".into(), one)]
    );
    for c in ["i", "a", "b"] {
        assert_eq!(tm.affinity("uid-1", c), Some(hint(&[1], true)));
    }

    let mut other = FakeProvider::new("devices");
    other.pod_hints = hints("gpu", vec![hint(&[0], true)]);
    let tm = manager("single-numa-node", "pod", &[Arc::new(other), mem.clone()]);
    let err = tm.admit(&pod(&[], &["a"])).unwrap_err();
    assert_eq!(err, AdmitError::topology_affinity());
}

#[test]
fn the_first_allocation_error_refuses_the_pod_without_rolling_back() {
    let first = Arc::new(FakeProvider::new("cpu"));
    let mut second = FakeProvider::new("memory");
    second.fail_on = Some("b".into());
    let second = Arc::new(second);
    let tm = manager("best-effort", "container", &[first.clone(), second.clone()]);
    let err = tm.admit(&pod(&[], &["a", "b", "c"])).unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "Allocate failed due to no room, which is unexpected"
    );
    let names: Vec<String> = first.allocated().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["a", "b"],
        "the first provider keeps b, c is never reached"
    );
}

#[test]
fn policy_none_asks_no_hints_and_allocates_anywhere() {
    let mut cpu = FakeProvider::new("cpu");
    cpu.container_hints.insert("a".into(), hints("cpu", vec![]));
    let cpu = Arc::new(cpu);
    let tm = manager("none", "bogus", std::slice::from_ref(&cpu));
    assert_eq!((tm.policy_name(), tm.scope_name()), ("none", "none"));
    tm.admit(&pod(&["i"], &["a"])).unwrap();
    assert_eq!(cpu.allocated(), [("i".into(), None), ("a".into(), None)]);
    assert_eq!(tm.affinity("uid-1", "a"), None);
}

#[test]
fn start_up_refuses_what_kubelet_refuses() {
    let err = |s: TopologySettings, numa: NumaInfo| {
        TopologyManager::new(&s, numa, Vec::new())
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        err(settings("best-effort", "node"), two_nodes()),
        "unknown scope: \"node\""
    );
    assert_eq!(
        err(settings("strict", "pod"), two_nodes()),
        "unknown policy: \"strict\""
    );
    let nine = NumaInfo::new((0..9).collect(), BTreeMap::new());
    assert_eq!(
        err(settings("restricted", "container"), nine.clone()),
        "unsupported on machines with more than 8 NUMA Nodes"
    );
    let mut s = settings("restricted", "container");
    s.options
        .insert("max-allowable-numa-nodes".into(), "9".into());
    assert!(TopologyManager::new(&s, nine, Vec::new()).is_ok());
    let mut s = settings("best-effort", "container");
    s.options
        .insert("prefer-closest-numa-nodes".into(), "true".into());
    assert_eq!(
        err(s, two_nodes()),
        "cannot discover NUMA topology: error getting NUMA distances from sysfs"
    );
}

#[test]
fn admissions_refusals_and_numa_alignment_reach_kubelets_metrics() {
    let aligned = |scope: &str| {
        format!(
            "kubelet_container_aligned_compute_resources_count{{boundary=\"numa_node\",scope=\"{scope}\"}}"
        )
    };
    let failed = "kubelet_container_aligned_compute_resources_failure_count{boundary=\"numa_node\",scope=\"container\"}";
    let series = [
        "kubelet_topology_manager_admission_requests_total".to_string(),
        "kubelet_topology_manager_admission_errors_total".to_string(),
        "kubelet_topology_manager_admission_duration_ms_count".to_string(),
        aligned("container"),
        aligned("pod"),
        failed.to_string(),
    ];
    let before: Vec<f64> = series.iter().map(|s| crate::metrics::sample(s)).collect();
    let delta = |i: usize| crate::metrics::sample(&series[i]) - before[i];

    let mut cpu = FakeProvider::new("cpu");
    cpu.container_hints
        .insert("app".into(), hints("cpu", vec![hint(&[0], true)]));
    cpu.container_hints
        .insert("split".into(), hints("cpu", vec![hint(&[0, 1], false)]));
    cpu.pod_hints = hints("cpu", vec![hint(&[1], true)]);
    let cpu = Arc::new(cpu);
    let tm = manager("single-numa-node", "container", std::slice::from_ref(&cpu));
    tm.admit(&pod(&[], &["app"])).unwrap();
    assert!(delta(0) >= 1.0, "every admission is counted");
    assert!(delta(2) >= 1.0, "and timed");
    assert!(
        delta(3) >= 1.0,
        "single-numa-node guarantees one node per container"
    );
    tm.admit(&pod(&[], &["split"])).unwrap_err();
    assert!(delta(0) >= 2.0);
    assert!(delta(1) >= 1.0, "a refusal is an admission error");
    assert!(delta(5) >= 1.0, "and a failed NUMA alignment");

    let tm = manager("single-numa-node", "pod", &[cpu]);
    tm.admit(&pod(&[], &["app"])).unwrap();
    assert!(delta(4) >= 1.0, "the pod scope counts the pod once");
}
