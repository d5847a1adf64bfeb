//! kubelet's resource managers on a real containerd with the real oxlet binary:
//! the static CPU manager with CPU 0 reserved gives a Guaranteed container with
//! `cpu: 1` an exclusive CPU and everyone else the shared pool, moves the shared
//! containers' cpusets as the pool shrinks and grows (its reconcile loop), keeps both
//! across a restart (`cpu_manager_state`), and refuses a pod asking for more exclusive
//! CPUs than are free with kubelet's reason and message.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(40);
/// The reconcile loop's period in these tests (a pool change is applied within 1 s).
const RECONCILE: &str = "--cpu-manager-reconcile-period=2s";

/// The host's online CPUs, as the kernel lists them.
fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        out.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    out
}

/// A busybox pod with one container `main` asking for `cpu` (and 32Mi of memory);
/// `limits` too makes it Guaranteed.
fn cpu_pod(name: &str, cpu: &str, guaranteed: bool) -> String {
    let limits = if guaranteed {
        format!("      limits:\n        cpu: \"{cpu}\"\n        memory: 32Mi\n")
    } else {
        String::new()
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: "{name}"
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests:
        cpu: "{cpu}"
        memory: 32Mi
{limits}"#
    )
}

/// The CPUs container `main` of `pod` may run on, as its own process sees them.
async fn allowed_cpus(bed: &Testbed, pod: &Pod) -> String {
    let id = runtime_id(pod, "main");
    let out = exec_sh(bed, &id, "grep Cpus_allowed_list /proc/self/status").await;
    out.split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// Waits until `pod`'s container may run on exactly `want`.
async fn wait_allowed(bed: &Testbed, ox: &Oxlet, pod: &Pod, want: &str) {
    let t = std::time::Instant::now();
    loop {
        let got = allowed_cpus(bed, pod).await;
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}: Cpus_allowed_list {got}, want {want}\n{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_cpu_manager_gives_exclusive_cpus_and_the_shared_pool_follows() {
    let cpus = online_cpus();
    if cpus.len() < 2 || cpus[0] != 0 {
        eprintln!("skipped: needs CPUs 0 and 1 online, have {cpus:?}");
        return;
    }
    let all = if cpus.len() == 2 {
        "0-1".to_string()
    } else {
        format!("0-{}", cpus.len() - 1)
    };
    let bed = Testbed::start().await;
    let flags = [
        "--cpu-manager-policy=static",
        "--reserved-cpus=0",
        RECONCILE,
    ];
    let mut ox = Oxlet::start(&bed, &flags);

    // A Burstable pod first: the whole machine is the shared pool.
    write_manifest(
        &ox.manifests,
        "shared.yaml",
        &cpu_pod("shared", "100m", false),
    );
    let shared = ox.wait_running("shared", START).await;
    wait_allowed(&bed, &ox, &shared, &all).await;

    // A Guaranteed pod with a whole CPU: an exclusive one, never the reserved CPU 0;
    // the shared pod's cpuset shrinks without a restart.
    write_manifest(&ox.manifests, "excl.yaml", &cpu_pod("excl", "1", true));
    let excl = ox.wait_running("excl", START).await;
    let exclusive = allowed_cpus(&bed, &excl).await;
    assert!(
        !exclusive.contains(',') && !exclusive.contains('-') && exclusive != "0",
        "one exclusive CPU, not the reserved one: {exclusive}"
    );
    let pool: Vec<String> = (cpus.iter())
        .filter(|c| c.to_string() != exclusive)
        .map(ToString::to_string)
        .collect();
    if cpus.len() == 2 {
        wait_allowed(&bed, &ox, &shared, &pool.join(",")).await;
    }
    let state = std::fs::read_to_string(ox.root.join("cpu_manager_state")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["policyName"], "static");
    assert_eq!(state["entries"][uid(&excl)]["main"], exclusive.as_str());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ox.root.join("cpu_manager_state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // More exclusive CPUs than are free: refused at admission with kubelet's words.
    if cpus.len() == 2 {
        write_manifest(&ox.manifests, "more.yaml", &cpu_pod("more", "1", true));
        let more = ox
            .wait_for("more rejected", START, |pods| {
                find(pods, "more").filter(|p| phase(p) == "Failed").cloned()
            })
            .await;
        let status = more.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
        assert_eq!(
            status.message.as_deref(),
            Some(
                "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
            )
        );
        std::fs::remove_file(ox.manifests.join("more.yaml")).unwrap();
    }

    // A restart keeps both: the exclusive CPU from the state file, the pool with it.
    let _ = ox.sigterm();
    ox.spawn(&flags);
    let excl = ox.wait_running("excl", START).await;
    assert_eq!(allowed_cpus(&bed, &excl).await, exclusive);
    if cpus.len() == 2 {
        wait_allowed(&bed, &ox, &shared, &pool.join(",")).await;
    }

    // The Guaranteed pod leaves: its CPU goes back to the pool and the shared
    // container's cpuset grows back.
    std::fs::remove_file(ox.manifests.join("excl.yaml")).unwrap();
    ox.wait_for("excl gone", START, |pods| {
        find(pods, "excl").is_none().then_some(())
    })
    .await;
    wait_allowed(&bed, &ox, &shared, &all).await;
    let state = std::fs::read_to_string(ox.root.join("cpu_manager_state")).unwrap();
    assert!(
        !state.contains(&uid(&excl)),
        "the pod's entry is gone: {state}"
    );
}
