//! The node QoS manager and runtime hooks on a real containerd,
//! real cgroups and the real oxlet binary. CPU suppress and memory eviction read the
//! usage the metric advisor puts in the metric cache.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

const START: Duration = Duration::from_secs(30);
const NODE: &str = "testnode";

/// Writes the node SLO file into the test's directory.
fn slo_file(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("node-slo.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A pod labelled `koordinator.sh/qosClass: BE` with two containers asking for
/// koordinator's batch resources (BestEffort to Kubernetes).
fn batch_pod_yaml(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{koordinator.sh/qosClass: BE}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {{kubernetes.io/batch-cpu: "500", kubernetes.io/batch-memory: 64Mi}}
      limits: {{kubernetes.io/batch-cpu: "1000", kubernetes.io/batch-memory: 64Mi}}
  - name: side
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {{kubernetes.io/batch-cpu: "250"}}
      limits: {{kubernetes.io/batch-cpu: "500", kubernetes.io/batch-memory: 32Mi}}
"#
    )
}

/// A v1 cgroup file of the pod (`rel` below its cgroup), as a number.
fn pod_cgroup_value(ox: &Oxlet, pod: &Pod, controller: &str, rel: &str) -> i64 {
    let path = ox.cgroup_file(
        controller,
        &format!("kubepods/besteffort/pod{}/{rel}", uid(pod)),
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim().parse().unwrap()
}

/// Waits up to 30 s until the pod's cgroup file reads `want`.
async fn wait_pod_cgroup_value(ox: &Oxlet, pod: &Pod, controller: &str, rel: &str, want: i64) {
    let t = std::time::Instant::now();
    loop {
        let have = pod_cgroup_value(ox, pod, controller, rel);
        if have == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{rel}: {have}, want {want}\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_resource_rule_sets_a_be_pods_cgroups_and_the_reconciler_repairs_them() {
    let bed = Testbed::start().await;
    // No NodeSLO: CPU suppress is off, so batch pods get their CFS quotas.
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_up(START).await;
    write_manifest(&ox.manifests, "batch.yaml", &batch_pod_yaml("batch"));
    write_manifest(
        &ox.manifests,
        "plain.yaml",
        &pod_yaml("plain", "sleep 3600", ""),
    );
    let batch = ox.wait_running("batch", START).await;
    let plain = ox.wait_running("plain", START).await;
    assert_eq!(
        batch.status.as_ref().unwrap().qos_class.as_deref(),
        Some("BestEffort")
    );
    // The pod: 750m of requests → 768 shares; 1500m of limits → 150000 µs; 96 MiB.
    // Set before the sandbox ran (PreRunPodSandbox).
    assert_eq!(pod_cgroup_value(&ox, &batch, "cpu", "cpu.shares"), 768);
    assert_eq!(
        pod_cgroup_value(&ox, &batch, "cpu", "cpu.cfs_quota_us"),
        150_000
    );
    assert_eq!(
        pod_cgroup_value(&ox, &batch, "memory", "memory.limit_in_bytes"),
        96 << 20
    );
    assert!(
        ox.log()
            .contains("runtime hook set a pod cgroup value before its sandbox runs")
    );
    // Each container: its own request and limits (PreCreateContainer).
    let main = runtime_id(&batch, "main");
    assert_eq!(
        pod_cgroup_value(&ox, &batch, "cpu", &format!("{main}/cpu.shares")),
        512
    );
    assert_eq!(
        pod_cgroup_value(&ox, &batch, "cpu", &format!("{main}/cpu.cfs_quota_us")),
        100_000
    );
    let side = runtime_id(&batch, "side");
    assert_eq!(
        pod_cgroup_value(
            &ox,
            &batch,
            "memory",
            &format!("{side}/memory.limit_in_bytes")
        ),
        32 << 20
    );
    // A pod without the BE label keeps kubelet's BestEffort cgroup.
    assert_eq!(pod_cgroup_value(&ox, &plain, "cpu", "cpu.shares"), 2);
    assert_eq!(pod_cgroup_value(&ox, &plain, "cpu", "cpu.cfs_quota_us"), -1);

    // Someone writes the pod's shares and a container's quota by hand: the
    // reconciler puts both back, and says why.
    let shares = ox.cgroup_file(
        "cpu",
        &format!("kubepods/besteffort/pod{}/cpu.shares", uid(&batch)),
    );
    std::fs::write(&shares, "1024").unwrap();
    let quota = ox.cgroup_file(
        "cpu",
        &format!(
            "kubepods/besteffort/pod{}/{main}/cpu.cfs_quota_us",
            uid(&batch)
        ),
    );
    std::fs::write(&quota, "-1").unwrap();
    assert_eq!(pod_cgroup_value(&ox, &batch, "cpu", "cpu.shares"), 1024);
    wait_pod_cgroup_value(&ox, &batch, "cpu", "cpu.shares", 768).await;
    wait_pod_cgroup_value(
        &ox,
        &batch,
        "cpu",
        &format!("{main}/cpu.cfs_quota_us"),
        100_000,
    )
    .await;
    let log = ox.log();
    let repair = log
        .lines()
        .find(|l| l.contains("a cgroup value was not the rule's") && l.contains("found=\"1024\""))
        .unwrap_or_else(|| panic!("no repair line\n{}", tail(&log, 30)));
    for field in [
        "level=\"pod\"",
        "resource=\"cpu.shares\"",
        "value=768",
        "hook=\"batchresource\"",
    ] {
        assert!(repair.contains(field), "{field} in {repair}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_suppress_limits_the_best_effort_cgroup_when_a_burstable_pod_burns_cpu() {
    let bed = Testbed::start().await;
    let slo = slo_file(
        bed.base_dir(),
        "resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 10, cpuSuppressPolicy: cfsQuota}\nstrategies: {cpuSuppress: true}\n",
    );
    let ox = Oxlet::start(&bed, &[&format!("--node-slo-file={}", slo.display())]);
    ox.wait_up(START).await;
    let quota = ox.cgroup_file("cpu", "kubepods/besteffort/cpu.cfs_quota_us");
    assert_eq!(ox.best_effort_quota(), -1);
    let burn = pod_yaml("burn", "while true; do :; done", "").replace(
        "    command:",
        "    resources:\n      requests: {cpu: 100m}\n    command:",
    );
    write_manifest(&ox.manifests, "burn.yaml", &burn);
    ox.wait_running("burn", START).await;
    // One core busy on a node with a 10 % threshold: BestEffort gets the minimum.
    ox.wait_best_effort_quota("suppressed", |q| q > 0 && q <= 2000)
        .await;
    assert!(
        ox.log()
            .contains("cpu suppress: set the BestEffort cgroup's cfs quota")
    );
    // koordlet's gauge is the quota written, in cores: positive, however far the
    // suppress value itself fell below zero.
    let (_, metrics) = ox.get("/metrics").await.unwrap();
    let cores: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("koordlet_be_suppress_cpu_cores{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("koordlet_be_suppress_cpu_cores on /metrics");
    let written: f64 = std::fs::read_to_string(&quota)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(cores > 0.0 && cores <= 0.02 + 1e-9, "{cores} cores");
    assert!(
        (cores - written / 100_000.0).abs() < 0.011,
        "{cores} against {written}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_eviction_evicts_the_be_labelled_api_pod_only() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let slo = slo_file(
        bed.base_dir(),
        "resourceUsedThresholdWithBE: {enable: true, memoryEvictThresholdPercent: 1, memoryEvictLowerPercent: 0}\nstrategies: {memoryEvict: true}\n",
    );
    // The static pod is BestEffort too, but static pods are critical: never evicted.
    let ox = Oxlet::new(&bed);
    write_manifest(&ox.manifests, "st.yaml", &pod_yaml("st", "sleep 3600", ""));
    let mut ox = ox;
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        &format!("--node-slo-file={}", slo.display()),
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let mut burstable = api_pod("bu", NODE, "sleep 3600", 1);
    burstable.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(serde_json::json!({"requests": {"memory": "16Mi"}})).unwrap());
    server.put(&burstable).unwrap();
    // koordinator's BE is the label; an unlabelled BestEffort pod is never a victim.
    let mut be = api_pod("be", NODE, "sleep 3600", 1);
    be.metadata.labels = Some([("koordinator.sh/qosClass".to_string(), "BE".to_string())].into());
    server.put(&be).unwrap();
    server
        .put(&api_pod("plain", NODE, "sleep 3600", 1))
        .unwrap();
    let be = ox
        .wait_api_phase(&pods, "be", "Failed", Duration::from_secs(40))
        .await;
    let s = be.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        Some("trigger by koordlet feature BEMemoryEvict, kill pod: be")
    );
    assert!(
        s.conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    // The Burstable pod is no victim: it runs (it may still be starting when the BE
    // pod is evicted, on a loaded machine).
    let bu = ox
        .wait_api_phase(&pods, "bu", "Running", Duration::from_secs(40))
        .await;
    assert_eq!(phase(&bu), "Running");
    let plain = ox
        .wait_api_phase(&pods, "plain", "Running", Duration::from_secs(40))
        .await;
    assert_eq!(phase(&plain), "Running");
    let st = ox.wait_running("st", START).await;
    assert_eq!(phase(&st), "Running");
}

/// One value from the metric cache through the debug route (None: no point).
async fn cached(ox: &Oxlet, query: &str) -> Option<f64> {
    let (code, body) = ox
        .debug_get(&format!("/debug/koord/metrics?{query}&agg=last&window=5s"))
        .await
        .expect("oxlet answers");
    assert_eq!(code, 200, "{query}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["value"].as_f64()
}

/// koordlet's `beresource` collector: `node_be` holds the BE pods' batch CPU requests
/// (500m + 250m here), the BE tier's real limit (every CPU: nothing suppresses it) and
/// its usage; and with `--enable-pagecache-collector` a pod's memory with page cache
/// is recorded beside the usage without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_be_collector_reports_batch_requests_the_real_limit_and_usage() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--enable-pagecache-collector=true"]);
    ox.wait_up(START).await;
    write_manifest(&ox.manifests, "batch.yaml", &batch_pod_yaml("batch"));
    let batch = ox.wait_running("batch", START).await;
    let be = |allocation: &str| format!("kind=node_be&be_resource=cpu&be_allocation={allocation}");
    let t = std::time::Instant::now();
    while cached(&ox, &be("request")).await != Some(750.0) {
        assert!(
            t.elapsed() < START,
            "node_be request never 750: {:?}",
            cached(&ox, &be("request")).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpus: f64 = online
        .trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<f64>().unwrap() - a.parse::<f64>().unwrap() + 1.0,
            None => 1.0,
        })
        .sum();
    assert_eq!(cached(&ox, &be("real-limit")).await, Some(cpus * 1000.0));
    let usage = cached(&ox, &be("usage")).await.unwrap();
    assert!((0.0..=cpus * 1000.0).contains(&usage), "{usage}");
    let pod = format!("pod_uid={}", uid(&batch));
    let with = cached(&ox, &format!("kind=pod_memory_usage_with_page_cache&{pod}")).await;
    let without = cached(&ox, &format!("kind=pod_memory_usage&{pod}")).await;
    assert!(
        matches!((with, without), (Some(w), Some(wo)) if w >= wo && wo > 0.0),
        "with page cache {with:?}, without {without:?}"
    );
    let (_, body) = ox.get("/metrics").await.unwrap();
    assert!(
        body.contains("koordlet_be_suppress_be_used_cpu_cores{node=\"testnode\"}"),
        "{}",
        body.lines()
            .filter(|l| l.contains("koordlet"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// koordlet's `hostapplication` collector: a NodeSLO host application (here from
/// `--node-slo-file`) is read from its own cgroup, below `kubepods` as its
/// `cgroupPath` says: a process burning CPU there shows as about a core. A path that
/// climbs out of its base is refused at start, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_applications_cgroup_is_collected_and_a_climbing_path_refused() {
    let bed = Testbed::start().await;
    let bad = slo_file(
        bed.base_dir(),
        "hostApplications: [{name: app, cgroupPath: {base: Kubepods, parentDir: \"a/../..\"}}]\n",
    );
    let (status, _) = Oxlet::new(&bed).run_to_end(&[&format!("--node-slo-file={}", bad.display())]);
    assert!(!status.success());
    let slo = slo_file(
        bed.base_dir(),
        "hostApplications: [{name: burner, qos: LS, cgroupPath: {base: Kubepods, relativePath: host-burner}}]\n",
    );
    let ox = Oxlet::start(&bed, &[&format!("--node-slo-file={}", slo.display())]);
    ox.wait_up(START).await;
    // The application's cgroup, made by hand as its own supervisor would, and a burner in it.
    let dirs: Vec<PathBuf> = ["cpuacct", "memory"]
        .iter()
        .map(|c| ox.cgroup_file(c, "kubepods/host-burner"))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    /// The burner dies with the test, whatever its end.
    struct Burner(std::process::Child);
    impl Drop for Burner {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let burner = Burner(
        std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    for d in &dirs {
        std::fs::write(d.join("cgroup.procs"), burner.0.id().to_string()).unwrap();
    }
    let q = "kind=host_application_cpu_usage&host_app_name=burner&agg=avg&window=3s";
    let t = std::time::Instant::now();
    let mut last = None;
    while t.elapsed() < START {
        let (_, body) = ox
            .debug_get(&format!("/debug/koord/metrics?{q}"))
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        last = v["value"].as_f64();
        if last.is_some_and(|c| c > 0.5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drop(burner);
    assert!(
        last.is_some_and(|c| (0.5..=1.1).contains(&c)),
        "host application CPU {last:?}"
    );
    let (_, body) = ox
        .debug_get("/debug/koord/metrics?kind=host_application_memory_usage_with_page_cache&host_app_name=burner")
        .await
        .unwrap();
    assert!(body.contains("\"count\":"), "{body}");
    for d in &dirs {
        let _ = std::fs::remove_dir(d);
    }
}

/// The CPUs of a cgroup of this oxlet in the v1 cpuset hierarchy (`rel` below the
/// cgroup root).
fn cpuset_of(ox: &Oxlet, rel: &str) -> String {
    let path = ox.cgroup_file("cpuset", &format!("{rel}/cpuset.cpus"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// Waits up to 20 s until every cgroup in `rels` has the same cpuset and `want`
/// holds for it; returns it.
async fn wait_cpusets(
    ox: &Oxlet,
    what: &str,
    rels: &[String],
    want: impl Fn(&str) -> bool,
) -> String {
    let t = std::time::Instant::now();
    loop {
        let have: Vec<String> = rels.iter().map(|r| cpuset_of(ox, r)).collect();
        if have.iter().all(|h| *h == have[0]) && want(&have[0]) {
            return have[0].clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{what}: {have:?}\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How many CPUs a kernel CPU list (`0-1,4`) names.
fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// The node's online CPUs, as the kernel lists them.
fn online_cpus() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpuset_policy_sets_the_best_effort_cpusets_and_cfs_quota_puts_them_back() {
    let bed = Testbed::start().await;
    let cpuset = "resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 10, cpuSuppressPolicy: cpuset}\nstrategies: {cpuSuppress: true}\n";
    let slo = slo_file(bed.base_dir(), cpuset);
    let flag = format!("--node-slo-file={}", slo.display());
    let mut ox = Oxlet::start(&bed, &[&flag]);
    ox.wait_up(START).await;
    // oxlet makes its QoS cgroups in every v1 hierarchy, the cpuset one too.
    let be = "kubepods/besteffort".to_string();
    let all = online_cpus();
    assert!(cpu_count(&cpuset_of(&ox, &be)) >= 2);
    write_manifest(&ox.manifests, "be.yaml", &pod_yaml("be", "sleep 3600", ""));
    let pod = ox.wait_running("be", START).await;
    let pod_dir = format!("{be}/pod{}", uid(&pod));
    let ctr_dir = format!("{pod_dir}/{}", runtime_id(&pod, "main"));
    let tree = [be.clone(), pod_dir, ctr_dir.clone()];
    // Suppressed to the minimum (one busy core would do; an idle node with a 10 %
    // threshold is enough): koordlet's minimum is 2 CPUs, so on a 2-CPU node the
    // BestEffort set is all of them; a container cgroup narrowed from outside shows
    // the write reaching the pod and container cgroups.
    std::fs::write(
        ox.cgroup_file("cpuset", &format!("{ctr_dir}/cpuset.cpus")),
        "1",
    )
    .unwrap();
    std::fs::write(
        ox.cgroup_file("cpu", &format!("{be}/cpu.cfs_quota_us")),
        "50000",
    )
    .unwrap();
    let set = wait_cpusets(&ox, "cpuset policy", &tree, |c| cpu_count(c) == 2).await;
    assert_eq!(cpuset_of(&ox, &ctr_dir), set);
    ox.wait_best_effort_quota("cpuset policy lifts the quota", |q| q == -1)
        .await;
    let (_, metrics) = ox.get("/metrics").await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("koordlet_be_suppress_cpu_cores{")
                && l.contains("type=\"cpuset\"")
                && l.ends_with(" 2")),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("suppress"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The policy goes to cfsQuota: a quota on the BestEffort cgroup, and every
    // BestEffort cgroup gets all CPUs back.
    ox.sigterm();
    std::fs::write(
        &slo,
        cpuset.replace("cpuSuppressPolicy: cpuset", "cpuSuppressPolicy: cfsQuota"),
    )
    .unwrap();
    std::fs::write(
        ox.cgroup_file("cpuset", &format!("{ctr_dir}/cpuset.cpus")),
        "1",
    )
    .unwrap();
    ox.spawn(&[&flag]);
    ox.wait_up(START).await;
    ox.wait_best_effort_quota("cfsQuota policy", |q| q > 0)
        .await;
    wait_cpusets(&ox, "cfsQuota policy", &tree, |c| c == all).await;
    assert!(
        ox.log()
            .contains("cpu suppress: gave the BestEffort cgroups all CPUs back")
    );
}
