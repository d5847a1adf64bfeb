//! The manager on fake sysfs trees and real state files in tempdirs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::state::STATE_FILE;
use super::topology::fake::{FakeCpu, two_socket_ht, write_sysfs};
use super::*;
use crate::topology::{HintProvider, NumaMask};

fn container(name: &str, cpu: &str, restart: Option<&str>) -> Container {
    let list = BTreeMap::from([
        ("cpu".to_owned(), Quantity(cpu.into())),
        ("memory".to_owned(), Quantity("64Mi".into())),
    ]);
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: Some(list.clone()),
            limits: Some(list),
            ..Default::default()
        }),
        restart_policy: restart.map(Into::into),
        ..Default::default()
    }
}

fn pod(uid: &str, inits: Vec<Container>, apps: Vec<Container>) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(format!("pod-{uid}"));
    p.metadata.namespace = Some("default".into());
    p.spec = Some(PodSpec {
        init_containers: (!inits.is_empty()).then_some(inits),
        containers: apps,
        ..Default::default()
    });
    p
}

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn settings(dir: &Path, options: &[(&str, &str)], millicpu: u64) -> CpuManagerSettings {
    CpuManagerSettings {
        policy: CpuManagerPolicy::Static,
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        reserved_system_cpus: None,
        reserved_millicpu: millicpu,
        state_dir: dir.to_path_buf(),
    }
}

fn two_cpus(root: &Path) -> CpuTopology {
    write_sysfs(
        root,
        &[
            FakeCpu {
                id: 0,
                socket: 0,
                numa: 0,
                siblings: "0",
                l3: None,
            },
            FakeCpu {
                id: 1,
                socket: 0,
                numa: 0,
                siblings: "1",
                l3: None,
            },
        ],
    );
    CpuTopology::discover(root).unwrap()
}

fn big(root: &Path) -> CpuTopology {
    two_socket_ht(root);
    CpuTopology::discover(root).unwrap()
}

#[test]
fn a_guaranteed_container_gets_a_cpu_and_gives_it_back() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(settings(dir.path(), &[], 100), two_cpus(sys.path())).unwrap();
    assert_eq!(m.policy_name(), "static");
    assert_eq!(m.reserved_cpus(), set("0"));
    assert_eq!(m.allocatable_cpus(), set("1"));
    assert_eq!(m.shared_pool(), set("0-1"));
    let p = pod("u1", vec![], vec![container("main", "1", None)]);
    let c = &p.spec.as_ref().unwrap().containers[0];
    m.take_changes();
    m.allocate(&p, c, None).unwrap();
    assert_eq!(m.exclusive_cpus("u1", "main"), Some(set("1")));
    assert_eq!(m.cpuset_for("u1", "main"), Some(set("1")));
    assert_eq!(m.shared_pool(), set("0"));
    assert_eq!(m.cpuset_for("u1", "other"), Some(set("0")));
    assert!(m.take_changes());
    assert!(!m.take_changes());
    // A second one finds only the reserved CPU: kubelet's unexpected error.
    let q = pod("u2", vec![], vec![container("main", "1", None)]);
    let err = m
        .allocate(&q, &q.spec.as_ref().unwrap().containers[0], None)
        .unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
    );
    // A fractional or burstable container stays shared.
    let f = pod("u3", vec![], vec![container("main", "500m", None)]);
    m.allocate(&f, &f.spec.as_ref().unwrap().containers[0], None)
        .unwrap();
    assert_eq!(m.exclusive_cpus("u3", "main"), None);
    m.remove_container("u1", "main");
    assert_eq!(m.shared_pool(), set("0-1"));
    assert!(m.take_changes());
}

#[test]
fn whole_cores_on_a_two_socket_machine_and_full_pcpus_only_refuses_odd_requests() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topo = big(sys.path());
    let m = CpuManager::new(
        settings(dir.path(), &[("full-pcpus-only", "true")], 1000),
        topo,
    )
    .unwrap();
    // One CPU reserved by topology: CPU 0; its sibling 8 is kept from whole-core use.
    assert_eq!(m.reserved_cpus(), set("0"));
    let p = pod("u1", vec![], vec![container("main", "4", None)]);
    m.allocate(&p, &p.spec.as_ref().unwrap().containers[0], None)
        .unwrap();
    // Two whole cores from socket 0, the fuller one (CPU 0 is reserved there).
    assert_eq!(m.exclusive_cpus("u1", "main"), Some(set("1-2,9-10")));
    let odd = pod("u2", vec![], vec![container("main", "3", None)]);
    let err = m
        .allocate(&odd, &odd.spec.as_ref().unwrap().containers[0], None)
        .unwrap_err();
    assert_eq!(err.reason, "SMTAlignmentError");
    assert_eq!(
        err.message,
        "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    );
    let huge = pod("u3", vec![], vec![container("main", "12", None)]);
    let err = m
        .allocate(&huge, &huge.spec.as_ref().unwrap().containers[0], None)
        .unwrap_err();
    assert_eq!(
        err.message,
        "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 10, requested CPUs = 12, CPUs per core = 2"
    );
}

#[test]
fn the_numa_affinity_decides_where_cpus_come_from_and_hints_prefer_one_node() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(settings(dir.path(), &[], 1000), big(sys.path())).unwrap();
    let p = pod("u1", vec![], vec![container("main", "2", None)]);
    let c = &p.spec.as_ref().unwrap().containers[0];
    let hints = m.container_hints(&p, c);
    let cpu = &hints["cpu"];
    assert_eq!(cpu.len(), 3);
    assert_eq!(cpu[0].numa_affinity, Some(NumaMask::of([0])));
    assert!(cpu[0].preferred && cpu[1].preferred && !cpu[2].preferred);
    assert_eq!(cpu[2].numa_affinity, Some(NumaMask::of([0, 1])));
    m.allocate(&p, c, Some(NumaMask::of([1]))).unwrap();
    assert_eq!(m.exclusive_cpus("u1", "main"), Some(set("4,12")));
    // Already allocated: the hints are regenerated from the CPUs held.
    let again = &m.container_hints(&p, c)["cpu"];
    assert_eq!(again[0].numa_affinity, Some(NumaMask::of([1])));
    // A burstable pod has no preference.
    let mut b = pod("u2", vec![], vec![container("main", "2", None)]);
    b.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .limits = None;
    assert!(
        m.container_hints(&b, &b.spec.as_ref().unwrap().containers[0])
            .is_empty()
    );
    // The pod scope counts the pod's containers together.
    let two = pod(
        "u3",
        vec![],
        vec![container("a", "6", None), container("b", "4", None)],
    );
    let ph = &m.pod_hints(&two)["cpu"];
    assert!(
        ph.iter()
            .all(|h| h.numa_affinity == Some(NumaMask::of([0, 1])))
    );
}

#[test]
fn app_containers_reuse_init_cpus_and_sidecars_keep_theirs() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(settings(dir.path(), &[], 1000), big(sys.path())).unwrap();
    let p = pod(
        "u1",
        // The sidecar starts first and runs beside the init container and the app.
        vec![
            container("sidecar", "2", Some("Always")),
            container("init", "2", None),
        ],
        vec![container("app", "2", None)],
    );
    let spec = p.spec.as_ref().unwrap();
    let inits = spec.init_containers.as_ref().unwrap();
    m.allocate(&p, &inits[0], None).unwrap();
    let sidecar_cpus = m.exclusive_cpus("u1", "sidecar").unwrap();
    m.allocate(&p, &inits[1], None).unwrap();
    let init_cpus = m.exclusive_cpus("u1", "init").unwrap();
    assert!(sidecar_cpus.intersection(&init_cpus).is_empty());
    m.allocate(&p, &spec.containers[0], None).unwrap();
    // The app container runs on the finished init container's CPUs, not the sidecar's.
    assert_eq!(m.exclusive_cpus("u1", "app"), Some(init_cpus.clone()));
    // Removing the init container frees nothing the app still holds.
    let pool = m.shared_pool();
    m.remove_container("u1", "init");
    assert_eq!(m.shared_pool(), pool);
    // remove_stale drops what is no longer active.
    let active = BTreeSet::from([("u1".to_owned(), "app".to_owned())]);
    m.remove_stale(&active);
    assert_eq!(m.exclusive_cpus("u1", "sidecar"), None);
    assert_eq!(m.shared_pool(), pool.union(&sidecar_cpus));
}

#[test]
fn assignments_survive_a_restart_and_a_foreign_state_stops_the_start() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topo = big(sys.path());
    let m = CpuManager::new(settings(dir.path(), &[], 1000), topo.clone()).unwrap();
    let p = pod("u1", vec![], vec![container("main", "2", None)]);
    m.allocate(&p, &p.spec.as_ref().unwrap().containers[0], None)
        .unwrap();
    let held = m.exclusive_cpus("u1", "main").unwrap();
    drop(m);
    let file = dir.path().join(STATE_FILE);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let m = CpuManager::new(settings(dir.path(), &[], 1000), topo.clone()).unwrap();
    assert_eq!(m.exclusive_cpus("u1", "main"), Some(held.clone()));
    assert_eq!(m.shared_pool(), topo.all().difference(&held));
    drop(m);
    // The none policy refuses the static policy's file, naming it.
    let none = CpuManagerSettings {
        policy: CpuManagerPolicy::None,
        ..settings(dir.path(), &[], 0)
    };
    let err = CpuManager::new(none, topo.clone())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(r#"configured policy "none" differs from state checkpoint policy "static""#),
        "{err}"
    );
    assert!(
        err.contains("please drain this node and delete the CPU manager checkpoint file"),
        "{err}"
    );
    assert!(err.contains(&file.display().to_string()), "{err}");
    // A bigger reservation no longer fits the file.
    let err = CpuManager::new(settings(dir.path(), &[], 3000), topo.clone())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not all reserved cpus"), "{err}");
    // A tampered file fails its checksum.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace(&held.to_string(), "15")).unwrap();
    let err = CpuManager::new(settings(dir.path(), &[], 1000), topo)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("checkpoint is corrupted"), "{err}");
}

#[test]
fn strict_reservation_keeps_reserved_cpus_out_of_the_shared_pool() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path(), &[("strict-cpu-reservation", "true")], 0);
    s.reserved_system_cpus = Some(set("0,8"));
    let m = CpuManager::new(s, big(sys.path())).unwrap();
    assert_eq!(m.reserved_cpus(), set("0,8"));
    assert_eq!(m.shared_pool(), set("1-7,9-15"));
    assert_eq!(m.allocatable_cpus(), set("1-7,9-15"));
}

#[test]
fn start_refuses_what_kubelet_refuses() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topo = two_cpus(sys.path());
    let err = CpuManager::new(settings(dir.path(), &[], 0), topo.clone())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("requires systemreserved.cpu + kubereserved.cpu"),
        "{err}"
    );
    let err = CpuManager::new(
        settings(dir.path(), &[("align-by-socket", "true")], 1000),
        topo.clone(),
    )
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("Alpha-level Options not enabled"),
        "{err}"
    );
    let err = CpuManager::new(settings(dir.path(), &[], 3000), topo.clone())
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .contains("unable to reserve the required amount of CPUs"),
        "{err}"
    );
    // The none policy pins nothing and writes its own state.
    let none = CpuManagerSettings {
        policy: CpuManagerPolicy::None,
        ..settings(dir.path(), &[], 0)
    };
    let m = CpuManager::new(none, topo).unwrap();
    assert_eq!(m.policy_name(), "none");
    assert_eq!(m.cpuset_for("u", "c"), None);
    assert!(m.allocatable_cpus().is_empty());
    let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
    assert!(
        text.starts_with(r#"{"policyName":"none","defaultCpuSet":"""#),
        "{text}"
    );
}

#[test]
fn pinning_requests_refusals_and_the_pools_reach_kubelets_metrics() {
    let sys = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let m = CpuManager::new(
        settings(dir.path(), &[("full-pcpus-only", "true")], 1000),
        big(sys.path()),
    )
    .unwrap();
    let physical = "kubelet_container_aligned_compute_resources_count{boundary=\"physical_cpu\",scope=\"container\"}";
    let physical_failed = "kubelet_container_aligned_compute_resources_failure_count{boundary=\"physical_cpu\",scope=\"container\"}";
    let series = [
        "kubelet_cpu_manager_pinning_requests_total",
        "kubelet_cpu_manager_pinning_errors_total",
        physical,
        physical_failed,
    ];
    let before = series.map(crate::metrics::sample);
    let delta = |i: usize| crate::metrics::sample(series[i]) - before[i];
    // 16 CPUs, CPU 0 reserved: 15 shared, none exclusive, on either node.
    let (shared, exclusive, per_numa) = m.pool_sizes(&m.lock());
    assert_eq!((shared, exclusive), (15, 0));
    assert_eq!(per_numa, BTreeMap::from([(0, 0), (1, 0)]));

    let p = pod("u1", vec![], vec![container("main", "4", None)]);
    m.allocate(&p, &p.spec.as_ref().unwrap().containers[0], None)
        .unwrap();
    assert!(delta(0) >= 1.0, "a whole-CPU request is a pinning request");
    assert!(
        delta(2) >= 1.0,
        "full-pcpus-only counts the physical alignment"
    );
    let (shared, exclusive, per_numa) = m.pool_sizes(&m.lock());
    assert_eq!((shared, exclusive), (11, 4));
    assert_eq!(per_numa, BTreeMap::from([(0, 4), (1, 0)]));

    let odd = pod("u2", vec![], vec![container("main", "3", None)]);
    m.allocate(&odd, &odd.spec.as_ref().unwrap().containers[0], None)
        .unwrap_err();
    assert!(delta(0) >= 2.0);
    assert!(delta(1) >= 1.0, "an SMT refusal is a pinning error");
    assert!(delta(3) >= 1.0, "and a failed physical alignment");

    m.remove_container("u1", "main");
    let (shared, exclusive, _) = m.pool_sizes(&m.lock());
    assert_eq!((shared, exclusive), (15, 0));
}
