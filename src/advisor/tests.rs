//! The advisor's parsers, rates and collectors on plain files and synthetic readings.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::node::{cpu_cores, memory_from_meminfo};
use super::pods::{
    ContainerTarget, PodCollector, PodTarget, SampleKeys, TargetLister, container_cgroup,
};
use super::rate::RateTracker;
use super::system::system_usage;
use super::{DebugQuery, Shared, debug_query};
use crate::cm::{CgroupDriver, CgroupFs, CgroupTree, CgroupVersion, ResourceConfig};
use crate::contracts::{CpuReading, Throttling};
use crate::metriccache::{Aggregation, MetricCache, MetricKind, Sample, label, now_ms};
use crate::procfs::{CpuJiffies, parse_meminfo};

#[test]
fn node_cpu_cores_from_two_readings() {
    let a = CpuJiffies { busy: 1000 };
    let b = CpuJiffies { busy: 1150 };
    // 150 jiffies at 100 Hz over 1 s: 1.5 cores.
    assert_eq!(cpu_cores(a, b, Duration::from_secs(1), 100), Some(1.5));
    assert_eq!(cpu_cores(a, b, Duration::from_secs(2), 100), Some(0.75));
    assert_eq!(
        cpu_cores(b, a, Duration::from_secs(1), 100),
        None,
        "went back"
    );
    assert_eq!(cpu_cores(a, b, Duration::ZERO, 100), None);
}

#[test]
fn meminfo_usage_and_the_v2_root_fallback() {
    let text = "MemTotal:        8000000 kB\nMemFree:         1000000 kB\n\
                MemAvailable:    5000000 kB\nBuffers: 10 kB\nInactive(file):   500000 kB\n\
                SwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n";
    let m = parse_meminfo(text).unwrap();
    let node = memory_from_meminfo(&m);
    assert_eq!(node.usage_bytes, 7_000_000 * 1024);
    assert_eq!(node.working_set_bytes, 6_500_000 * 1024);
}

fn cpu(ns: u64, periods: u64, throttled: u64) -> CpuReading {
    CpuReading {
        usage_core_nanos: ns,
        usage_nano_cores: None,
        throttling: Some(Throttling {
            periods,
            throttled_periods: throttled,
            throttled_nanos: 0,
        }),
    }
}

#[test]
fn rates_from_deltas_first_reading_none_and_gone_ids_dropped() {
    let mut r = RateTracker::default();
    let t0 = UNIX_EPOCH + Duration::from_secs(1000);
    let mut c = cpu(1_000_000_000, 100, 10);
    let first = r.update("a", t0, &mut c);
    assert_eq!(first.cores, None, "the first reading gives no rate");
    assert_eq!(c.usage_nano_cores, None);
    r.end_round();
    // 0.5 s of CPU over 500 ms wall: 1 core; 5 of 20 periods throttled.
    let mut c = cpu(1_500_000_000, 120, 15);
    let rates = r.update("a", t0 + Duration::from_millis(500), &mut c);
    assert_eq!(rates.cores, Some(1.0));
    assert_eq!(c.usage_nano_cores, Some(1_000_000_000));
    assert_eq!(rates.throttled_ratio, Some(0.25));
    r.end_round();
    // No new periods: ratio 0, not NaN.
    let mut c = cpu(1_600_000_000, 120, 15);
    let rates = r.update("a", t0 + Duration::from_secs(1), &mut c);
    assert_eq!(rates.throttled_ratio, Some(0.0));
    assert!((rates.cores.unwrap() - 0.2).abs() < 1e-9);
    r.end_round();
    // A counter that went backwards (a new cgroup under the same ID): no rate.
    let mut c = cpu(5, 1, 0);
    let rates = r.update("a", t0 + Duration::from_secs(2), &mut c);
    assert_eq!(rates, super::rate::Rates::default());
    r.end_round();
    assert_eq!(r.tracked(), 1);
    // A round without "a" forgets it; its next reading is a first one again.
    r.end_round();
    assert_eq!(r.tracked(), 0);
    let mut c = cpu(10, 2, 0);
    assert_eq!(
        r.update("a", t0 + Duration::from_secs(4), &mut c).cores,
        None
    );
}

#[test]
fn system_part_is_node_minus_pods_floored_at_zero() {
    assert_eq!(system_usage(Some(2.0), Some(1.25)), Some(0.75));
    assert_eq!(system_usage(Some(1.0), Some(3.0)), Some(0.0));
    assert_eq!(system_usage(Some(1.0), None), Some(1.0));
    assert_eq!(system_usage(None, Some(1.0)), None);
}

#[test]
fn container_cgroups_are_named_as_containerd_does_per_driver() {
    let pod = "kubepods/burstable/podabc";
    assert_eq!(
        container_cgroup(CgroupDriver::Cgroupfs, pod, "123"),
        "kubepods/burstable/podabc/123"
    );
    let slice = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podabc.slice";
    assert_eq!(
        container_cgroup(CgroupDriver::Systemd, slice, "123"),
        format!("{slice}/cri-containerd-123.scope")
    );
}

struct Fixed(Vec<Arc<PodTarget>>);

impl TargetLister for Fixed {
    fn list(&self) -> Vec<Arc<PodTarget>> {
        self.0.clone()
    }
}

fn write(path: impl AsRef<Path>, text: &str) {
    fs::write(path.as_ref(), text).unwrap();
}

/// A v2 tree with one pod of one container, `usage_usec` set per cgroup.
fn v2_pod(dir: &Path, tree: &CgroupTree) -> PodTarget {
    let pod = "kubepods/burstable/poduid1";
    let ctr = container_cgroup(CgroupDriver::Cgroupfs, pod, "c1");
    tree.create(&ctr, &ResourceConfig::default()).unwrap();
    for (path, ws, anon) in [(pod, "9000", 6000), (ctr.as_str(), "4000", 2000)] {
        let d = dir.join(path);
        write(
            d.join("cpu.stat"),
            "usage_usec 0\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
        );
        write(d.join("memory.current"), ws);
        write(
            d.join("memory.stat"),
            &format!("inactive_file 1000\nactive_anon {anon}\ninactive_anon 500\nunevictable 0\n"),
        );
        write(d.join("pids.current"), "1\n");
    }
    PodTarget {
        uid: "uid1".into(),
        name: "p".into(),
        namespace: "ns".into(),
        started_at: SystemTime::now(),
        cgroup: Some(pod.into()),
        containers: vec![ContainerTarget {
            id: "c1".into(),
            name: "main".into(),
            image: "busybox".into(),
            created_at: SystemTime::now(),
            cgroup: ctr.into(),
            keys: SampleKeys::container("c1"),
        }],
        be_batch_cpu_milli: None,
        keys: SampleKeys::pod("uid1"),
    }
}

#[test]
fn pod_collector_writes_rates_koordlets_memory_and_readings_and_skips_vanished_cgroups() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path().join("cgroup.controllers"), "cpu memory pids");
    write(dir.path().join("cgroup.subtree_control"), "");
    let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
    let target = v2_pod(dir.path(), &tree);
    let gone = PodTarget {
        uid: "gone".into(),
        cgroup: Some("kubepods/burstable/podgone".into()),
        containers: Vec::new(),
        be_batch_cpu_milli: None,
        keys: SampleKeys::pod("gone"),
        ..target.clone()
    };
    let targets = vec![Arc::new(target.clone()), Arc::new(gone)];
    let mut c = PodCollector::new(tree, Box::new(Fixed(targets.clone())));
    let mut shared = Shared::default();
    c.collect_targets(&targets, &mut shared);
    // First round: memory and pids, no rate yet.
    let kinds: Vec<MetricKind> = shared.samples.iter().map(|s| s.key().kind).collect();
    assert!(!kinds.contains(&MetricKind::ContainerCpuUsage));
    assert!(kinds.contains(&MetricKind::ContainerMemoryUsage));
    assert!(kinds.contains(&MetricKind::PodPids));
    assert_eq!(shared.pods.len(), 2);
    assert!(
        shared.pods[1].cgroup.is_none(),
        "a vanished pod cgroup reads as None"
    );
    let ctr = &shared.pods[0].containers[0].cgroup;
    // The reading keeps kubelet's working set; the metric cache gets koordlet's memory.
    assert_eq!(ctr.memory.unwrap().working_set_bytes, 3000);
    assert_eq!(ctr.memory.unwrap().without_cache_bytes, 2500);
    // 0.8 s of CPU in the container between rounds, 2 of 4 periods throttled.
    std::thread::sleep(Duration::from_millis(200));
    let d = dir.path().join(&*target.containers[0].cgroup);
    write(
        d.join("cpu.stat"),
        "usage_usec 800000\nnr_periods 4\nnr_throttled 2\nthrottled_usec 10\n",
    );
    shared.samples.clear();
    c.collect_targets(&targets, &mut shared);
    let cache = MetricCache::default();
    cache.append(shared.samples.clone());
    // The process count is read every tenth round only, and written only then: a
    // point stamped now must not carry a count from up to 10 s ago.
    let pids_written =
        |shared: &Shared| (shared.samples.iter()).any(|s| s.key().kind == MetricKind::PodPids);
    assert!(!pids_written(&shared), "round 1 reuses the count");
    let mut rounds = Shared::default();
    for round in 2..=10 {
        rounds.samples.clear();
        c.collect_targets(&targets, &mut rounds);
        assert_eq!(pids_written(&rounds), round == 10, "round {round}");
    }
    let q = |kind, labels: &[(&str, &str)]| {
        cache
            .query(kind, labels, 0, i64::MAX)
            .value(Aggregation::Last)
            .unwrap()
    };
    let cores = q(
        MetricKind::ContainerCpuUsage,
        &[(label::CONTAINER_ID, "c1")],
    );
    // 0.8 s over a bit more than 200 ms of wall time.
    assert!(cores > 0.5 && cores <= 4.0, "{cores}");
    assert_eq!(
        q(
            MetricKind::ContainerCpuThrottled,
            &[(label::CONTAINER_ID, "c1")]
        ),
        0.5
    );
    assert_eq!(q(MetricKind::PodCpuUsage, &[(label::POD_UID, "uid1")]), 0.0);
    assert_eq!(
        q(MetricKind::PodMemoryUsage, &[(label::POD_UID, "uid1")]),
        6500.0
    );
    let reading = shared.pods[0].containers[0].cgroup.cpu.unwrap();
    assert!(reading.usage_nano_cores.unwrap() > 500_000_000);
    assert_eq!(shared.pods_cpu_cores, Some(0.0));
    assert_eq!(shared.pods_memory_bytes, 6500.0);
    assert_eq!(c.tracked(), 2, "the pod and its container");
}

#[test]
fn debug_query_aggregates_and_names_bad_parameters() {
    let cache = MetricCache::default();
    let now = now_ms();
    let l = [(label::CONTAINER_ID, "abc")];
    for (i, v) in [1.0, 2.0, 3.0].into_iter().enumerate() {
        let ts = now - 3000 + i64::try_from(i).unwrap() * 1000;
        cache.append([Sample::new(MetricKind::ContainerCpuUsage, &l, ts, v).unwrap()]);
    }
    let q = |agg: &str, window: &str| DebugQuery {
        kind: "container_cpu_usage".into(),
        container_id: Some("abc".into()),
        agg: Some(agg.into()),
        window: Some(window.into()),
        ..DebugQuery::default()
    };
    let v = debug_query(&cache, &q("last", "10s")).unwrap();
    assert_eq!(v["value"], 3.0);
    assert_eq!(v["count"], 3);
    assert_eq!(v["labels"]["container_id"], "abc");
    assert_eq!(debug_query(&cache, &q("avg", "10s")).unwrap()["value"], 2.0);
    // A window without points: count 0, value null.
    let none = DebugQuery {
        container_id: Some("other".into()),
        ..q("last", "5s")
    };
    let v = debug_query(&cache, &none).unwrap();
    assert_eq!((v["count"].as_u64(), v["value"].is_null()), (Some(0), true));
    let err = debug_query(&cache, &q("median", "5s")).unwrap_err();
    assert!(err.to_string().starts_with("agg:"), "{err}");
    let err = debug_query(&cache, &q("last", "2h")).unwrap_err();
    assert!(err.to_string().starts_with("window:"), "{err}");
    let err = debug_query(&cache, &q("last", "5")).unwrap_err();
    assert!(err.to_string().starts_with("window:"), "{err}");
    let bad_kind = DebugQuery {
        kind: "nope".into(),
        ..q("last", "5s")
    };
    assert!(
        debug_query(&cache, &bad_kind)
            .unwrap_err()
            .to_string()
            .starts_with("kind:")
    );
}

#[test]
fn debug_query_refuses_unknown_keys_and_lists_valid_values() {
    let pairs = |kv: &[(&str, &str)]| -> Vec<(String, String)> {
        kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    };
    let err = DebugQuery::from_pairs(&pairs(&[("kind", "pod_cpu_usage"), ("pod", "x")]))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("\"pod\" is not a query parameter"), "{err}");
    assert!(err.contains("pod_uid") && err.contains("window"), "{err}");
    let q = DebugQuery::from_pairs(&pairs(&[
        ("kind", "pod_cpu_usage"),
        ("pod_uid", "u1"),
        ("pod_uid", "u2"),
        ("agg", "avg"),
    ]))
    .unwrap();
    assert_eq!(
        (q.kind.as_str(), q.pod_uid.as_deref(), q.agg.as_deref()),
        ("pod_cpu_usage", Some("u1"), Some("avg"))
    );
    let cache = MetricCache::default();
    let bad_kind = DebugQuery {
        kind: "nope".into(),
        ..DebugQuery::default()
    };
    let err = debug_query(&cache, &bad_kind).unwrap_err().to_string();
    assert!(
        err.contains("node_cpu_usage") && err.contains("container_psi"),
        "{err}"
    );
    let bad_agg = DebugQuery {
        kind: "pod_cpu_usage".into(),
        agg: Some("median".into()),
        ..DebugQuery::default()
    };
    let err = debug_query(&cache, &bad_agg).unwrap_err().to_string();
    assert!(err.contains("p95") && err.contains("count"), "{err}");
}

#[tokio::test]
async fn a_round_publishes_a_snapshot_and_node_samples() {
    // The real procfs and the real cgroup mount, no pods: the node part must be there.
    let version = crate::cm::detect_cgroup_version(Path::new(crate::cm::HOST_MOUNT)).unwrap();
    let tree = CgroupTree::host(version).unwrap();
    let cache = Arc::new(MetricCache::default());
    let readings = Arc::new(crate::contracts::LatestReadings::default());
    let root = tempfile::tempdir().unwrap();
    let mut advisor = super::Advisor::new(super::AdvisorDeps {
        cache: cache.clone(),
        readings: readings.clone(),
        node_name: "n1".into(),
        proc_root: "/proc".into(),
        sys_root: "/sys".into(),
        cgroups: tree,
        kubepods: None,
        runtime_cgroup: None,
        lister: Box::new(Fixed(Vec::new())),
        // The root cgroup stands in for the BestEffort tier: every CPU, no quota.
        best_effort: Some(String::new()),
        page_cache: true,
        // A host application whose cgroup is the root: it is read like any other.
        host_apps: tokio::sync::watch::channel(vec![crate::koordapi::HostApp {
            name: "everything".into(),
            qos: "LS".into(),
            priority: String::new(),
            base: crate::koordapi::CgroupBase::CgroupRoot,
            parts: Vec::new(),
        }])
        .1,
        qos_paths: crate::koordapi::QosPaths::default(),
        root_dir: root.path().to_path_buf(),
        cri: Arc::new(crate::cri::FakeRuntime::default()),
    });
    advisor.round().await;
    // The node and pod collectors run every second.
    tokio::time::sleep(super::RES_USED_INTERVAL).await;
    advisor.round().await;
    let snap = readings.get().unwrap();
    assert_eq!(snap.node.name, "n1");
    assert!(snap.node.memory_capacity_bytes > 0);
    assert!(snap.node.started_at > UNIX_EPOCH);
    assert!(snap.node.max_pid.unwrap() > 0);
    assert!(snap.node.processes.unwrap() > 0);
    let cpu = snap.node.cgroup.cpu.unwrap();
    assert!(cpu.usage_core_nanos > 0);
    assert!(
        cpu.usage_nano_cores.is_some(),
        "the second round has a rate"
    );
    let mem = snap.node.cgroup.memory.unwrap();
    assert!(mem.working_set_bytes > 0 && mem.working_set_bytes <= mem.usage_bytes);
    let fs = snap.node.fs.clone().unwrap();
    assert!(fs.capacity_bytes > 0 && fs.available_bytes <= fs.capacity_bytes);
    // The fake's image filesystem is at `/`, its inodes are its images (none).
    assert_eq!(snap.node.image_fs.as_ref().unwrap().inodes_used, Some(0));
    let now = now_ms();
    let last = |kind| {
        cache
            .query(kind, &[], now - 10_000, now)
            .value(Aggregation::Last)
    };
    assert!(last(MetricKind::NodeCpuUsage).unwrap() >= 0.0);
    assert!(last(MetricKind::NodeMemoryUsage).unwrap() > 0.0);
    // No pods: the system part is the node less the host application.
    let app_memory = cache
        .query(MetricKind::HostAppMemoryUsage, &[], now - 10_000, now)
        .value(Aggregation::Last)
        .unwrap();
    assert_eq!(
        last(MetricKind::SysMemoryUsage).unwrap(),
        (last(MetricKind::NodeMemoryUsage).unwrap() - app_memory).max(0.0)
    );
    // The page cache counts in MemTotal − MemFree, not in MemTotal − MemAvailable.
    assert!(
        last(MetricKind::NodeMemoryUsageWithPageCache).unwrap()
            >= last(MetricKind::NodeMemoryUsage).unwrap()
    );
    // The BE tier (here the root cgroup): its real limit is every online CPU, no batch
    // pods ask for anything, and its usage is a rate.
    let be = |allocation: &str| {
        cache
            .query(
                MetricKind::NodeBe,
                &[("be_resource", "cpu"), ("be_allocation", allocation)],
                now - 10_000,
                now,
            )
            .value(Aggregation::Last)
            .unwrap()
    };
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpus = crate::cm::parse_cpu_list(&online).unwrap().len();
    assert_eq!(be("real-limit"), (cpus * 1000) as f64);
    assert_eq!(be("request"), 0.0);
    // A rate over about a second of the whole machine: with every CPU busy (the lib
    // suite around it) it reads at the CPU count, and the time between a reading's
    // clock and its file read may put it a little over.
    let usage = be("usage");
    assert!(
        usage >= 0.0 && usage <= (cpus * 1000) as f64 * 1.25,
        "BE usage {usage} milli-CPUs on {cpus} CPUs"
    );
    // The host application: a CPU rate after two rounds, and its memory both ways.
    let app = |kind| {
        cache
            .query(kind, &[("host_app_name", "everything")], now - 10_000, now)
            .value(Aggregation::Last)
            .unwrap()
    };
    assert!(app(MetricKind::HostAppCpuUsage) >= 0.0);
    assert!(
        app(MetricKind::HostAppMemoryUsageWithPageCache) >= app(MetricKind::HostAppMemoryUsage)
    );
    let stored: Vec<crate::koordapi::HostApp> = cache.kv().get("host_applications").unwrap();
    assert_eq!(stored.len(), 1);
    // The topology is in the key-value store under koordlet's key.
    let info: super::topology::NodeCpuInfo = cache.kv().get(super::topology::CPU_INFO_KEY).unwrap();
    assert_eq!(info.total_info.number_cpus, cpus);
}

/// A pod status with one ready sandbox and the running containers `ids`.
fn running_status(uid: &str, ids: &[&str]) -> crate::kuberuntime::PodRuntimeStatus {
    use crate::kuberuntime::{ContainerState, ContainerStatus, SandboxStatus};
    crate::kuberuntime::PodRuntimeStatus {
        uid: uid.into(),
        name: "web".into(),
        namespace: "default".into(),
        sandboxes: vec![SandboxStatus {
            id: "sb".into(),
            ready: true,
            attempt: 0,
            created_at: 1,
            ips: Vec::new(),
            host_network: false,
        }],
        containers: ids
            .iter()
            .map(|id| ContainerStatus {
                created_at: 2,
                started_at: 3,
                ..ContainerStatus::for_test(id, "main", ContainerState::Running)
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn managed_pods_reuse_a_target_until_its_pod_or_status_changes() {
    use super::ManagedPods;
    use crate::pleg::PodCache;
    use crate::pod::PodManager;
    let (cm, _fs) = crate::cm::fake_manager(true);
    let (pods, cache) = (
        Arc::new(PodManager::default()),
        Arc::new(PodCache::default()),
    );
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap();
    pods.add_or_update(Arc::new(pod.clone()));
    let lister = ManagedPods::new(pods.clone(), cache.clone(), Arc::new(cm));
    assert!(lister.list().is_empty(), "no status yet: no target");

    let now = tokio::time::Instant::now();
    cache.set("u1", running_status("u1", &["c1"]), now);
    let first = lister.list();
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].cgroup.as_deref(),
        Some("root/kubepods/besteffort/podu1")
    );
    assert_eq!(
        &*first[0].containers[0].cgroup,
        "root/kubepods/besteffort/podu1/c1"
    );
    let again = lister.list();
    assert!(
        Arc::ptr_eq(&first[0], &again[0]),
        "unchanged: the same target"
    );

    // A new status (a restarted container) makes a new target.
    cache.set("u1", running_status("u1", &["c2"]), now);
    let after = lister.list();
    assert!(!Arc::ptr_eq(&first[0], &after[0]));
    assert_eq!(after[0].containers[0].id, "c2");
    // So does a new pod object.
    pods.add_or_update(Arc::new(pod));
    assert!(!Arc::ptr_eq(&after[0], &lister.list()[0]));
    // A pod that is gone is forgotten.
    pods.remove("u1");
    assert!(lister.list().is_empty());
}

/// A v1 test tree (directories for the usual hierarchies) with two pod cgroups.
fn v1_tree_with_pods() -> (tempfile::TempDir, CgroupTree) {
    let dir = tempfile::tempdir().unwrap();
    for h in ["cpu,cpuacct", "cpuset", "memory", "pids"] {
        fs::create_dir(dir.path().join(h)).unwrap();
    }
    write(dir.path().join("cpuset/cpuset.cpus"), "0-1\n");
    write(dir.path().join("cpuset/cpuset.mems"), "0\n");
    let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
    for pod in ["kubepods/poda", "kubepods/podb"] {
        tree.create(pod, &ResourceConfig::default()).unwrap();
    }
    (dir, tree)
}

fn v1_targets() -> Vec<Arc<PodTarget>> {
    ["a", "b"]
        .iter()
        .map(|u| {
            Arc::new(PodTarget {
                uid: (*u).into(),
                name: (*u).into(),
                namespace: "default".into(),
                started_at: UNIX_EPOCH,
                cgroup: Some(format!("kubepods/pod{u}").into()),
                containers: Vec::new(),
                be_batch_cpu_milli: None,
                keys: SampleKeys::pod(u),
            })
        })
        .collect()
}

#[tokio::test]
async fn psi_on_v1_is_read_where_the_kernel_keeps_it_and_given_up_where_it_does_not() {
    use super::Collector;
    let proc_dir = tempfile::tempdir().unwrap();
    let line = "some avg10=1.50 avg60=0.00 avg300=0.00 total=1\n";
    fs::create_dir(proc_dir.path().join("pressure")).unwrap();
    write(proc_dir.path().join("pressure/cpu"), line);

    // An Anolis-like kernel: cpuacct holds the pressure files.
    let (dir, tree) = v1_tree_with_pods();
    for pod in ["poda", "podb"] {
        write(
            dir.path()
                .join("cpu,cpuacct/kubepods")
                .join(pod)
                .join("cpu.pressure"),
            line,
        );
    }
    let mut c = super::psi::PsiCollector::new(proc_dir.path().to_path_buf(), tree);
    let mut shared = Shared {
        targets: v1_targets(),
        ..Shared::default()
    };
    c.collect(&mut shared).await;
    assert_eq!(shared.pressure.len(), 2, "both pods' pressure");

    // A kernel without them: the first pod shows it, the second is not looked at, and
    // later rounds look at none.
    let (_dir, tree) = v1_tree_with_pods();
    let mut c = super::psi::PsiCollector::new(proc_dir.path().to_path_buf(), tree);
    c.collect(&mut shared).await;
    assert!(shared.pressure.is_empty());
    assert!(
        shared.node_pressure.cpu.is_some(),
        "the node's PSI is still read"
    );
}

#[test]
fn kept_sample_keys_follow_the_kinds_label_schema() {
    // A kept key skips the schema check: it must be the key the checked path makes.
    let checked = |kind, labels: &[(&str, &str)]| {
        crate::metriccache::Sample::new(kind, labels, 0, 0.0)
            .unwrap()
            .key()
            .clone()
    };
    let pod = SampleKeys::pod("u1");
    let ctr = SampleKeys::container("c1");
    let p = [(label::POD_UID, "u1")];
    let c = [(label::CONTAINER_ID, "c1")];
    assert_eq!(
        pod.keys(),
        vec![
            checked(MetricKind::PodCpuUsage, &p),
            checked(MetricKind::PodMemoryUsage, &p),
            checked(MetricKind::PodCpuThrottled, &p),
            checked(MetricKind::PodPids, &p),
        ]
    );
    assert_eq!(
        ctr.keys(),
        vec![
            checked(MetricKind::ContainerCpuUsage, &c),
            checked(MetricKind::ContainerMemoryUsage, &c),
            checked(MetricKind::ContainerCpuThrottled, &c),
        ]
    );
}
