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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_resource_hook_sets_a_best_effort_containers_cpu_shares() {
    let bed = Testbed::start().await;
    let slo = slo_file(
        bed.base_dir(),
        "resourceUsedThresholdWithBE: {enable: true}\nstrategies: {cpuSuppress: true}\n",
    );
    let ox = Oxlet::start(&bed, &[&format!("--node-slo-file={}", slo.display())]);
    ox.wait_up(START).await;
    // runc mounts the container's own cgroup at /sys/fs/cgroup (v1: per controller).
    let script = "echo shares=$(cat /sys/fs/cgroup/cpu/cpu.shares 2>/dev/null || echo w$(cat /sys/fs/cgroup/cpu.weight)); \
                  echo quota=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cat /sys/fs/cgroup/cpu.max); sleep 3600";
    let resources = "    resources:\n      requests: {kubernetes.io/batch-cpu: \"500\"}\n      limits: {kubernetes.io/batch-cpu: \"1000\"}\n";
    let text =
        pod_yaml("batch", script, "").replace("    command:", &format!("{resources}    command:"));
    write_manifest(&ox.manifests, "batch.yaml", &text);
    write_manifest(&ox.manifests, "plain.yaml", &pod_yaml("plain", script, ""));
    let batch = ox.wait_running("batch", START).await;
    let plain = ox.wait_running("plain", START).await;
    assert_eq!(
        batch.status.as_ref().unwrap().qos_class.as_deref(),
        Some("BestEffort")
    );
    let out = ox.main_log_once(&batch, "quota=").await;
    // v1: 500 × 1024 / 1000 = 512 shares; v2: weight 20. Quota 1000m = 100000 µs.
    assert!(
        out.contains("shares=512") || out.contains("shares=w20"),
        "{out}"
    );
    assert!(out.contains("quota=100000"), "{out}");
    // A BestEffort pod without batch resources keeps kubelet's 2 shares.
    let out = ox.main_log_once(&plain, "quota=").await;
    assert!(
        out.contains("shares=2") || out.contains("shares=w1"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_suppress_limits_the_best_effort_cgroup_when_a_burstable_pod_burns_cpu() {
    let bed = Testbed::start().await;
    let slo = slo_file(
        bed.base_dir(),
        "resourceUsedThresholdWithBE: {enable: true, cpuSuppressThresholdPercent: 10}\nstrategies: {cpuSuppress: true}\n",
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
    assert!(s.message.unwrap_or_default().contains("threshold 1%"));
    assert!(
        s.conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    let bu = pods.get("bu").await.unwrap();
    assert_eq!(phase(&bu), "Running");
    let plain = ox
        .wait_api_phase(&pods, "plain", "Running", Duration::from_secs(40))
        .await;
    assert_eq!(phase(&plain), "Running");
    let st = ox.wait_running("st", START).await;
    assert_eq!(phase(&st), "Running");
}
