//! The memory manager on fake sysfs trees, alone and behind the topology manager.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::memorymanager::NumaMemory;
use crate::topology::{NumaInfo, TopologyManager, TopologySettings};

const GI: u64 = 1 << 30;

/// A sysfs node directory per (id, MiB of memory).
fn sysfs(root: &Path, nodes: &[(usize, u64)]) -> NumaMemory {
    for (id, mib) in nodes {
        let dir = root.join(format!("node{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("meminfo"),
            format!("Node {id} MemTotal: {} kB\n", mib * 1024),
        )
        .unwrap();
    }
    NumaMemory::from_sysfs(root).unwrap()
}

fn settings(policy: &str, dir: &Path, reserved_gi: u64) -> MemoryManagerSettings {
    MemoryManagerSettings {
        policy: policy.into(),
        reserved: BTreeMap::from([(
            0,
            BTreeMap::from([("memory".to_string(), reserved_gi * GI)]),
        )]),
        state_dir: dir.to_path_buf(),
    }
}

fn node_reserved(gi: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("memory".to_string(), gi * GI)])
}

fn container(name: &str, memory: &str, restart: Option<&str>) -> Container {
    let list = BTreeMap::from([
        ("cpu".to_string(), Quantity("1".into())),
        ("memory".to_string(), Quantity(memory.into())),
    ]);
    Container {
        name: name.into(),
        restart_policy: restart.map(str::to_string),
        resources: Some(ResourceRequirements {
            requests: Some(list.clone()),
            limits: Some(list),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(uid: &str, inits: Vec<Container>, apps: Vec<Container>) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(uid.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(uid.into());
    p.spec = Some(PodSpec {
        init_containers: (!inits.is_empty()).then_some(inits),
        containers: apps,
        ..Default::default()
    });
    p
}

fn topology(mm: &Arc<MemoryManager>, nodes: &[usize]) -> TopologyManager {
    let s = TopologySettings {
        policy: "restricted".into(),
        scope: "container".into(),
        options: BTreeMap::new(),
    };
    let numa = NumaInfo::new(nodes.to_vec(), BTreeMap::new());
    TopologyManager::new(&s, numa, vec![mm.clone() as Arc<dyn HintProvider>]).unwrap()
}

#[test]
fn static_on_one_node_admits_what_fits_and_refuses_what_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 4096)]);
    let mm = Arc::new(
        MemoryManager::new(
            &settings("Static", dir.path(), 1),
            machine,
            &node_reserved(1),
        )
        .unwrap(),
    );
    assert_eq!(mm.policy_name(), "Static");
    let allocatable = mm.allocatable_memory();
    assert_eq!(
        allocatable,
        [MemoryBlock {
            numa_ids: vec![0],
            resource: "memory".into(),
            bytes: 3 * GI
        }]
    );
    let tm = topology(&mm, &[0]);

    let fits = pod("a", vec![], vec![container("c", "2Gi", None)]);
    tm.admit(&fits).unwrap();
    assert_eq!(
        mm.memory_blocks("a", "c"),
        [MemoryBlock {
            numa_ids: vec![0],
            resource: "memory".into(),
            bytes: 2 * GI
        }]
    );
    assert_eq!(mm.numa_nodes_for("a", "c"), Some(vec![0]));

    let too_big = pod("b", vec![], vec![container("c", "2Gi", None)]);
    let err = tm.admit(&too_big).unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "Allocate failed due to [memorymanager] failed to find NUMA nodes to extend the current topology hint, which is unexpected"
    );
    assert!(mm.memory_blocks("b", "c").is_empty());
    // without the topology manager's affinity, kubelet's default-hint error
    let err = mm
        .allocate(&too_big, &container("c", "2Gi", None), None)
        .unwrap_err();
    assert!(err.message.contains(
        "failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
    ));

    // a pod that is not Guaranteed is left alone
    let mut burstable = pod("c", vec![], vec![container("c", "8Gi", None)]);
    burstable.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .limits = None;
    assert!(
        mm.container_hints(&burstable, &container("c", "8Gi", None))
            .is_empty()
    );
    tm.admit(&burstable).unwrap();
    assert!(mm.numa_nodes_for("c", "c").is_none());

    // giving memory back lets the second pod in
    mm.remove_container("a", "c");
    tm.admit(&too_big).unwrap();
    mm.remove_stale(&BTreeSet::new());
    assert!(mm.memory_blocks("b", "c").is_empty());
}

#[test]
fn hints_prefer_the_narrowest_groups_that_fit() {
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 2048), (1, 2048)]);
    let mm = MemoryManager::new(
        &settings("Static", dir.path(), 1),
        machine,
        &node_reserved(1),
    )
    .unwrap();
    let p = pod("a", vec![], vec![container("c", "1536Mi", None)]);
    let hints = mm.container_hints(&p, &container("c", "1536Mi", None));
    let shown: Vec<String> = hints["memory"].iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "{NUMANodeAffinity:1 Preferred:true}",
            "{NUMANodeAffinity:0,1 Preferred:false}"
        ]
    );
}

#[test]
fn init_containers_memory_is_reused_by_the_containers_after_them() {
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 4096)]);
    let mm = Arc::new(
        MemoryManager::new(
            &settings("Static", dir.path(), 1),
            machine,
            &node_reserved(1),
        )
        .unwrap(),
    );
    let tm = topology(&mm, &[0]);
    let p = pod(
        "a",
        vec![container("init", "2Gi", None)],
        vec![container("app", "2Gi", None)],
    );
    tm.admit(&p).unwrap();
    assert_eq!(mm.memory_blocks("a", "app")[0].bytes, 2 * GI);
    assert_eq!(
        mm.memory_blocks("a", "init")[0].bytes,
        0,
        "the app took over the init container's memory"
    );
}

#[test]
fn a_restart_restores_and_a_changed_reservation_or_policy_refuses_the_old_state() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 4096)]);
    {
        let mm = Arc::new(
            MemoryManager::new(
                &settings("Static", dir.path(), 1),
                machine.clone(),
                &node_reserved(1),
            )
            .unwrap(),
        );
        topology(&mm, &[0])
            .admit(&pod("a", vec![], vec![container("c", "1Gi", None)]))
            .unwrap();
    }
    let file = dir.path().join("memory_manager_state");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let again = MemoryManager::new(
        &settings("Static", dir.path(), 1),
        machine.clone(),
        &node_reserved(1),
    )
    .unwrap();
    assert_eq!(again.numa_nodes_for("a", "c"), Some(vec![0]));
    assert_eq!(again.memory_blocks("a", "c")[0].bytes, GI);

    let err = MemoryManager::new(
        &settings("Static", dir.path(), 2),
        machine.clone(),
        &node_reserved(2),
    )
    .err()
    .unwrap()
    .to_string();
    assert_eq!(
        err,
        format!(
            "could not restore state from checkpoint: [memorymanager] the expected machine state is different from the real one, please drain this node and delete the memory manager checkpoint file \"{}\" before restarting Kubelet",
            file.display()
        )
    );
    let err = MemoryManager::new(&settings("None", dir.path(), 1), machine, &node_reserved(1))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("[memorymanager] configured policy \"None\" differs from state checkpoint policy \"Static\""), "{err}");
}

#[test]
fn start_up_refuses_what_kubelet_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 4096)]);
    let err = |s: MemoryManagerSettings, r: BTreeMap<String, u64>| {
        MemoryManager::new(&s, machine.clone(), &r)
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        err(settings("Dynamic", dir.path(), 1), node_reserved(1)),
        "unknown policy: \"Dynamic\""
    );
    assert_eq!(
        err(settings("Static", dir.path(), 1), node_reserved(2)),
        "the total amount \"1Gi\" of type \"memory\" is not equal to the value \"2Gi\" determined by Node Allocatable feature"
    );
    let mut none_reserved = settings("Static", dir.path(), 0);
    none_reserved.reserved.clear();
    assert_eq!(
        err(none_reserved, BTreeMap::new()),
        "[memorymanager] you should specify the system reserved memory"
    );
    // policy None writes its (empty) state and asks nothing
    let mm = MemoryManager::new(
        &settings("None", dir.path(), 1),
        machine.clone(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(mm.allocatable_memory().is_empty());
    let p = pod("a", vec![], vec![container("c", "1Gi", None)]);
    assert!(mm.pod_hints(&p).is_empty());
    mm.allocate(&p, &container("c", "1Gi", None), None).unwrap();
    assert!(mm.memory_blocks("a", "c").is_empty());
}

#[test]
fn pinning_requests_and_refusals_reach_kubelets_metrics() {
    let series = [
        "kubelet_memory_manager_pinning_requests_total",
        "kubelet_memory_manager_pinning_errors_total",
    ];
    let before = series.map(crate::metrics::sample);
    let delta = |i: usize| crate::metrics::sample(series[i]) - before[i];
    let dir = tempfile::tempdir().unwrap();
    let machine = sysfs(&dir.path().join("sys"), &[(0, 4096)]);
    let mm = MemoryManager::new(
        &settings("Static", dir.path(), 1),
        machine,
        &node_reserved(1),
    )
    .unwrap();
    let fits = pod("a", vec![], vec![container("c", "2Gi", None)]);
    mm.allocate(&fits, &container("c", "2Gi", None), None)
        .unwrap();
    assert!(delta(0) >= 1.0, "a Guaranteed container's memory is pinned");
    let too_big = pod("b", vec![], vec![container("c", "2Gi", None)]);
    mm.allocate(&too_big, &container("c", "2Gi", None), None)
        .unwrap_err();
    assert!(delta(0) >= 2.0);
    assert!(delta(1) >= 1.0, "a refusal is a pinning error");
}
