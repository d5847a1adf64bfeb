//! The container manager as a kind node runs it: kind's own `config.yaml` (`cgroupDriver:
//! systemd`, `cgroupRoot: /kubelet`) on cgroup v2, on a temporary tree laid out as
//! `/sys/fs/cgroup` on such a node. From the settings through start-up, node
//! allocatable, the QoS cgroups and one pod per QoS class to orphan cleanup, every
//! cgroup is read back from its files, at the paths kubelet uses.

use std::path::Path;

use super::fs::tests::{honest_v2_tree, set};
use super::host_checks::check_host;
use super::manager::tests::pod;
use super::startup::build;
use super::{CgroupDriver, CgroupFs, CgroupName, CgroupTree, CgroupVersion, node_allocatable};
use crate::contracts::PodCgroupParent;
use crate::node::{Capacity, NodeInfo};

/// What a kernel offers at the root (a kind node in a container sees its own root).
const ALL: &str = "cpuset cpu io memory hugetlb pids rdma misc";

fn write(path: impl AsRef<Path>, text: &str) {
    std::fs::write(path.as_ref(), text).unwrap();
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

/// `/sys/fs/cgroup` on a kind node once systemd runs and kind's
/// `create-kubelet-cgroup-v2` has enabled every controller at the root: kind's
/// `kubelet.slice` with the kubelet's service (oxlet itself) in it, where systemd
/// enabled what its units account (cpu, memory, pids), and containerd in
/// `system.slice`.
fn kind_node_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root.join("cgroup.controllers"), &format!("{ALL}\n"));
    write(root.join("cgroup.subtree_control"), &format!("{ALL}\n"));
    for (cg, offered, enabled) in [
        ("init.scope", ALL, ""),
        ("kubelet.slice", ALL, "cpu memory pids"),
        ("kubelet.slice/kubelet.service", "cpu memory pids", ""),
        ("system.slice", ALL, "cpu memory pids"),
        ("system.slice/containerd.service", "cpu memory pids", ""),
    ] {
        let d = root.join(cg);
        std::fs::create_dir(&d).unwrap();
        write(d.join("cgroup.controllers"), &format!("{offered}\n"));
        write(d.join("cgroup.subtree_control"), &format!("{enabled}\n"));
        write(d.join("cgroup.type"), "domain\n");
    }
    write(
        root.join("kubelet.slice/kubelet.service/cgroup.procs"),
        "4242\n",
    );
    write(
        root.join("system.slice/containerd.service/cgroup.procs"),
        "77\n",
    );
    honest_v2_tree(root);
    dir
}

/// kind's kubelet settings, read by oxlet's own option loader from the file kind
/// writes, with a pod pids limit on top (kind sets none).
fn kind_settings() -> super::CmSettings {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kind/config.yaml");
    let opts = crate::options::load([
        "oxlet",
        "--config",
        config.to_str().unwrap(),
        "--pod-max-pids=100",
    ])
    .unwrap_or_else(|e| panic!("{e:?}"));
    opts.cm_settings()
}

const KUBEPODS: &str = "kubelet.slice/kubelet-kubepods.slice";
const BURSTABLE: &str = "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice";
const BESTEFFORT: &str = "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice";
const G_UID: &str = "0b6e2a5c-1f3d-4e7a-9c8b-2d4f6a8c0e1f";
const B1_UID: &str = "5d1c9e7a-0f2b-4a3c-8d6e-1b2a3c4d5e6f";
const B2_UID: &str = "7e8f9a0b-1c2d-4e3f-a4b5-c6d7e8f9a0b1";
const E_UID: &str = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d";

#[test]
fn kinds_config_puts_every_cgroup_where_kubelet_does_on_v2_with_the_systemd_driver() {
    let settings = kind_settings();
    assert_eq!(settings.cgroup_driver, CgroupDriver::Systemd);
    assert_eq!(settings.cgroup_root, CgroupName(vec!["kubelet".into()]));
    let node = NodeInfo::with_capacity(
        "kind-control-plane",
        Capacity {
            cpu_cores: 4,
            memory_bytes: 8 << 30,
            pods: 110,
            ephemeral_storage_bytes: 100 << 30,
        },
    );
    let allocatable = node_allocatable(&settings, &node);
    let dir = kind_node_tree();
    let root = dir.path();
    let tree = CgroupTree::new(root, CgroupVersion::V2).unwrap();
    // kubelet's checks first: kind's kubelet.slice exists, offered every controller.
    let features = check_host(&settings, &tree, settings.cgroup_driver).unwrap();
    assert!(features.cpu_hardcapping);
    let cm = build(
        &settings,
        std::sync::Arc::new(tree.clone()),
        settings.cgroup_driver,
        allocatable.kubepods,
        features,
    )
    .unwrap();
    assert_eq!(cm.soft_requirements(), None);

    // Node allocatable on kubelet's node-level slice: 4 CPUs are 4096 shares, weight
    // 157; all 8 GiB (kind reserves nothing); the host's pid limit.
    assert_eq!(cm.kubepods_path().as_deref(), Some(KUBEPODS));
    assert_eq!(read(root.join(KUBEPODS).join("cpu.weight")), "157");
    assert_eq!(read(root.join(KUBEPODS).join("memory.max")), "8589934592");
    let pids = allocatable.kubepods.pids_limit.unwrap();
    assert!(pids > 0);
    assert_eq!(read(root.join(KUBEPODS).join("pids.max")), pids.to_string());
    assert!(!root.join(KUBEPODS).join("cpu.max").exists());
    // The QoS slices, with the least weight until pods come.
    for qos in [BURSTABLE, BESTEFFORT] {
        assert_eq!(read(root.join(qos).join("cpu.weight")), "1", "{qos}");
    }

    let g = pod(G_UID, "{}", r#"{"cpu": "500m", "memory": "64Mi"}"#);
    let b1 = pod(B1_UID, r#"{"cpu": "250m"}"#, r#"{"memory": "128Mi"}"#);
    let b2 = pod(B2_UID, r#"{"cpu": "1"}"#, "{}");
    let e = pod(E_UID, "{}", "{}");
    for p in [&g, &b1, &b2, &e] {
        cm.ensure_pod(p).unwrap();
        assert!(cm.pod_cgroup_exists(p));
    }
    // What the CRI gets as the sandbox's cgroup parent: kubelet's spelling, Guaranteed
    // pods directly below kubepods.
    let g_path =
        format!("{KUBEPODS}/kubelet-kubepods-pod0b6e2a5c_1f3d_4e7a_9c8b_2d4f6a8c0e1f.slice");
    let b1_path = format!(
        "{BURSTABLE}/kubelet-kubepods-burstable-pod5d1c9e7a_0f2b_4a3c_8d6e_1b2a3c4d5e6f.slice"
    );
    let e_path = format!(
        "{BESTEFFORT}/kubelet-kubepods-besteffort-poda1b2c3d4_e5f6_4a7b_8c9d_0e1f2a3b4c5d.slice"
    );
    assert_eq!(cm.cgroup_parent(&g), format!("/{g_path}"));
    assert_eq!(cm.cgroup_parent(&b1), format!("/{b1_path}"));
    assert_eq!(cm.cgroup_parent(&e), format!("/{e_path}"));
    assert_eq!(cm.pod_cgroup_path(&b1).as_deref(), Some(b1_path.as_str()));

    // Each pod's limits in the v2 files: 500m is 512 shares, weight 20, and a quota of
    // 50 ms per 100 ms; 250m is 256 shares, weight 10; BestEffort the least weight.
    let file = |cg: &str, name: &str| read(root.join(cg).join(name));
    assert_eq!(file(&g_path, "cpu.weight"), "20");
    assert_eq!(file(&g_path, "cpu.max"), "50000 100000");
    assert_eq!(file(&g_path, "memory.max"), "67108864");
    assert_eq!(file(&b1_path, "cpu.weight"), "10");
    assert!(!root.join(&b1_path).join("cpu.max").exists());
    assert_eq!(file(&b1_path, "memory.max"), "134217728");
    assert_eq!(file(&e_path, "cpu.weight"), "1");
    assert!(!root.join(&e_path).join("memory.max").exists());
    for cg in [&g_path, &b1_path, &e_path] {
        assert_eq!(file(cg, "pids.max"), "100", "{cg}");
    }
    // The burstable slice's weight is its pods' requests: 1250m, 1280 shares, weight 49.
    assert_eq!(file(BURSTABLE, "cpu.weight"), "49");
    // Read back through the boundary as kubelet reads them.
    let back = tree.resources(&g_path).unwrap();
    assert_eq!(
        (
            back.cpu_quota,
            back.cpu_period,
            back.memory_limit,
            back.pids_limit
        ),
        (Some(50_000), Some(100_000), Some(64 << 20), Some(100))
    );
    assert_eq!(back.cpu_shares.map(super::fs::shares_to_weight), Some(20));

    // Every controller enabled from the root down to each pod, so containers below may
    // use io, cpuset, hugetlb … ; the tree stays as the kernel keeps it.
    let levels = honest_v2_tree(root);
    for cg in ["", "kubelet.slice", KUBEPODS, BURSTABLE, BESTEFFORT] {
        assert_eq!(levels[cg], (set(ALL), set(ALL)), "{cg:?}");
    }
    for cg in [&g_path, &b1_path, &e_path] {
        assert_eq!(levels[cg.as_str()], (set(ALL), set("")), "{cg}");
    }
    // systemd's units are left as they were.
    assert_eq!(levels["kubelet.slice/kubelet.service"], (set(ALL), set("")));
    assert_eq!(levels["system.slice"], (set(ALL), set("cpu memory pids")));
    assert_eq!(
        read(root.join("kubelet.slice/kubelet.service/cgroup.procs")),
        "4242\n"
    );

    // Pods that are gone lose their slices; the burstable weight follows (1 CPU: 39).
    cm.cleanup_orphans(&|uid| uid == B2_UID);
    for cg in [&g_path, &b1_path, &e_path] {
        assert!(!root.join(cg).exists(), "{cg}");
    }
    assert!(cm.pod_cgroup_exists(&b2));
    assert_eq!(file(BURSTABLE, "cpu.weight"), "39");
    for kept in [
        "kubelet.slice/kubelet.service",
        "system.slice/containerd.service",
        "init.scope",
    ] {
        assert!(root.join(kept).is_dir(), "{kept}");
    }
}

/// kind's settings on a node where kind's `kubelet.service` set-up has not run: without
/// `kubelet.slice` oxlet refuses to start, as kubelet does, and makes nothing; with the
/// slice as systemd alone makes it (no cpuset, no hugetlb offered), it is refused naming
/// those two.
#[test]
fn kinds_config_is_refused_without_kind_s_kubelet_slice() {
    let settings = kind_settings();
    let dir = kind_node_tree();
    let root = dir.path();
    std::fs::remove_dir_all(root.join("kubelet.slice")).unwrap();
    let tree = CgroupTree::new(root, CgroupVersion::V2).unwrap();
    let err = check_host(&settings, &tree, settings.cgroup_driver)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!(
            "invalid configuration: could not read controllers for cgroup [\"kubelet\"]: {}",
            root.join("kubelet.slice/cgroup.controllers").display()
        )) && err.contains("--cgroup-root / cgroupRoot \"/kubelet\", kubelet.slice"),
        "{err}"
    );
    assert!(!root.join("kubelet.slice").exists());

    let slice = root.join("kubelet.slice");
    std::fs::create_dir(&slice).unwrap();
    write(slice.join("cgroup.controllers"), "cpu io memory pids\n");
    let err = check_host(&settings, &tree, settings.cgroup_driver)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cgroup [\"kubelet\"] has some missing controllers: cpuset, hugetlb"),
        "{err}"
    );
}
