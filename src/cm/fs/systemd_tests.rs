//! The systemd driver over the pretend systemd and a v2 test tree: the units oxlet
//! asks for, their properties, and what systemd's answers do.

use std::path::Path;
use std::sync::Arc;

use super::fake_systemd::{FakeCall, FakeSystemd, reply};
use super::systemd::{
    BusError, PropValue, Property, SystemdFs, parse_version, quota_per_sec, resource_properties,
    slice_unit, start_properties,
};
use super::{CgroupFs, CgroupTree};
use crate::cm::driver::CgroupDriver;
use crate::cm::manager::tests::pod;
use crate::cm::manager::{CmConfig, ContainerManager};
use crate::cm::name::CgroupName;
use crate::cm::resources::{PodCgroupSettings, ResourceConfig};
use crate::cm::version::CgroupVersion;
use crate::contracts::PodCgroupParent as _;

const MAX: u64 = u64::MAX;
const V2: CgroupVersion = CgroupVersion::V2;
const UID: &str = "1234-abcd";

fn u(n: u64) -> PropValue {
    PropValue::U64(n)
}

/// A v2 root offering the controllers a node's kernel offers, and the driver over it.
fn systemd_fs(version: u32) -> (tempfile::TempDir, Arc<FakeSystemd>, SystemdFs) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
    let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
    let bus = Arc::new(FakeSystemd::new(version));
    let fs = SystemdFs::new(tree, bus.clone());
    (dir, bus, fs)
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn started(bus: &FakeSystemd) -> Vec<(String, String)> {
    bus.calls()
        .into_iter()
        .filter_map(|c| match c {
            FakeCall::Start(unit, props) => {
                let wants = props.iter().find_map(|(n, v)| match (n, v) {
                    (&"Wants", PropValue::Strs(w)) => Some(w.join(",")),
                    _ => None,
                });
                Some((unit, wants.unwrap_or_default()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn slice_paths_name_their_unit_and_parent() {
    assert_eq!(
        slice_unit("kubepods.slice"),
        Some(("kubepods.slice", "-.slice"))
    );
    assert_eq!(
        slice_unit("kubepods.slice/kubepods-burstable.slice"),
        Some(("kubepods-burstable.slice", "kubepods.slice"))
    );
    assert_eq!(
        slice_unit("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice"),
        Some((
            "kubepods-burstable-pod1234_abcd.slice",
            "kubepods-burstable.slice"
        ))
    );
    // kind's cgroupRoot /kubelet.
    assert_eq!(
        slice_unit(
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1234_abcd.slice"
        ),
        Some((
            "kubelet-kubepods-besteffort-pod1234_abcd.slice",
            "kubelet-kubepods-besteffort.slice"
        ))
    );
    // Not oxlet's units: scopes, services, slices not where systemd puts them.
    for path in [
        "",
        "-.slice",
        ".slice",
        "kubepods",
        "kubelet.slice/kubelet.service",
        "kubepods.slice/kubepods-pod1.slice/cri-containerd-0123.scope",
        "a/b.slice",
        "a.slice/b.slice",
        "kubepods-burstable.slice",
        "a.slice/a--b.slice",
        "a.slice/a-b.slice/x",
    ] {
        assert_eq!(slice_unit(path), None, "{path:?}");
    }
}

#[test]
fn the_quota_per_second_rounds_up_to_whole_percents_as_runcs() {
    // 250m over 100 ms: 25 %.
    assert_eq!(quota_per_sec(25_000, 100_000), 250_000);
    // 12.34 % of a CPU: up to 13 %, so that a child's exact quota still fits.
    assert_eq!(quota_per_sec(12_340, 100_000), 130_000);
    // 1 ms over 100 ms: 1 %, exact.
    assert_eq!(quota_per_sec(1_000, 100_000), 10_000);
    // 1.5 ms: up to 2 %.
    assert_eq!(quota_per_sec(1_500, 100_000), 20_000);
    // Another period: 10 ms over 50 ms is 20 %.
    assert_eq!(quota_per_sec(10_000, 50_000), 200_000);
    // No quota, or none given: infinity.
    assert_eq!(quota_per_sec(-1, 100_000), MAX);
    assert_eq!(quota_per_sec(0, 100_000), MAX);
    // Huge quotas saturate to no limit rather than wrap.
    assert_eq!(quota_per_sec(i64::MAX, 1), MAX);
}

#[test]
fn limits_become_runcs_v2_properties() {
    let pod = ResourceConfig {
        cpu_shares: Some(256),
        cpu_quota: Some(25_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 << 20),
        pids_limit: Some(100),
    };
    let want: Vec<Property> = vec![
        ("CPUWeight", u(10)),
        ("CPUQuotaPerSecUSec", u(250_000)),
        ("MemoryMax", u(64 << 20)),
        ("TasksMax", u(100)),
    ];
    assert_eq!(resource_properties(&pod, None, V2, true), want);

    // Unlimited: infinity for each.
    let none = ResourceConfig {
        cpu_quota: Some(-1),
        cpu_period: Some(100_000),
        memory_limit: Some(-1),
        pids_limit: Some(-1),
        ..ResourceConfig::default()
    };
    assert_eq!(
        resource_properties(&none, None, V2, true),
        vec![
            ("CPUQuotaPerSecUSec", u(MAX)),
            ("MemoryMax", u(MAX)),
            ("TasksMax", u(MAX))
        ]
    );
    // Nothing set, nothing asked; a pids limit of 0 is "not set" as in runc.
    let zero = ResourceConfig {
        pids_limit: Some(0),
        ..ResourceConfig::default()
    };
    assert!(resource_properties(&zero, None, V2, true).is_empty());

    // A period other than the default, where systemd takes it (v242+).
    let period = ResourceConfig {
        cpu_quota: Some(10_000),
        cpu_period: Some(50_000),
        ..ResourceConfig::default()
    };
    assert_eq!(
        resource_properties(&period, None, V2, true),
        vec![
            ("CPUQuotaPeriodUSec", u(50_000)),
            ("CPUQuotaPerSecUSec", u(200_000))
        ]
    );
    assert_eq!(
        resource_properties(&period, None, V2, false),
        vec![("CPUQuotaPerSecUSec", u(200_000))]
    );
    // A quota alone is over the cgroup's own period.
    let quota_only = ResourceConfig {
        cpu_quota: Some(10_000),
        ..ResourceConfig::default()
    };
    let current = ResourceConfig {
        cpu_quota: Some(-1),
        cpu_period: Some(50_000),
        ..ResourceConfig::default()
    };
    assert_eq!(
        resource_properties(&quota_only, Some(&current), V2, true),
        vec![("CPUQuotaPerSecUSec", u(200_000))]
    );
    assert_eq!(
        resource_properties(&quota_only, None, V2, true),
        vec![("CPUQuotaPerSecUSec", u(100_000))]
    );
}

#[test]
fn systemd_versions_are_read_as_runc_reads_them() {
    for (text, want) in [
        ("255", Some(255)),
        ("\"v245.4-1.fc32\"", Some(245)),
        ("245-1.fc32", Some(245)),
        ("252.22-1~deb12u1", Some(252)),
        ("", None),
        ("x", None),
    ] {
        assert_eq!(parse_version(text), want, "{text:?}");
    }
}

/// The container manager with the systemd driver below `root`, on the driver.
fn manager(root: &[&str], fs: Arc<SystemdFs>) -> ContainerManager {
    let cfg = CmConfig {
        driver: CgroupDriver::Systemd,
        cgroup_root: CgroupName(root.iter().map(|r| (*r).to_string()).collect()),
        cgroups_per_qos: true,
        pod: PodCgroupSettings {
            cpu_cfs_quota: true,
            cpu_period_us: 100_000,
            pod_pids_limit: 100,
        },
        kubepods: ResourceConfig {
            cpu_shares: Some(4096),
            memory_limit: Some(8 << 30),
            pids_limit: Some(4_194_304),
            ..ResourceConfig::default()
        },
    };
    ContainerManager::new(cfg, fs).unwrap()
}

#[test]
fn kubepods_qos_and_pod_slices_are_units_with_their_limits() {
    let (dir, bus, fs) = systemd_fs(255);
    let fs = Arc::new(fs);
    let cm = manager(&[], fs.clone());
    cm.setup().unwrap();
    let g = pod(UID, "{}", r#"{"cpu": "250m", "memory": "64Mi"}"#);
    cm.ensure_pod(&g).unwrap();

    let pod_unit = "kubepods-pod1234_abcd.slice";
    assert_eq!(
        started(&bus)[..3],
        [
            ("kubepods.slice".to_string(), "-.slice".to_string()),
            (
                "kubepods-burstable.slice".to_string(),
                "kubepods.slice".to_string()
            ),
            (
                "kubepods-besteffort.slice".to_string(),
                "kubepods.slice".to_string()
            ),
        ]
    );
    assert!(
        started(&bus).contains(&(pod_unit.to_string(), "kubepods.slice".to_string())),
        "{:?}",
        bus.calls()
    );
    // runc's Apply(-1) properties, exactly.
    let first = bus.calls().into_iter().next().unwrap();
    assert_eq!(
        first,
        FakeCall::Start(
            "kubepods.slice".into(),
            start_properties("kubepods.slice", "-.slice", V2)
        )
    );
    assert_eq!(
        start_properties("kubepods.slice", "-.slice", V2),
        vec![
            (
                "Description",
                PropValue::Str("libcontainer container kubepods.slice".into())
            ),
            ("Wants", PropValue::Strs(vec!["-.slice".into()])),
            ("MemoryAccounting", PropValue::Bool(true)),
            ("CPUAccounting", PropValue::Bool(true)),
            ("IOAccounting", PropValue::Bool(true)),
            ("TasksAccounting", PropValue::Bool(true)),
            ("DefaultDependencies", PropValue::Bool(false)),
        ]
    );
    // Node allocatable on kubepods.slice: 4096 shares are weight 157.
    assert_eq!(
        bus.last_set("kubepods.slice").unwrap(),
        vec![
            ("CPUWeight", u(157)),
            ("MemoryMax", u(8 << 30)),
            ("TasksMax", u(4_194_304))
        ]
    );
    assert_eq!(
        bus.last_set("kubepods-besteffort.slice").unwrap(),
        vec![("CPUWeight", u(1))]
    );
    // The Guaranteed pod: 250m is weight 10 and 25 % of a CPU, 64 MiB, 100 tasks.
    assert_eq!(
        bus.last_set(pod_unit).unwrap(),
        vec![
            ("CPUWeight", u(10)),
            ("CPUQuotaPerSecUSec", u(250_000)),
            ("MemoryMax", u(64 << 20)),
            ("TasksMax", u(100))
        ]
    );
    // And the files, as runc's fsMgr.Set writes them after the properties.
    let rel = format!("kubepods.slice/{pod_unit}");
    assert_eq!(read(dir.path(), &format!("{rel}/memory.max")), "67108864");
    assert_eq!(read(dir.path(), &format!("{rel}/cpu.max")), "25000 100000");
    assert!(fs.exists(&rel));
    assert_eq!(
        cm.cgroup_parent(&g),
        "/kubepods.slice/kubepods-pod1234_abcd.slice"
    );
}

#[test]
fn kinds_root_makes_kubelets_slices_below_kubelet_slice() {
    let (dir, bus, fs) = systemd_fs(252);
    let cm = manager(&["kubelet"], Arc::new(fs));
    cm.setup().unwrap();
    let b = pod(UID, r#"{"cpu": "100m"}"#, r#"{"memory": "32Mi"}"#);
    cm.ensure_pod(&b).unwrap();
    let units: Vec<(String, String)> = started(&bus);
    for want in [
        ("kubelet-kubepods.slice", "kubelet.slice"),
        ("kubelet-kubepods-burstable.slice", "kubelet-kubepods.slice"),
        (
            "kubelet-kubepods-besteffort.slice",
            "kubelet-kubepods.slice",
        ),
        (
            "kubelet-kubepods-burstable-pod1234_abcd.slice",
            "kubelet-kubepods-burstable.slice",
        ),
    ] {
        assert!(
            units.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {units:?}"
        );
    }
    // kind's kubelet.slice is its own unit: oxlet never starts it.
    assert!(
        !units.iter().any(|(u, _)| u == "kubelet.slice"),
        "{units:?}"
    );
    let rel = "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1234_abcd.slice";
    assert_eq!(read(dir.path(), &format!("{rel}/memory.max")), "33554432");
    // The burstable slice's weight follows its pods' requests (100m: 102 shares).
    assert_eq!(
        bus.last_set("kubelet-kubepods-burstable.slice").unwrap(),
        vec![("CPUWeight", u(4))]
    );
}

#[test]
fn an_existing_unit_is_kept_and_given_its_properties() {
    let (_dir, bus, fs) = systemd_fs(255);
    bus.add_unit("kubepods.slice");
    let res = ResourceConfig {
        memory_limit: Some(1 << 30),
        ..ResourceConfig::default()
    };
    fs.create("kubepods.slice", &res).unwrap();
    assert_eq!(
        bus.last_set("kubepods.slice").unwrap(),
        vec![("MemoryMax", u(1 << 30))]
    );
    // No reset, no retry: the unit is kubelet's to keep.
    assert!(
        !bus.calls()
            .iter()
            .any(|c| matches!(c, FakeCall::ResetFailed(_))),
        "{:?}",
        bus.calls()
    );
}

#[test]
fn a_failed_job_is_an_error_naming_the_unit_and_is_reset() {
    let (dir, bus, fs) = systemd_fs(255);
    bus.script_start("kubepods.slice", Ok("failed".into()));
    let e = fs
        .create("kubepods.slice", &ResourceConfig::default())
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("systemd unit kubepods.slice") && text.contains("\"failed\""),
        "{text}"
    );
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    assert_eq!(
        bus.calls().last(),
        Some(&FakeCall::ResetFailed("kubepods.slice".into()))
    );
    // Nothing made behind systemd's back.
    assert!(!dir.path().join("kubepods.slice").exists());

    // An error reply names systemd's error.
    bus.script_start(
        "kubepods.slice",
        Err(reply("NoSuchUnit", "Unit -.slice not loaded.")),
    );
    let text = fs
        .create("kubepods.slice", &ResourceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        text.contains(
            "StartTransientUnit: org.freedesktop.systemd1.NoSuchUnit: Unit -.slice not loaded."
        ),
        "{text}"
    );
    // A timeout says so, and the unit is reset as runc resets it.
    bus.clear_calls();
    bus.script_start(
        "kubepods.slice",
        Err(BusError::Timeout(std::time::Duration::from_secs(30))),
    );
    let text = fs
        .create("kubepods.slice", &ResourceConfig::default())
        .unwrap_err()
        .to_string();
    assert!(text.contains("no answer within 30s"), "{text}");
    assert!(
        bus.calls()
            .contains(&FakeCall::ResetFailed("kubepods.slice".into()))
    );
}

#[test]
fn removal_stops_the_unit_then_clears_the_tree_and_an_unknown_unit_is_fine() {
    let (dir, bus, fs) = systemd_fs(255);
    let pod_path = "kubepods.slice/kubepods-pod1.slice";
    fs.create("kubepods.slice", &ResourceConfig::default())
        .unwrap();
    fs.create(pod_path, &ResourceConfig::default()).unwrap();
    bus.clear_calls();
    fs.remove(pod_path).unwrap();
    assert_eq!(
        bus.calls()[..1],
        [FakeCall::Stop("kubepods-pod1.slice".into())]
    );
    assert!(!dir.path().join(pod_path).exists());
    assert!(!bus.units().contains(&"kubepods-pod1.slice".to_string()));

    // A slice made before (with mkdir, by an older oxlet): NoSuchUnit, then rmdir.
    let old = "kubepods.slice/kubepods-pod2.slice";
    std::fs::create_dir(dir.path().join(old)).unwrap();
    fs.remove(old).unwrap();
    assert!(!dir.path().join(old).exists());

    // A job that ends otherwise is a warning: what is left is still removed.
    let third = "kubepods.slice/kubepods-pod3.slice";
    fs.create(third, &ResourceConfig::default()).unwrap();
    bus.script_stop("kubepods-pod3.slice", Ok("canceled".into()));
    fs.remove(third).unwrap();
    assert!(!dir.path().join(third).exists());

    // systemd unreachable: an error naming the unit; the cgroup stays.
    let fourth = "kubepods.slice/kubepods-pod4.slice";
    fs.create(fourth, &ResourceConfig::default()).unwrap();
    bus.script_stop(
        "kubepods-pod4.slice",
        Err(BusError::Transport("connection closed".into())),
    );
    let text = fs.remove(fourth).unwrap_err().to_string();
    assert!(
        text.contains("systemd unit kubepods-pod4.slice: StopUnit: connection closed"),
        "{text}"
    );
    assert!(dir.path().join(fourth).exists());
}

#[test]
fn updates_set_properties_then_files_and_leave_non_units_to_the_tree() {
    let (dir, bus, fs) = systemd_fs(255);
    fs.create(
        "kubepods.slice/kubepods-besteffort.slice",
        &ResourceConfig::default(),
    )
    .unwrap();
    bus.clear_calls();
    // koordlet's BestEffort quota: a quota with the default period.
    let be = ResourceConfig {
        cpu_quota: Some(150_000),
        cpu_period: Some(100_000),
        ..ResourceConfig::default()
    };
    fs.update("kubepods.slice/kubepods-besteffort.slice", &be)
        .unwrap();
    assert_eq!(
        bus.calls(),
        [FakeCall::Set(
            "kubepods-besteffort.slice".into(),
            vec![("CPUQuotaPerSecUSec", u(1_500_000))]
        )]
    );
    assert_eq!(
        read(
            dir.path(),
            "kubepods.slice/kubepods-besteffort.slice/cpu.max"
        ),
        "150000 100000"
    );
    // A container's scope is runc's unit: files only.
    let scope = "kubepods.slice/kubepods-besteffort.slice/cri-containerd-0a1b.scope";
    std::fs::create_dir(dir.path().join(scope)).unwrap();
    bus.clear_calls();
    fs.update(scope, &be).unwrap();
    assert!(bus.calls().is_empty(), "{:?}", bus.calls());
    // A slice that is not there: the tree's error, and systemd is not asked.
    let missing = "kubepods.slice/kubepods-pod9.slice";
    assert!(fs.update(missing, &be).is_err());
    assert!(bus.calls().is_empty(), "{:?}", bus.calls());
}

#[test]
fn an_unknown_version_leaves_the_period_to_the_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    std::fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
    let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
    let bus = Arc::new(FakeSystemd::answering_version(Err(BusError::Transport(
        "no bus".into(),
    ))));
    let fs = SystemdFs::new(tree, bus.clone());
    let res = ResourceConfig {
        cpu_quota: Some(10_000),
        cpu_period: Some(50_000),
        ..ResourceConfig::default()
    };
    fs.create("kubepods.slice", &res).unwrap();
    assert_eq!(
        bus.last_set("kubepods.slice").unwrap(),
        vec![("CPUQuotaPerSecUSec", u(200_000))]
    );
    assert_eq!(read(dir.path(), "kubepods.slice/cpu.max"), "10000 50000");
}

#[test]
fn v1_asks_for_runcs_v1_properties() {
    let v1 = CgroupVersion::V1;
    let pod = ResourceConfig {
        cpu_shares: Some(256),
        cpu_quota: Some(25_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 << 20),
        pids_limit: Some(100),
    };
    assert_eq!(
        resource_properties(&pod, None, v1, true),
        vec![
            ("CPUShares", u(256)),
            ("CPUQuotaPerSecUSec", u(250_000)),
            ("MemoryLimit", u(64 << 20)),
            ("TasksMax", u(100)),
        ]
    );
    let none = ResourceConfig {
        memory_limit: Some(-1),
        ..ResourceConfig::default()
    };
    assert_eq!(
        resource_properties(&none, None, CgroupVersion::Hybrid, true),
        vec![("MemoryLimit", u(MAX))]
    );
    let start = start_properties("kubepods.slice", "-.slice", v1);
    assert!(start.contains(&("BlockIOAccounting", PropValue::Bool(true))));
    assert!(!start.iter().any(|(n, _)| *n == "IOAccounting"));
}

#[test]
fn v1_slices_are_units_and_the_files_are_written_in_every_hierarchy() {
    let dir = tempfile::tempdir().unwrap();
    for h in ["cpu,cpuacct", "memory", "pids", "systemd", "unified"] {
        std::fs::create_dir(dir.path().join(h)).unwrap();
    }
    let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
    let bus = Arc::new(FakeSystemd::new(255));
    let fs = Arc::new(SystemdFs::new(tree, bus.clone()));
    let cm = manager(&[], fs.clone());
    cm.setup().unwrap();
    let g = pod(UID, "{}", r#"{"cpu": "250m", "memory": "64Mi"}"#);
    cm.ensure_pod(&g).unwrap();
    let pod_unit = "kubepods-pod1234_abcd.slice";
    assert_eq!(
        bus.last_set(pod_unit).unwrap(),
        vec![
            ("CPUShares", u(256)),
            ("CPUQuotaPerSecUSec", u(250_000)),
            ("MemoryLimit", u(64 << 20)),
            ("TasksMax", u(100))
        ]
    );
    let rel = format!("kubepods.slice/{pod_unit}");
    assert_eq!(
        read(dir.path(), &format!("memory/{rel}/memory.limit_in_bytes")),
        "67108864"
    );
    assert_eq!(
        read(dir.path(), &format!("cpu,cpuacct/{rel}/cpu.cfs_quota_us")),
        "25000"
    );
    assert!(fs.keeps_shares());
    fs.remove(&rel).unwrap();
    assert!(bus.calls().contains(&FakeCall::Stop(pod_unit.into())));
    assert!(!dir.path().join("memory").join(&rel).exists());
}
