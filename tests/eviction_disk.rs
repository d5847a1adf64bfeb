//! Disk pressure end to end: the real oxlet binary on a real containerd, its
//! `--root-dir` on a 64 MiB tmpfs so that a pod can fill it. A pod writing 40 MiB into
//! an emptyDir puts `nodefs.available<50%` over its threshold: DiskPressure rises, a
//! new pod is refused at admission, the node-level reclaim finds nothing to free, the
//! ranking by disk usage picks the writer, and its eviction gives the space back (its
//! emptyDir is torn down although the pod object stays), so the neighbours keep
//! running and DiskPressure clears after the transition period.

mod agent;
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

const NODE: &str = "testnode";

async fn conditions(ox: &Oxlet) -> serde_json::Value {
    let (_, body) = ox.debug_get("/debug/eviction").await.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()["conditions"].clone()
}

/// An apiserver pod whose container writes `mib` MiB into its emptyDir, then sleeps.
fn writer(name: &str, mib: u32) -> Pod {
    let script = format!("dd if=/dev/zero of=/scratch/blob bs=1M count={mib} && sleep 3600");
    let mut pod = api_pod(name, NODE, &script, 1);
    let spec = pod.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(serde_json::json!({"name": "scratch", "emptyDir": {}})).unwrap(),
    ]);
    spec.containers[0].volume_mounts = Some(vec![
        serde_json::from_value(serde_json::json!({"name": "scratch", "mountPath": "/scratch"}))
            .unwrap(),
    ]);
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_pressure_evicts_the_biggest_user_and_its_space_comes_back() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = Oxlet::new(&bed);
    // The bed's teardown unmounts what lies below its directory.
    std::fs::create_dir_all(&ox.root).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "oxtest-nodefs"])
        .arg(&ox.root)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "mounting a tmpfs at {}", ox.root.display());
    ox.env
        .push(("OXLET_TEST_VOLUME_STATS_PERIOD_MS".into(), "200".into()));
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "300".into()));
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        "--eviction-hard=memory.available<100Mi,nodefs.available<50%",
        "--eviction-pressure-transition-period=10s",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    server.put(&writer("small", 2)).unwrap();
    server
        .put(&api_pod("quiet", NODE, "sleep 3600", 1))
        .unwrap();
    ox.wait_api_running("small", Duration::from_secs(30)).await;
    ox.wait_api_running("quiet", Duration::from_secs(30)).await;
    server.put(&writer("hog", 40)).unwrap();

    let t = Instant::now();
    let mut saw_pressure = false;
    let hog = loop {
        saw_pressure |= conditions(&ox).await == serde_json::json!(["DiskPressure"]);
        let p = pods.get("hog").await.unwrap();
        if phase(&p) == "Failed" {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "hog: {:?}\n{}",
            p.status,
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let s = hog.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let message = s.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 32Mi, available: "
        ),
        "{message}"
    );

    // Still under DiskPressure (held for the transition period): a new pod is refused.
    server.put(&api_pod("late", NODE, "sleep 3600", 1)).unwrap();
    let late = ox
        .wait_api_phase(&pods, "late", "Failed", Duration::from_secs(20))
        .await;
    let s = late.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was rejected: The node had condition: [DiskPressure]. ")
    );

    // The hog's emptyDir is torn down, so the threshold is no longer met and the
    // condition clears a transition period later; nobody else is evicted.
    let evicted = Instant::now();
    while conditions(&ox).await != serde_json::json!([]) {
        assert!(
            evicted.elapsed() < Duration::from_secs(60),
            "{}\n{}",
            conditions(&ox).await,
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(saw_pressure, "{}", tail(&ox.log(), 40));
    for name in ["small", "quiet"] {
        let p = pods.get(name).await.unwrap();
        assert_eq!(phase(&p), "Running", "{name}: {:?}", p.status);
    }
    let log = ox.log();
    assert_eq!(
        log.matches("eviction manager: evicting pod").count(),
        1,
        "{}",
        tail(&log, 60)
    );
    assert!(
        log.contains("pods ranked for eviction"),
        "{}",
        tail(&log, 60)
    );
}
