//! The container manager on real cgroups and a real containerd: the QoS tree, one
//! cgroup per pod with kubelet's limits read back from the kernel's files, the
//! containers inside it, their `oom_score_adj`, removal after churn, node allocatable
//! and its enforcement, resource-fit admission, a driver the runtime contradicts, and
//! a cgroup root that does not exist (refused, as kubelet refuses it).
//!
//! This host is cgroup v1 (hybrid), driver cgroupfs; each test's oxlet runs with
//! `--cgroup-root=/<its test dir>`, so tests never share a tree.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);

/// `/sys/fs/cgroup/<controller>/<cgroup root>/<rel>`.
fn cg(ox: &Oxlet, controller: &str, rel: &str) -> PathBuf {
    ox.cgroup_file(controller, rel)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn read_i64(p: &Path) -> i64 {
    read(p)
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What v1 reports for "no memory limit" (the largest page-aligned value).
fn unlimited_memory() -> i64 {
    read_i64(Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
}

/// A pod whose one container prints its cgroups and oom_score_adj, then sleeps.
fn reporting_pod(name: &str, resources: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "cat /proc/self/cgroup; echo oom=$(cat /proc/self/oom_score_adj); sleep 3600"]
{resources}"#
    )
}

/// The container's log lines (CRI format), once `want` appears in them.
async fn container_output(ox: &Oxlet, pod: &k8s_openapi::api::core::v1::Pod, want: &str) -> String {
    ox.main_log_once(pod, want)
        .await
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_qos_cgroups_with_kubelets_limits() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--pod-max-pids=100"]);
    // The QoS tree exists once oxlet is up.
    ox.wait_up(START).await;
    for c in ["cpu", "memory", "pids"] {
        for q in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            assert!(cg(&ox, c, q).is_dir(), "{}", cg(&ox, c, q).display());
        }
    }
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/besteffort/cpu.shares")),
        2
    );

    let guaranteed = "    resources:\n      limits: {cpu: 200m, memory: 64Mi}\n";
    let burstable = "    resources:\n      requests: {cpu: 100m, memory: 32Mi}\n      limits: {memory: 128Mi}\n";
    write_manifest(&ox.manifests, "g.yaml", &reporting_pod("gua", guaranteed));
    write_manifest(&ox.manifests, "b.yaml", &reporting_pod("bur", burstable));
    write_manifest(&ox.manifests, "e.yaml", &reporting_pod("bes", ""));
    let g = ox.wait_running("gua", START).await;
    let b = ox.wait_running("bur", START).await;
    let e = ox.wait_running("bes", START).await;
    assert_eq!(
        g.status.as_ref().unwrap().qos_class.as_deref(),
        Some("Guaranteed")
    );
    assert_eq!(
        b.status.as_ref().unwrap().qos_class.as_deref(),
        Some("Burstable")
    );
    assert_eq!(
        e.status.as_ref().unwrap().qos_class.as_deref(),
        Some("BestEffort")
    );

    let unlimited = unlimited_memory();
    // (pod, its cgroup, shares, quota, memory limit)
    let cases = [
        (
            &g,
            format!("kubepods/pod{}", uid(&g)),
            204,
            20_000,
            64 << 20,
        ),
        (
            &b,
            format!("kubepods/burstable/pod{}", uid(&b)),
            102,
            -1,
            128 << 20,
        ),
        (
            &e,
            format!("kubepods/besteffort/pod{}", uid(&e)),
            2,
            -1,
            unlimited,
        ),
    ];
    let mut ooms = Vec::new();
    for (pod, rel, shares, quota, memory) in &cases {
        let name = pod.metadata.name.as_deref().unwrap();
        assert_eq!(
            read_i64(&cg(&ox, "cpu", &format!("{rel}/cpu.shares"))),
            *shares,
            "{name}"
        );
        assert_eq!(
            read_i64(&cg(&ox, "cpu", &format!("{rel}/cpu.cfs_quota_us"))),
            *quota,
            "{name}"
        );
        assert_eq!(
            read_i64(&cg(&ox, "cpu", &format!("{rel}/cpu.cfs_period_us"))),
            100_000,
            "{name}"
        );
        assert_eq!(
            read_i64(&cg(&ox, "memory", &format!("{rel}/memory.limit_in_bytes"))),
            *memory,
            "{name}"
        );
        assert_eq!(
            read(&cg(&ox, "pids", &format!("{rel}/pids.max"))),
            "100",
            "{name}"
        );
        // The container's own cgroups are inside the pod's.
        let out = container_output(&ox, pod, "oom=").await;
        for controller in ["cpu", "memory", "pids"] {
            let line = out
                .lines()
                .find(|l| {
                    l.split(':')
                        .nth(1)
                        .is_some_and(|c| c.split(',').any(|x| x == controller))
                })
                .unwrap_or_else(|| panic!("{name}: no {controller} line in {out}"));
            let path = line.splitn(3, ':').nth(2).unwrap();
            assert!(
                path.starts_with(&format!("{}/{rel}/", ox.cgroup_root)),
                "{name}: {controller} cgroup {path} is not inside {}/{rel}",
                ox.cgroup_root
            );
        }
        let oom: i64 = out
            .lines()
            .find_map(|l| l.strip_prefix("oom="))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        ooms.push(oom);
    }
    // kubelet's values; Guaranteed's -997 is clamped by this host's containerd
    // (restrict_oom_score_adj), so only its order is certain.
    let burstable_oom = 1000 - (1000 * (32i64 << 20)) / (meminfo("MemTotal:") as i64);
    assert_eq!(ooms[1], burstable_oom.clamp(3, 999), "Burstable");
    assert_eq!(ooms[2], 1000, "BestEffort");
    assert!(
        ooms[0] < ooms[1],
        "Guaranteed {} vs Burstable {}",
        ooms[0],
        ooms[1]
    );
    // Burstable's shares are its pods' cpu requests (100m).
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/burstable/cpu.shares")),
        102
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_level_resources_class_the_pod_and_limit_its_cgroup() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_up(START).await;
    // Pod-level resources (`spec.resources`, beta and on by default since 1.34): the
    // containers set nothing, the pod's own requests and limits decide its class and
    // its cgroup; a request left out defaults to the limit.
    let pod_level = |name: &str, level: &str| {
        let grace = "  terminationGracePeriodSeconds: 1\n";
        reporting_pod(name, "").replace(grace, &format!("{grace}{level}"))
    };
    let guaranteed = "  resources:\n    limits: {cpu: 300m, memory: 96Mi}\n";
    let burstable =
        "  resources:\n    requests: {cpu: 100m, memory: 32Mi}\n    limits: {memory: 80Mi}\n";
    write_manifest(&ox.manifests, "g.yaml", &pod_level("plg", guaranteed));
    write_manifest(&ox.manifests, "b.yaml", &pod_level("plb", burstable));
    let g = ox.wait_running("plg", START).await;
    let b = ox.wait_running("plb", START).await;
    let class = |p: &k8s_openapi::api::core::v1::Pod| p.status.as_ref().unwrap().qos_class.clone();
    assert_eq!(class(&g).as_deref(), Some("Guaranteed"));
    assert_eq!(class(&b).as_deref(), Some("Burstable"));

    // (its cgroup, shares, quota, memory limit): the Burstable pod limits memory at
    // pod level only, which limits its cgroup's memory; it limits no cpu.
    let cases = [
        (format!("kubepods/pod{}", uid(&g)), 307, 30_000, 96 << 20),
        (
            format!("kubepods/burstable/pod{}", uid(&b)),
            102,
            -1,
            80 << 20,
        ),
    ];
    for (rel, shares, quota, memory) in &cases {
        let file = |c: &str, f: &str| read_i64(&cg(&ox, c, &format!("{rel}/{f}")));
        assert_eq!(file("cpu", "cpu.shares"), *shares, "{rel}");
        assert_eq!(file("cpu", "cpu.cfs_quota_us"), *quota, "{rel}");
        assert_eq!(file("memory", "memory.limit_in_bytes"), *memory, "{rel}");
    }
    // The Burstable QoS cgroup's shares count the pod-level cpu request (100m).
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/burstable/cpu.shares")),
        102
    );
    // The Summary API's pod view reads the pod cgroup: what is left of the pod-level
    // memory limit (availableBytes = limit - workingSet), the containers having none.
    for (p, limit) in [(&g, 96u64 << 20), (&b, 80 << 20)] {
        let memory = pod_summary_memory(&ox, &uid(p)).await;
        let (available, working) = (
            memory["availableBytes"].as_u64().unwrap(),
            memory["workingSetBytes"].as_u64().unwrap(),
        );
        assert_eq!(available + working, limit, "{memory}");
        assert!(working > 0, "{memory}");
    }
}

/// The pod's `memory` in `/stats/summary`, once its pod cgroup has been read.
async fn pod_summary_memory(ox: &Oxlet, pod_uid: &str) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let (code, body) = ox.get("/stats/summary").await.expect("oxlet answers");
        assert_eq!(code, 200, "{body}");
        let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
        let memory = (summary["pods"].as_array().into_iter().flatten())
            .find(|p| p["podRef"]["uid"] == pod_uid)
            .map(|p| p["memory"].clone())
            .filter(|m| m.get("availableBytes").is_some());
        if let Some(memory) = memory {
            return memory;
        }
        assert!(
            t.elapsed() < START,
            "pod {pod_uid} not in the summary: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pod cgroups below the QoS cgroups, in any hierarchy.
fn pod_cgroups_left(ox: &Oxlet) -> Vec<PathBuf> {
    let mut left = Vec::new();
    for c in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "devices", "blkio", "systemd",
        "unified",
    ] {
        for q in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            let Ok(entries) = std::fs::read_dir(cg(ox, c, q)) else {
                continue;
            };
            left.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("pod"))
                    .map(|e| e.path()),
            );
        }
    }
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cgroups_go_with_their_pods_and_nothing_is_left_after_churn() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let kinds = [
        "    resources:\n      limits: {cpu: 100m, memory: 32Mi}\n",
        "    resources:\n      requests: {cpu: 50m}\n",
        "",
        "    resources:\n      requests: {memory: 16Mi}\n",
    ];
    // 5 rounds of 4 pods: 20 create/delete cycles.
    for round in 0..5 {
        for (i, res) in kinds.iter().enumerate() {
            write_manifest(
                &ox.manifests,
                &format!("p{i}.yaml"),
                &reporting_pod(&format!("churn{round}x{i}"), res),
            );
        }
        let mut uids = Vec::new();
        for i in 0..kinds.len() {
            uids.push(uid(&ox
                .wait_running(&format!("churn{round}x{i}"), START)
                .await));
        }
        assert_eq!(
            pod_cgroups_left(&ox)
                .iter()
                .filter(|p| p.starts_with(cg(&ox, "cpu", "")))
                .count(),
            4
        );
        for i in 0..kinds.len() {
            std::fs::remove_file(ox.manifests.join(format!("p{i}.yaml"))).unwrap();
        }
        ox.wait_for("the round's pods gone", START, |pods| {
            pods.is_empty().then_some(())
        })
        .await;
        let t = Instant::now();
        loop {
            let left = pod_cgroups_left(&ox);
            if left.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "round {round}: pod cgroups left: {left:?}\n{}",
                tail(&ox.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for u in &uids {
            assert!(
                ox.log().contains(&format!("podUID=\"{u}\"")),
                "the log tells of pod {u}"
            );
        }
    }
    // The QoS cgroups stay, Burstable back to the least shares with no pod left.
    assert!(cg(&ox, "cpu", "kubepods/burstable").is_dir());
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/burstable/cpu.shares")),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocatable_limits_kubepods_and_admission_rejects_what_does_not_fit() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(
        &bed,
        &[
            "--kube-reserved=cpu=100m,memory=100Mi",
            "--system-reserved=memory=50Mi",
        ],
    );
    ox.wait_up(START).await;
    let total = meminfo("MemTotal:") as i64;
    let cores = i64::from(
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|l| {
                l.trim()
                    .split(',')
                    .map(|r| match r.split_once('-') {
                        Some((a, b)) => b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1,
                        None => 1,
                    })
                    .sum::<u32>()
            })
            .unwrap(),
    );
    // kubepods: capacity − reserved (the eviction threshold is not subtracted here).
    let enforced_memory = total - (150 << 20);
    let page = 4096;
    assert_eq!(
        read_i64(&cg(&ox, "memory", "kubepods/memory.limit_in_bytes")),
        enforced_memory / page * page
    );
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/cpu.shares")),
        (cores * 1000 - 100) * 1024 / 1000
    );
    // kubelet always limits kubepods' pids, to the host's pid limit.
    let pid_max = read_i64(Path::new("/proc/sys/kernel/pid_max"))
        .min(read_i64(Path::new("/proc/sys/kernel/threads-max")));
    assert_eq!(read_i64(&cg(&ox, "pids", "kubepods/pids.max")), pid_max);
    // Allocatable: capacity − reserved − the hard eviction threshold (100Mi).
    let alloc_memory = total - (250 << 20);
    let alloc_cpu = cores * 1000 - 100;

    let too_much_cpu = format!(
        "    resources:\n      requests: {{cpu: {}m}}\n",
        alloc_cpu + 1
    );
    let too_much_memory = format!(
        "    resources:\n      requests: {{memory: \"{}\"}}\n",
        alloc_memory + 1
    );
    let fits = format!(
        "    resources:\n      requests: {{cpu: {}m, memory: 16Mi}}\n",
        alloc_cpu / 2
    );
    // The pod that fits first, so it is admitted (and counts as used) before the others.
    write_manifest(&ox.manifests, "f.yaml", &reporting_pod("fits", &fits));
    ox.wait_running("fits", START).await;
    write_manifest(
        &ox.manifests,
        "c.yaml",
        &reporting_pod("hungry-cpu", &too_much_cpu),
    );
    write_manifest(
        &ox.manifests,
        "m.yaml",
        &reporting_pod("hungry-mem", &too_much_memory),
    );
    let rejected = |name: &'static str| {
        move |pods: &[k8s_openapi::api::core::v1::Pod]| {
            find(pods, name)
                .filter(|p| phase(p) == "Failed")
                .and_then(|p| p.status.clone())
        }
    };
    let cpu = ox
        .wait_for("hungry-cpu rejected", START, rejected("hungry-cpu"))
        .await;
    assert_eq!(cpu.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        cpu.message.as_deref().unwrap(),
        format!(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: {}, used: {}, capacity: {alloc_cpu}",
            alloc_cpu + 1,
            alloc_cpu / 2
        )
    );
    let mem = ox
        .wait_for("hungry-mem rejected", START, rejected("hungry-mem"))
        .await;
    assert_eq!(mem.reason.as_deref(), Some("OutOfmemory"));
    assert!(
        mem.message.as_deref().unwrap().ends_with(&format!(
            "memory, requested: {}, used: {}, capacity: {alloc_memory}",
            alloc_memory + 1,
            16 << 20
        )),
        "{:?}",
        mem.message
    );
    // Rejected pods never start.
    for name in ["hungry-cpu", "hungry-mem"] {
        let pods = ox.pods().await;
        let p = find(&pods, name).unwrap();
        assert!(cri_containers(&bed, &uid(p)).await.is_empty(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_the_runtime_contradicts_is_refused() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    ox.spawn(&["--cgroup-driver=systemd"]);
    let status = ox.wait_exit(START);
    assert!(!status.success(), "{status:?}");
    let log = ox.log();
    let line = log
        .lines()
        .find(|l| l.contains("systemd") && l.contains("cgroupfs"))
        .unwrap_or_else(|| panic!("no line names both drivers:\n{log}"));
    assert!(line.contains("--cgroup-driver"), "{line}");
    // Nothing was created.
    assert!(!cg(&ox, "cpu", "kubepods").exists());
    assert!(!cg(&ox, "cpu", "kubepods.slice").exists());
}

/// kubelet's rule: the cgroup root must exist before the start, in every hierarchy
/// kubelet looks at (cpu, cpuacct, cpuset, memory, pids, and systemd's named one);
/// oxlet refuses a missing one naming the setting and each missing path, and creates
/// nothing. The harness's own root, made beforehand as a service manager would, is
/// verified at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cgroup_root_that_does_not_exist_is_refused_and_not_created() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    let (_absent_dir, absent) = common::own_test_cgroup("oxlet-absent-");
    let name = absent.trim_start_matches('/');
    let mounts = ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"]
        .map(|h| Path::new("/sys/fs/cgroup").join(h));
    // Made in one hierarchy only, as a half-finished set-up would leave it.
    let memory = Path::new("/sys/fs/cgroup/memory").join(name);
    std::fs::create_dir_all(&memory).unwrap();
    ox.spawn(&[&format!("--cgroup-root={absent}")]);
    let status = ox.wait_exit(START);
    let log = ox.log();
    let _ = std::fs::remove_dir(&memory);
    assert!(!status.success(), "{status:?}\n{log}");
    let line = log
        .lines()
        .find(|l| l.contains("invalid configuration"))
        .unwrap_or_else(|| panic!("no refusal:\n{log}"));
    assert!(
        // The error is the `err` value of kubelet's "command failed" line: Go-quoted.
        line.contains(&format!("cgroup [\\\"{name}\\\"] has some missing paths: "))
            && line.contains(&format!("(--cgroup-root / cgroupRoot \\\"{absent}\\\")"))
            && line.contains("oxlet does not create its cgroup root"),
        "{line}"
    );
    for m in &mounts {
        let dir = m.join(name);
        if m.ends_with("memory") {
            assert!(!line.contains(&dir.display().to_string()), "{line}");
        } else if m.is_dir() {
            assert!(line.contains(&dir.display().to_string()), "{line}");
        }
        assert!(!dir.exists() || m.ends_with("memory"), "{}", dir.display());
    }
    assert!(!memory.join("kubepods").exists());

    // The harness's root exists: verified, and the tree is made below it.
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_up(START).await;
    assert!(
        ox.log().contains(&format!(
            "container manager verified the cgroup root \\\"{}\\\" exists",
            ox.cgroup_root
        )),
        "{}",
        tail(&ox.log(), 40)
    );
    assert!(cg(&ox, "cpu", "kubepods").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qos_cgroup_removed_from_outside_is_repaired() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_up(START).await;
    for c in [
        "cpu", "cpuacct", "cpuset", "memory", "pids", "freezer", "devices", "blkio", "systemd",
        "unified",
    ] {
        let p = cg(&ox, c, "kubepods/besteffort");
        if p.is_dir() {
            std::fs::remove_dir(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
    write_manifest(&ox.manifests, "e.yaml", &reporting_pod("late", ""));
    let pod = ox.wait_running("late", START).await;
    let rel = format!("kubepods/besteffort/pod{}", uid(&pod));
    assert!(cg(&ox, "memory", &rel).is_dir());
    assert_eq!(
        read_i64(&cg(&ox, "cpu", "kubepods/besteffort/cpu.shares")),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_running_outside_a_pod_cgroup_are_restarted_inside_one() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    // kubelet refuses cgroupsPerQOS=false while enforceNodeAllocatable has `pods`.
    ox.spawn(&["--cgroups-per-qos=false", "--enforce-node-allocatable="]);
    ox.wait_up(START).await;
    assert!(!cg(&ox, "cpu", "kubepods").exists());
    write_manifest(&ox.manifests, "p.yaml", &reporting_pod("old", ""));
    let before = ox.wait_running("old", START).await;
    let out = container_output(&ox, &before, "oom=").await;
    assert!(!out.contains("kubepods"), "{out}");

    // As kubelet after enabling per-QoS cgroups: the pod is killed once and comes
    // back inside its own cgroup.
    ox.sigterm();
    ox.spawn(&[]);
    let after = ox
        .wait_for("old restarted", START, |pods| {
            find(pods, "old")
                .filter(|p| is_running(p) && container(p, "main").restart_count == 1)
                .cloned()
        })
        .await;
    assert_eq!(uid(&after), uid(&before));
    let rel = format!("kubepods/besteffort/pod{}", uid(&after));
    let dir = ox
        .logs
        .join(format!("default_old-testnode_{}", uid(&after)));
    let t = Instant::now();
    let log = loop {
        let text = std::fs::read_to_string(dir.join("main/1.log")).unwrap_or_default();
        if text.contains("oom=") {
            break text;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        log.contains(&format!("{}/{rel}/", ox.cgroup_root)),
        "not inside {rel}: {log}"
    );
    assert!(
        ox.log()
            .contains("its containers run outside its pod cgroup")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_beyond_the_node_are_refused_at_start() {
    let bed = Testbed::start().await;
    let cores = std::thread::available_parallelism().unwrap().get();
    // Memory just under capacity is still too much once memory.available<100Mi counts.
    let memory = (meminfo("MemTotal:") as i64) - (50 << 20);
    for (flag, resource) in [
        (format!("--kube-reserved=cpu={}", cores + 1), "cpu"),
        (format!("--system-reserved=memory={memory}"), "memory"),
    ] {
        let mut ox = Oxlet::new(&bed);
        ox.spawn(&[&flag]);
        let status = ox.wait_exit(START);
        assert!(!status.success(), "{flag}: {status:?}");
        let log = ox.log();
        assert!(
            log.contains("invalid Node Allocatable configuration.")
                && log.contains(&format!(
                    "Resource \\\"{resource}\\\" has an allocatable of"
                )),
            "{flag}:\n{log}"
        );
        assert!(!cg(&ox, "cpu", "kubepods").exists(), "{flag}");
    }
}
