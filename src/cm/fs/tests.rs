//! The real [`CgroupTree`] on test trees of plain files (v2, v1, hybrid), and on this
//! machine's real v1 hierarchies.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::v2::weight_to_shares;
use super::{CgroupFs, CgroupTree, shares_to_weight};
use crate::cm::resources::ResourceConfig;
use crate::cm::version::{self, CgroupVersion};

const POD: &str = "kubepods/burstable/pod1234-abcd";

fn limits() -> ResourceConfig {
    ResourceConfig {
        cpu_shares: Some(512),
        cpu_quota: Some(50_000),
        cpu_period: Some(100_000),
        memory_limit: Some(64 << 20),
        pids_limit: Some(20),
    }
}

fn read(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

fn write(path: impl AsRef<Path>, text: &str) {
    fs::write(path.as_ref(), text).unwrap();
}

/// A v2 root as the kernel shows it: the controllers available, none enabled yet.
fn v2_tree(controllers: &str) -> (tempfile::TempDir, CgroupTree) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path().join("cgroup.controllers"), controllers);
    write(dir.path().join("cgroup.subtree_control"), "");
    let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
    (dir, tree)
}

#[test]
fn cpu_weight_conversion_is_kubelets() {
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(1024), 39);
    assert_eq!(shares_to_weight(262_144), 10_000);
    assert_eq!(shares_to_weight(0), 0);
    for weight in [1, 2, 39, 100, 5000, 10_000] {
        assert_eq!(
            shares_to_weight(weight_to_shares(weight)),
            weight,
            "{weight}"
        );
    }
}

#[test]
fn v2_create_enables_controllers_down_the_path_and_writes_the_limits() {
    let (dir, tree) = v2_tree("cpuset cpu io memory hugetlb pids rdma misc");
    tree.create(POD, &limits()).unwrap();
    let root = dir.path();
    // Every controller the root offers, at every level above the pod (libcontainer's
    // CreateCgroupPath), so containers below the pod may use io, hugetlb … too.
    for parent in ["", "kubepods", "kubepods/burstable"] {
        let enabled = read(root.join(parent).join("cgroup.subtree_control"));
        assert_eq!(
            enabled, "+cpuset +cpu +io +memory +hugetlb +pids +rdma +misc",
            "{parent:?}"
        );
    }
    let pod = root.join(POD);
    let levels = honest_v2_tree(root);
    assert_eq!(
        levels[POD],
        (set("cpuset cpu io memory hugetlb pids rdma misc"), set("")),
        "the pod offers all, enables nothing yet"
    );
    assert_eq!(
        read(pod.join("cpu.weight")),
        shares_to_weight(512).to_string()
    );
    assert_eq!(read(pod.join("cpu.max")), "50000 100000");
    assert_eq!(read(pod.join("memory.max")), (64u64 << 20).to_string());
    assert_eq!(read(pod.join("pids.max")), "20");
    let back = tree.resources(POD).unwrap();
    assert_eq!(
        back,
        ResourceConfig {
            cpu_shares: Some(weight_to_shares(shares_to_weight(512))),
            ..limits()
        }
    );
    assert!(tree.exists(POD));
    assert!(!tree.exists("kubepods/besteffort"));
    assert_eq!(
        tree.children("kubepods").unwrap(),
        vec!["burstable".to_string()]
    );

    // No limits: "max"; a period alone keeps the quota in force.
    let unlimited = ResourceConfig {
        cpu_quota: Some(-1),
        memory_limit: Some(-1),
        pids_limit: Some(-1),
        ..Default::default()
    };
    tree.update(POD, &unlimited).unwrap();
    assert_eq!(read(pod.join("cpu.max")), "max 100000");
    assert_eq!(read(pod.join("memory.max")), "max");
    assert_eq!(read(pod.join("pids.max")), "max");
    tree.update(
        POD,
        &ResourceConfig {
            cpu_quota: Some(20_000),
            ..Default::default()
        },
    )
    .unwrap();
    tree.update(
        POD,
        &ResourceConfig {
            cpu_period: Some(50_000),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(read(pod.join("cpu.max")), "20000 50000");
    let back = tree.resources(POD).unwrap();
    assert_eq!(
        (
            back.cpu_quota,
            back.cpu_period,
            back.memory_limit,
            back.pids_limit
        ),
        (Some(20_000), Some(50_000), Some(-1), Some(-1))
    );
}

#[test]
fn v2_enables_only_offered_controllers_and_keeps_enabled_ones() {
    // A root that offers three (a container's delegated root, say).
    let (dir, tree) = v2_tree("cpu io memory");
    write(dir.path().join("cgroup.subtree_control"), "io memory");
    tree.create("kubepods", &ResourceConfig::default()).unwrap();
    assert_eq!(
        read(dir.path().join("cgroup.subtree_control")),
        "+io +memory +cpu"
    );
    tree.create("kubepods/besteffort", &ResourceConfig::default())
        .unwrap();
    assert_eq!(
        read(dir.path().join("kubepods/cgroup.subtree_control")),
        "+io +memory +cpu"
    );
    // A slice that was there already offers what the root enabled for it, also once
    // the root enabled more (the kernel's file is live; a test tree's is rewritten).
    let (dir, tree) = v2_tree("cpu io memory");
    write(dir.path().join("cgroup.subtree_control"), "memory");
    fs::create_dir(dir.path().join("narrow.slice")).unwrap();
    write(
        dir.path().join("narrow.slice/cgroup.controllers"),
        "memory\n",
    );
    write(dir.path().join("narrow.slice/cgroup.subtree_control"), "");
    honest_v2_tree(dir.path());
    tree.create(
        "narrow.slice/narrow-kubepods.slice/narrow-kubepods-besteffort.slice",
        &ResourceConfig::default(),
    )
    .unwrap();
    let levels = honest_v2_tree(dir.path());
    for cg in ["", "narrow.slice", "narrow.slice/narrow-kubepods.slice"] {
        assert_eq!(
            levels[cg],
            (set("cpu io memory"), set("cpu io memory")),
            "{cg:?}"
        );
    }
}

#[test]
fn v2_refuses_a_threaded_subtree_and_removes_what_it_made() {
    let (dir, tree) = v2_tree("cpu memory pids");
    fs::create_dir(dir.path().join("threads")).unwrap();
    write(dir.path().join("threads/cgroup.controllers"), "");
    write(dir.path().join("threads/cgroup.type"), "threaded\n");
    let e = tree
        .create("threads/kubepods/burstable", &limits())
        .unwrap_err();
    assert!(
        e.to_string().contains("domain controllers") && e.to_string().contains("threaded mode"),
        "{e}"
    );
    // Refused at the first level; nothing of oxlet's is left behind.
    assert!(!dir.path().join("threads/kubepods").exists());
    assert!(dir.path().join("threads/cgroup.type").exists());

    // Below a level that lost its domain, the same; made levels go again.
    write(dir.path().join("threads/cgroup.type"), "domain\n");
    fs::create_dir_all(dir.path().join("threads/kubepods")).unwrap();
    write(
        dir.path().join("threads/kubepods/cgroup.type"),
        "domain invalid\n",
    );
    let e = tree
        .create("threads/kubepods/burstable/pod1", &limits())
        .unwrap_err();
    assert!(e.to_string().contains("invalid state"), "{e}");
    assert!(dir.path().join("threads/kubepods").is_dir());
    assert!(!dir.path().join("threads/kubepods/burstable").exists());
    // pids alone is a threaded controller: libcontainer turns the level threaded.
    let pids = ResourceConfig {
        pids_limit: Some(10),
        ..ResourceConfig::default()
    };
    tree.create("threads/kubepods/burstable", &pids).unwrap();
    assert_eq!(
        read(dir.path().join("threads/kubepods/cgroup.type")),
        "threaded"
    );
    assert_eq!(
        read(dir.path().join("threads/kubepods/burstable/pids.max")),
        "10"
    );
}

/// A set of controller names from a file's text.
pub(in crate::cm) fn set(text: &str) -> BTreeSet<String> {
    text.split_whitespace()
        .map(|c| c.trim_start_matches('+').to_string())
        .collect()
}

/// Every cgroup below a v2 tree's root, by path, with what it offers and what it
/// enabled, after checking the kernel's rules hold everywhere: a cgroup offers what
/// its parent enabled, and enables only what it offers.
pub(in crate::cm) fn honest_v2_tree(
    root: &Path,
) -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
    let mut levels = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let offered = set(&read(dir.join("cgroup.controllers")));
        let enabled = set(&read(dir.join("cgroup.subtree_control")));
        assert!(
            enabled.is_subset(&offered),
            "{}: enables {enabled:?} but is offered {offered:?}",
            dir.display()
        );
        if let Some(parent) = rel.parent() {
            let parent_enabled = set(&read(root.join(parent).join("cgroup.subtree_control")));
            assert_eq!(offered, parent_enabled, "{}", dir.display());
        }
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(rel.join(entry.file_name()));
            }
        }
        levels.insert(rel.to_string_lossy().into_owned(), (offered, enabled));
    }
    levels
}

#[test]
fn v2_procs_and_removal() {
    let (dir, tree) = v2_tree("cpu memory pids");
    tree.create(POD, &limits()).unwrap();
    let pod = dir.path().join(POD);

    // A container cgroup below the pod, with its tasks.
    fs::create_dir(pod.join("ctr1")).unwrap();
    write(pod.join("cgroup.procs"), "");
    write(pod.join("ctr1/cgroup.procs"), "41\n42\n");
    assert_eq!(tree.procs("kubepods").unwrap(), vec![41, 42]);
    let busy = tree.remove(POD).unwrap_err();
    assert_eq!(
        busy.error.kind(),
        std::io::ErrorKind::ResourceBusy,
        "{busy}"
    );
    assert!(busy.to_string().contains("ctr1"), "{busy}");
    assert!(pod.join("ctr1").exists());
    write(pod.join("ctr1/cgroup.procs"), "");
    tree.remove(POD).unwrap();
    assert!(!pod.exists());
    assert!(dir.path().join("kubepods/burstable").exists());
    // Already gone is not an error.
    tree.remove(POD).unwrap();
}

#[test]
fn v2_reads_are_bounded() {
    let (dir, tree) = v2_tree("cpu memory pids");
    tree.create("kubepods", &ResourceConfig::default()).unwrap();
    let kp = dir.path().join("kubepods");
    write(kp.join("cpu.max"), &"1 ".repeat(40_000));
    let err = tree.resources("kubepods").unwrap_err().to_string();
    assert!(
        err.contains("cpu.max") && err.contains("larger than"),
        "{err}"
    );
}

/// A v1 (hybrid) test tree as the host has it: one directory per hierarchy.
fn v1_tree() -> (tempfile::TempDir, CgroupTree) {
    let dir = tempfile::tempdir().unwrap();
    for h in [
        "cpu,cpuacct",
        "cpuset",
        "memory",
        "pids",
        "freezer",
        "devices",
        "systemd",
        "unified",
    ] {
        fs::create_dir(dir.path().join(h)).unwrap();
    }
    write(dir.path().join("cpuset/cpuset.cpus"), "0-3\n");
    write(dir.path().join("cpuset/cpuset.mems"), "0\n");
    let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
    (dir, tree)
}

#[test]
fn v1_create_makes_the_cgroup_in_every_hierarchy_and_writes_the_limits() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    for h in [
        "cpu,cpuacct",
        "cpuset",
        "memory",
        "pids",
        "freezer",
        "devices",
        "systemd",
    ] {
        assert!(at(h).is_dir(), "{h}");
    }
    assert!(
        !at("unified").exists(),
        "hybrid's unified is runc's, not oxlet's"
    );
    // cpuset: copied from the parent at each new level.
    assert_eq!(read(dir.path().join("cpuset/kubepods/cpuset.cpus")), "0-3");
    assert_eq!(read(at("cpuset").join("cpuset.mems")), "0");
    assert_eq!(read(at("cpu,cpuacct").join("cpu.shares")), "512");
    assert_eq!(read(at("cpu,cpuacct").join("cpu.cfs_period_us")), "100000");
    assert_eq!(read(at("cpu,cpuacct").join("cpu.cfs_quota_us")), "50000");
    assert_eq!(
        read(at("memory").join("memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    assert_eq!(read(at("pids").join("pids.max")), "20");
    assert_eq!(tree.resources(POD).unwrap(), limits());
    assert!(tree.exists(POD));
    tree.update(
        POD,
        &ResourceConfig {
            pids_limit: Some(-1),
            memory_limit: Some(-1),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(read(at("pids").join("pids.max")), "max");
    // The kernel's "unlimited" reads back as -1.
    write(
        at("memory").join("memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    let back = tree.resources(POD).unwrap();
    assert_eq!((back.memory_limit, back.pids_limit), (Some(-1), Some(-1)));
    // Missing in one limited hierarchy: not there.
    fs::remove_dir_all(at("pids")).unwrap();
    assert!(!tree.exists(POD));
}

#[test]
fn v1_usage_and_removal_from_every_hierarchy() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    // runc puts container cgroups in every hierarchy, hybrid's unified included.
    for h in ["freezer", "unified", "memory"] {
        fs::create_dir_all(at(h).join("ctr")).unwrap();
    }
    tree.remove("kubepods").unwrap();
    for h in [
        "cpu,cpuacct",
        "cpuset",
        "memory",
        "pids",
        "freezer",
        "devices",
        "systemd",
        "unified",
    ] {
        assert!(!dir.path().join(h).join("kubepods").exists(), "{h}");
        assert!(dir.path().join(h).exists(), "{h}");
    }
    assert!(!tree.exists("kubepods"));
}

#[test]
fn paths_from_pod_input_stay_inside_the_mount() {
    let (dir, tree) = v1_tree();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path().join("keep"), "mine");
    for bad in [
        "../escape",
        "/abs/path",
        "kubepods//pod",
        "kubepods/./pod",
        "kubepods/..",
        "kubepods/",
    ] {
        let err = tree.create(bad, &limits()).unwrap_err();
        assert_eq!(
            err.error.kind(),
            std::io::ErrorKind::InvalidInput,
            "{bad}: {err}"
        );
        assert!(tree.remove(bad).is_err(), "{bad}");
        assert!(tree.procs(bad).is_err(), "{bad}");
        assert!(!tree.exists(bad), "{bad}");
    }
    assert!(tree.create("", &limits()).is_err());
    assert!(tree.remove("").is_err());
    // A symlink inside the mount is never followed, neither to create nor to remove.
    std::os::unix::fs::symlink(outside.path(), dir.path().join("memory/kubepods")).unwrap();
    let err = tree.create("kubepods/pod1", &limits()).unwrap_err();
    assert!(err.to_string().contains("symlink"), "{err}");
    assert!(tree.remove("kubepods").is_err());
    assert!(tree.update("kubepods", &limits()).is_err());
    assert!(!outside.path().join("pod1").exists());
    assert_eq!(read(outside.path().join("keep")), "mine");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 1);
}

// ---- the real v1 hierarchies of this machine ----

/// Removes the test cgroup (and kills the task in it) even when an assertion failed.
struct RealCgroup {
    tree: CgroupTree,
    rel: String,
    child: Option<std::process::Child>,
}

impl Drop for RealCgroup {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.tree.remove(&self.rel);
    }
}

fn real_dirs(tree: &CgroupTree, rel: &str) -> Vec<PathBuf> {
    tree.hierarchies().iter().map(|h| h.dir.join(rel)).collect()
}

#[test]
fn v1_for_real_limits_usage_procs_and_removal() {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let version = version::detect_cgroup_version(Path::new(super::HOST_MOUNT)).unwrap();
    assert!(
        version.uses_v1_controllers(),
        "the test machines run cgroup v1 (hybrid), found {version}"
    );
    let tree = CgroupTree::host(version).unwrap();
    assert!(tree.hierarchies().iter().all(|h| h.kernel));
    for controller in ["cpu", "cpuacct", "cpuset", "memory", "pids"] {
        assert!(
            tree.controller(controller).is_some(),
            "{controller} is mounted"
        );
    }
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let top = format!("oxlet-unit-{}-{n}", std::process::id());
    let rel = format!("{top}/inner");
    let mut guard = RealCgroup {
        tree: tree.clone(),
        rel: top.clone(),
        child: None,
    };

    tree.create(&rel, &limits()).unwrap();
    assert!(tree.exists(&rel));
    assert_eq!(
        tree.resources(&rel).unwrap(),
        limits(),
        "read back from the kernel's files"
    );
    let cpuset = tree.controller("cpuset").unwrap().dir.join(&rel);
    assert!(!read(cpuset.join("cpuset.cpus")).trim().is_empty());
    assert_eq!(tree.children(&top).unwrap(), vec!["inner".to_string()]);

    // A shell joins the cgroup in every hierarchy (as runc would), then becomes `sleep`:
    // the exec's memory is charged to the new cgroup.
    let joins: Vec<String> = tree
        .hierarchies()
        .iter()
        .filter(|h| h.create)
        .map(|h| format!("echo $$ > {}/cgroup.procs", h.dir.join(&rel).display()))
        .collect();
    let script = format!("{} && exec sleep 30", joins.join(" && "));
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    guard.child = Some(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while tree.procs(&top).unwrap() != vec![pid]
        || !read(format!("/proc/{pid}/cmdline")).starts_with("sleep")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the task never joined: {:?}",
            tree.procs(&top)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    // The kernel refuses while the task is inside.
    let busy = tree.remove(&top).unwrap_err();
    assert_eq!(
        busy.error.kind(),
        std::io::ErrorKind::ResourceBusy,
        "{busy}"
    );
    assert!(tree.exists(&rel));

    let mut child = guard.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    tree.remove(&top).unwrap();
    for dir in real_dirs(&tree, &top) {
        assert!(!dir.exists(), "{} is left", dir.display());
    }
    assert!(!tree.exists(&rel));
}

// ---- stat files for the metric advisor ----

#[test]
fn psi_files_parse_some_and_full_and_reject_garbage() {
    let text = "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\n\
                full avg10=0.75 avg60=0.00 avg300=0.00 total=42\n";
    let psi = super::parse_psi(text).unwrap();
    assert_eq!(psi.some.avg10, 1.5);
    assert_eq!(psi.some.avg60, 0.25);
    assert_eq!(psi.some.total_us, 123_456);
    assert_eq!(psi.full.unwrap().avg10, 0.75);
    assert_eq!(psi.full.unwrap().total_us, 42);
    // cpu.pressure before 5.13 has only `some`.
    let some_only = super::parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").unwrap();
    assert!(some_only.full.is_none());
    assert_eq!(some_only.some.total_us, 7);
    assert!(super::parse_psi("").is_none());
    assert!(super::parse_psi("some avg10=x avg60=0 avg300=0 total=1\n").is_none());
    assert!(super::parse_psi("some avg10=0.00 total=1\n").is_none());
}

#[test]
fn v1_stats_read_cpu_throttling_memory_and_pids() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    write(at("cpu,cpuacct").join("cpuacct.usage"), "123456789\n");
    write(
        at("cpu,cpuacct").join("cpu.stat"),
        "nr_periods 100\nnr_throttled 25\nthrottled_time 5000000\n",
    );
    write(at("memory").join("memory.usage_in_bytes"), "5000000\n");
    write(
        at("memory").join("memory.stat"),
        "cache 3000000\nrss 9\ninactive_file 9\ntotal_rss 2000000\ntotal_inactive_file 1000000\n\
         total_pgfault 77\ntotal_pgmajfault 3\ntotal_inactive_anon 300000\ntotal_active_anon \
         1500000\ntotal_unevictable 4096\ntotal_active_file 900000\n",
    );
    write(at("pids").join("pids.current"), "2\n");
    let r = tree.stats(POD).unwrap();
    let cpu = r.cpu.unwrap();
    assert_eq!(cpu.usage_core_nanos, 123_456_789);
    assert_eq!(cpu.usage_nano_cores, None);
    let t = cpu.throttling.unwrap();
    assert_eq!(
        (t.periods, t.throttled_periods, t.throttled_nanos),
        (100, 25, 5_000_000)
    );
    let m = r.memory.unwrap();
    assert_eq!(m.usage_bytes, 5_000_000);
    // The hierarchical total_inactive_file, not the local one.
    assert_eq!(m.working_set_bytes, 4_000_000);
    assert_eq!(m.rss_bytes, 2_000_000);
    // koordlet's: anonymous pages and unevictable ones, no page cache.
    assert_eq!(m.without_cache_bytes, 1_804_096);
    assert_eq!((m.page_faults, m.major_page_faults), (77, 3));
    // limits() wrote 64 MiB.
    assert_eq!(m.limit_bytes, Some(64 << 20));
    assert_eq!(r.pids, Some(2));
    // No pressure files on v1 here: nothing, and no error.
    let p = tree.pressure(POD).unwrap();
    assert!(p.cpu.is_none() && p.memory.is_none() && p.io.is_none());
    // The files read are the ones listed for the baseline.
    let files = tree.stat_files(POD);
    assert_eq!(files.len(), 6);
    assert!(files.iter().all(|f| f.exists()), "{files:?}");
}

#[test]
fn v1_stats_unlimited_memory_inactive_above_usage_and_vanished_cgroups() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &ResourceConfig::default()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    write(at("cpu,cpuacct").join("cpuacct.usage"), "1\n");
    write(at("memory").join("memory.usage_in_bytes"), "1000\n");
    write(
        at("memory").join("memory.stat"),
        "total_inactive_file 5000\n",
    );
    write(
        at("memory").join("memory.limit_in_bytes"),
        "9223372036854771712\n",
    );
    let r = tree.stats(POD).unwrap();
    let m = r.memory.unwrap();
    assert_eq!(m.working_set_bytes, 0, "floored at 0");
    assert_eq!(m.limit_bytes, None, "the page-aligned maximum is no limit");
    // No cpu.stat: no throttling; no pids.current: no pids.
    assert!(r.cpu.unwrap().throttling.is_none());
    assert_eq!(r.pids, None);
    let gone = tree.stats("kubepods/burstable/podgone").unwrap_err();
    assert_eq!(gone.error.kind(), std::io::ErrorKind::NotFound, "{gone}");
    let gone = tree.pressure("kubepods/burstable/podgone").unwrap_err();
    assert_eq!(gone.error.kind(), std::io::ErrorKind::NotFound, "{gone}");
    // A path that leaves the mount is refused, not read.
    assert!(tree.stats("../etc").is_err());
}

#[test]
fn v2_stats_read_cpu_stat_memory_pids_and_pressure() {
    let (dir, tree) = v2_tree("cpu memory pids");
    tree.create(POD, &limits()).unwrap();
    let pod = dir.path().join(POD);
    write(
        pod.join("cpu.stat"),
        "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 10\nnr_throttled 4\nthrottled_usec 300\n",
    );
    write(pod.join("memory.current"), "10000000\n");
    write(
        pod.join("memory.stat"),
        "anon 6000000\nfile 4000000\ninactive_file 3000000\nactive_file 1000000\npgfault 11\npgmajfault 1\n",
    );
    write(pod.join("memory.max"), "max\n");
    write(pod.join("pids.current"), "3\n");
    write(
        pod.join("cpu.pressure"),
        "some avg10=12.50 avg60=1.00 avg300=0.00 total=99\nfull avg10=2.00 avg60=0.00 avg300=0.00 total=9\n",
    );
    write(
        pod.join("memory.pressure"),
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    );
    let r = tree.stats(POD).unwrap();
    let cpu = r.cpu.unwrap();
    assert_eq!(cpu.usage_core_nanos, 2_500_000);
    let t = cpu.throttling.unwrap();
    assert_eq!(
        (t.periods, t.throttled_periods, t.throttled_nanos),
        (10, 4, 300_000)
    );
    let m = r.memory.unwrap();
    assert_eq!(m.working_set_bytes, 7_000_000);
    assert_eq!(m.rss_bytes, 6_000_000);
    assert_eq!((m.page_faults, m.major_page_faults), (11, 1));
    assert_eq!(m.limit_bytes, None, "memory.max `max`");
    assert_eq!(r.pids, Some(3));
    assert!(
        r.pressure.cpu.is_none(),
        "stats() leaves pressure to pressure()"
    );
    let p = tree.pressure(POD).unwrap();
    assert_eq!(p.cpu.unwrap().some.avg10, 12.5);
    assert_eq!(p.cpu.unwrap().full.unwrap().total_us, 9);
    assert!(p.memory.is_some());
    assert!(p.io.is_none(), "no io.pressure file");
    write(pod.join("memory.max"), "1048576\n");
    assert_eq!(
        tree.stats(POD).unwrap().memory.unwrap().limit_bytes,
        Some(1 << 20)
    );
    // No swap files (no swap accounting): no swap reading.
    assert_eq!(m.swap_usage_bytes, None);
    write(pod.join("memory.swap.current"), "8192\n");
    write(pod.join("memory.swap.max"), "max\n");
    let m = tree.stats(POD).unwrap().memory.unwrap();
    assert_eq!((m.swap_usage_bytes, m.swap_limit_bytes), (Some(8192), None));
    write(pod.join("memory.swap.max"), "0\n");
    let m = tree.stats(POD).unwrap().memory.unwrap();
    assert_eq!(m.swap_limit_bytes, Some(0));
    assert_eq!(tree.stat_files(POD).len(), 7);
}

#[test]
fn v2_root_has_no_memory_current_and_reads_as_no_memory() {
    let (dir, tree) = v2_tree("cpu memory pids");
    write(dir.path().join("cpu.stat"), "usage_usec 1000\n");
    write(dir.path().join("memory.stat"), "anon 1\n");
    let r = tree.stats("").unwrap();
    assert_eq!(r.cpu.unwrap().usage_core_nanos, 1_000_000);
    assert!(r.cpu.unwrap().throttling.is_none());
    assert!(r.memory.is_none());
}

#[test]
fn a_reader_reusing_details_reads_koordlets_memory_each_round_and_kubelets_every_tenth() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    let stat = |anon: u64, inactive_file: u64| {
        format!(
            "total_inactive_anon 1000\ntotal_active_anon {anon}\ntotal_unevictable 0\n\
             total_inactive_file {inactive_file}\ntotal_pgfault 5\n"
        )
    };
    write(at("cpu,cpuacct").join("cpuacct.usage"), "1000\n");
    write(at("memory").join("memory.usage_in_bytes"), "5000000\n");
    write(at("memory").join("memory.stat"), &stat(2000, 1_000_000));
    write(at("pids").join("pids.current"), "2\n");
    let mut reader = super::StatReader::with_limit(tree.clone(), 1 << 20).reusing_details();
    let m = reader.stats(POD, true).unwrap().memory.unwrap();
    assert_eq!(
        (m.working_set_bytes, m.without_cache_bytes),
        (4_000_000, 3000)
    );

    // The next rounds: CPU and koordlet's memory move; the usage file, the working set
    // made from it and the process count are the first round's.
    write(at("cpu,cpuacct").join("cpuacct.usage"), "2000\n");
    write(at("memory").join("memory.usage_in_bytes"), "9000000\n");
    write(at("memory").join("memory.stat"), &stat(7000, 500_000));
    write(at("pids").join("pids.current"), "40\n");
    for _ in 1..10 {
        reader.end_round();
        let r = reader.stats(POD, true).unwrap();
        assert_eq!(r.cpu.unwrap().usage_core_nanos, 2000);
        let m = r.memory.unwrap();
        assert_eq!((m.usage_bytes, m.working_set_bytes), (5_000_000, 4_000_000));
        assert_eq!(m.page_faults, 5);
        assert_eq!(m.without_cache_bytes, 8000);
        assert_eq!(r.pids, Some(2));
    }
    // The tenth round reads them all again, from one consistent pair of files.
    reader.end_round();
    let r = reader.stats(POD, true).unwrap();
    let m = r.memory.unwrap();
    assert_eq!((m.usage_bytes, m.working_set_bytes), (9_000_000, 8_500_000));
    assert_eq!(m.without_cache_bytes, 8000);
    assert_eq!(r.pids, Some(40));
    // A reader that does not reuse (the node collector's) reads every round.
    let mut every = super::StatReader::with_limit(tree.clone(), 1 << 20);
    every.stats(POD, true).unwrap();
    write(at("memory").join("memory.usage_in_bytes"), "6000000\n");
    every.end_round();
    let m = every.stats(POD, true).unwrap().memory.unwrap();
    assert_eq!(m.working_set_bytes, 5_500_000);
}

#[test]
fn a_reader_reusing_details_reuses_swap_with_the_usage_and_its_limit_with_the_memory_limit() {
    let (dir, tree) = v2_tree("cpu memory pids");
    tree.create(POD, &limits()).unwrap();
    let pod = dir.path().join(POD);
    write(pod.join("cpu.stat"), "usage_usec 1\n");
    write(pod.join("memory.current"), "5000000\n");
    write(pod.join("memory.stat"), "anon 1000\n");
    write(pod.join("memory.swap.current"), "4096\n");
    write(pod.join("memory.swap.max"), "0\n");
    let mut reader = super::StatReader::with_limit(tree.clone(), 1 << 20).reusing_details();
    let m = reader.stats(POD, false).unwrap().memory.unwrap();
    assert_eq!(
        (m.swap_usage_bytes, m.swap_limit_bytes),
        (Some(4096), Some(0))
    );
    write(pod.join("memory.swap.current"), "8192\n");
    write(pod.join("memory.swap.max"), "max\n");
    for _ in 1..10 {
        reader.end_round();
        let m = reader.stats(POD, false).unwrap().memory.unwrap();
        assert_eq!(
            (m.swap_usage_bytes, m.swap_limit_bytes),
            (Some(4096), Some(0))
        );
    }
    reader.end_round();
    let m = reader.stats(POD, false).unwrap().memory.unwrap();
    assert_eq!((m.swap_usage_bytes, m.swap_limit_bytes), (Some(8192), None));
}

#[test]
fn stat_reader_keeps_descriptors_sees_new_values_and_drops_gone_cgroups() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    write(at("cpu,cpuacct").join("cpuacct.usage"), "1000\n");
    write(at("memory").join("memory.usage_in_bytes"), "5000000\n");
    write(
        at("memory").join("memory.stat"),
        "total_inactive_file 1000000\n",
    );
    write(at("pids").join("pids.current"), "2\n");
    let mut reader = super::StatReader::with_limit(tree.clone(), 1 << 20);
    let r = reader.stats(POD, true).unwrap();
    assert_eq!(r.cpu.unwrap().usage_core_nanos, 1000);
    assert_eq!(r.memory.unwrap().working_set_bytes, 4_000_000);
    // cpuacct.usage, usage, stat, limit (made by create), pids.current; no cpu.stat.
    assert_eq!(reader.kept(), 5);
    // The same descriptors read the files' new contents, shorter ones too.
    write(at("cpu,cpuacct").join("cpuacct.usage"), "7\n");
    write(at("memory").join("memory.usage_in_bytes"), "3000000\n");
    write(at("pids").join("pids.current"), "11\n");
    reader.end_round();
    let r = reader.stats(POD, true).unwrap();
    assert_eq!(r.cpu.unwrap().usage_core_nanos, 7);
    assert_eq!(r.memory.unwrap().working_set_bytes, 2_000_000);
    assert_eq!(r.pids, Some(11));
    assert_eq!(reader.kept(), 5, "nothing opened twice");
    // The memory limit is read again only every tenth round; pids only when asked for.
    write(at("memory").join("memory.limit_in_bytes"), "1048576\n");
    assert_eq!(r.memory.unwrap().limit_bytes, Some(64 << 20));
    reader.end_round();
    let r = reader.stats(POD, false).unwrap();
    assert_eq!(r.memory.unwrap().limit_bytes, Some(64 << 20), "reused");
    assert_eq!(r.pids, None);
    for _ in 0..10 {
        reader.end_round();
    }
    let r = reader.stats(POD, true).unwrap();
    assert_eq!(r.memory.unwrap().limit_bytes, Some(1 << 20), "read again");
    assert_eq!(r.pids, Some(11));
    // The same reading as a one-off read that opens every file.
    assert_eq!(tree.stats(POD).unwrap().memory, r.memory);
    // A round that does not read the cgroup closes its files.
    reader.end_round();
    reader.end_round();
    assert_eq!(reader.kept(), 0);
    // A cgroup gone: NotFound, and nothing kept for it.
    reader.stats(POD, true).unwrap();
    for h in ["cpu,cpuacct", "memory", "pids"] {
        std::fs::remove_dir_all(at(h)).unwrap();
    }
    let gone = reader.stats(POD, true).unwrap_err();
    assert_eq!(gone.error.kind(), std::io::ErrorKind::NotFound, "{gone}");
    assert_eq!(reader.kept(), 0);
}

#[test]
fn stat_reader_skips_cpu_stat_without_a_cfs_quota_until_one_is_set() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &ResourceConfig::default()).unwrap();
    let cpu = dir.path().join("cpu,cpuacct").join(POD);
    write(cpu.join("cpuacct.usage"), "1\n");
    write(cpu.join("cpu.cfs_quota_us"), "-1\n");
    write(
        cpu.join("cpu.stat"),
        "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
    );
    let mut reader = super::StatReader::with_limit(tree, 1 << 20);
    let periods = |r: &mut super::StatReader| {
        r.stats(POD, true)
            .unwrap()
            .cpu
            .unwrap()
            .throttling
            .unwrap()
            .periods
    };
    assert_eq!(periods(&mut reader), 0, "read once for its counters");
    // No quota: the counters cannot move, so the file is not read again.
    write(
        cpu.join("cpu.stat"),
        "nr_periods 5\nnr_throttled 1\nthrottled_time 9\n",
    );
    reader.end_round();
    assert_eq!(periods(&mut reader), 0);
    // A quota set (a resize) is seen within ten rounds, and the file read again.
    write(cpu.join("cpu.cfs_quota_us"), "50000\n");
    for _ in 0..10 {
        reader.end_round();
    }
    assert_eq!(periods(&mut reader), 5);
}

#[test]
fn stat_reader_past_its_descriptor_budget_opens_files_per_read() {
    let (dir, tree) = v1_tree();
    tree.create(POD, &limits()).unwrap();
    let at = |h: &str| dir.path().join(h).join(POD);
    write(at("cpu,cpuacct").join("cpuacct.usage"), "5\n");
    // A quarter of 20 is 5: not enough for one cgroup's six files.
    let mut reader = super::StatReader::with_limit(tree, 20);
    let usage =
        |r: &mut super::StatReader| r.stats(POD, true).unwrap().cpu.unwrap().usage_core_nanos;
    assert_eq!(usage(&mut reader), 5);
    assert_eq!(reader.kept(), 0);
    write(at("cpu,cpuacct").join("cpuacct.usage"), "6\n");
    assert_eq!(usage(&mut reader), 6);
    // A file larger than the bound is an error, not a partial reading.
    write(
        at("memory").join("memory.usage_in_bytes"),
        &"1".repeat(70_000),
    );
    assert!(reader.stats(POD, true).is_err());
}

// ---- memory threshold notification files for the eviction manager ----

#[test]
fn v1_memory_threshold_registration_writes_one_line_with_both_fds() {
    use std::os::fd::AsFd;
    use std::os::fd::AsRawFd;
    let (dir, tree) = v1_tree();
    let cg = dir.path().join("memory/kubepods");
    fs::create_dir(&cg).unwrap();
    write(cg.join("memory.usage_in_bytes"), "4096\n");
    write(cg.join("cgroup.event_control"), "");
    let mut files = tree.memory_threshold_files("kubepods").unwrap();
    assert_eq!(files.dir(), cg);
    // Any open fd stands in for the eventfd on plain files.
    let stand_in = fs::File::open(cg.join("memory.usage_in_bytes")).unwrap();
    files.register(stand_in.as_fd(), 123_456).unwrap();
    let line = read(cg.join("cgroup.event_control"));
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields.len(), 3, "{line:?}");
    assert_eq!(fields[0], stand_in.as_raw_fd().to_string());
    assert_ne!(fields[1], fields[0], "the usage file has its own fd");
    assert_eq!(fields[2], "123456");
    // The root of the hierarchy too (memory.available).
    write(dir.path().join("memory/memory.usage_in_bytes"), "1\n");
    write(dir.path().join("memory/cgroup.event_control"), "");
    assert!(tree.memory_threshold_files("").is_ok());
}

#[test]
fn memory_threshold_files_refuse_v2_missing_cgroups_and_symlinks() {
    let (_v2dir, v2) = v2_tree("cpu memory pids");
    let e = v2.memory_threshold_files("").unwrap_err();
    assert_eq!(e.error.kind(), std::io::ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("not supported on cgroup v2"), "{e}");

    let (dir, tree) = v1_tree();
    let e = tree.memory_threshold_files("kubepods").unwrap_err();
    assert!(e.to_string().contains("no such cgroup"), "{e}");
    assert!(tree.memory_threshold_files("../etc").is_err());

    // A symlinked control file is never opened.
    let cg = dir.path().join("memory/kubepods");
    fs::create_dir(&cg).unwrap();
    write(cg.join("memory.usage_in_bytes"), "1\n");
    write(dir.path().join("elsewhere"), "");
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere"),
        cg.join("cgroup.event_control"),
    )
    .unwrap();
    let e = tree.memory_threshold_files("kubepods").unwrap_err();
    assert!(e.to_string().contains("cgroup.event_control"), "{e}");
}

#[test]
fn a_cgroup_was_created_at_its_oldest_directory_mtime() {
    use std::time::{Duration, SystemTime};
    let (dir, tree) = v1_tree();
    assert_eq!(tree.created("kubepods"), None, "no hierarchy has it");
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_650_000_000);
    let newer = old + Duration::from_secs(3600);
    for (h, t) in [("memory", newer), ("cpu,cpuacct", old)] {
        let d = dir.path().join(h).join("kubepods");
        fs::create_dir(&d).unwrap();
        fs::File::open(&d).unwrap().set_modified(t).unwrap();
    }
    assert_eq!(tree.created("kubepods"), Some(old));
    let (dir2, tree2) = v2_tree("cpu memory");
    let d = dir2.path().join("kubepods");
    fs::create_dir(&d).unwrap();
    fs::File::open(&d).unwrap().set_modified(newer).unwrap();
    assert_eq!(tree2.created("kubepods"), Some(newer));
}

#[test]
fn stat_values_match_whole_keys_only() {
    let stat = b"anon_thp 7\nanon 4096\nfile 1\ninactive_file 2048\nworkingset_refault_anon 3\n\
pgfault 12\npgmajfault x\n";
    let got = super::stat::stat_values(
        stat,
        [
            b"anon",
            b"inactive_file",
            b"pgfault",
            b"pgmajfault",
            b"swap",
        ],
    );
    // A key that is a prefix of another counts only on its own line; a value that is not
    // a number and a key that is absent read 0.
    assert_eq!(got, [4096, 2048, 12, 0, 0]);
    let no_newline = super::stat::stat_values(b"total_rss 5", [b"total_rss"]);
    assert_eq!(no_newline, [5]);
}
