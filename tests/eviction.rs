//! The eviction manager on a real containerd, real cgroups, the real
//! oxlet binary and the test apiserver: a hard `memory.available` threshold of
//! MemTotal is always met (available = MemTotal − working set), so MemoryPressure is
//! raised on the first cycle with readings, pods are evicted one per cycle in
//! kubelet's order, static pods never, and BestEffort pods are refused at admission.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;

const NODE: &str = "testnode";

/// A threshold met unless the machine's working set halves: MemTotal minus half of
/// what is in use (MemTotal − MemAvailable, at most the working set). Not MemTotal
/// itself: a hard threshold is subtracted from allocatable, and pods must still fit.
fn threshold() -> u64 {
    let (total, available) = (meminfo("MemTotal:"), meminfo("MemAvailable:"));
    total - (total - available) / 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_evicts_best_effort_first_never_static_and_refuses_best_effort() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    // The pods are in the apiserver before oxlet starts, so they are admitted before
    // the first cycle with readings (the period is 6 s) raises MemoryPressure.
    // The Burstable pod stays within its request: the BestEffort pod, over its (zero)
    // request, ranks first.
    let mut burstable = api_pod("bu", NODE, "sleep 3600", 1);
    burstable.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(serde_json::json!({"requests": {"memory": "8Mi"}})).unwrap());
    server.put(&burstable).unwrap();
    server.put(&api_pod("be", NODE, "sleep 3600", 1)).unwrap();
    let mut ox = Oxlet::new(&bed);
    write_manifest(&ox.manifests, "st.yaml", &pod_yaml("st", "sleep 3600", ""));
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "6000".into()));
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        &format!("--eviction-hard=memory.available<{}", threshold()),
        "--node-status-update-frequency=1s",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let be = ox
        .wait_api_phase(&pods, "be", "Failed", Duration::from_secs(40))
        .await;
    let s = be.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let message = s.message.unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: "),
        "{message}"
    );
    assert!(
        s.conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    // One eviction per cycle: the Burstable pod is still running when the
    // BestEffort one has failed.
    let bu = pods.get("bu").await.unwrap();
    assert_ne!(
        phase(&bu),
        "Failed",
        "bu was evicted with or before be: {:?}\n{}",
        bu.status,
        ox.log()
            .lines()
            .filter(|l| l.contains("eviction manager") || l.contains("admi"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The condition on the read-only API and on the Node.
    let (code, body) = ox.debug_get("/debug/eviction").await.unwrap();
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["conditions"],
        serde_json::json!(["MemoryPressure"]),
        "{body}"
    );
    assert_eq!(v["lastEviction"], "default/be", "{body}");
    let t = Instant::now();
    loop {
        let node = server.get::<Node>("", NODE).unwrap();
        let pressure = node
            .as_ref()
            .and_then(|n| n.status.as_ref()?.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "MemoryPressure"))
            .map(|c| c.status.clone());
        if pressure.as_deref() == Some("True") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "{pressure:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Admission under memory pressure: a new BestEffort pod is refused.
    server.put(&api_pod("late", NODE, "sleep 3600", 1)).unwrap();
    let late = ox
        .wait_api_phase(&pods, "late", "Failed", Duration::from_secs(20))
        .await;
    let s = late.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        // kubelet's rejectPod prefixes the handler's message.
        Some("Pod was rejected: The node had condition: [MemoryPressure]. ")
    );
    // The next cycle evicts the Burstable pod; the static pod is critical and stays.
    ox.wait_api_phase(&pods, "bu", "Failed", Duration::from_secs(40))
        .await;
    let st = ox.wait_running("st", Duration::from_secs(5)).await;
    assert_eq!(phase(&st), "Running");
    assert!(ox.log().contains("not evicting a critical pod"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_threshold_raises_pressure_at_once_but_evicts_nothing_before_its_grace() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    server.put(&api_pod("be", NODE, "sleep 3600", 1)).unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "1000".into()));
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        "--eviction-hard=",
        &format!("--eviction-soft=memory.available<{}", threshold()),
        "--eviction-soft-grace-period=memory.available=1h",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let t = Instant::now();
    loop {
        let body = ox.debug_get("/debug/eviction").await.map(|(_, b)| b);
        if body
            .as_deref()
            .is_some_and(|b| b.contains("MemoryPressure"))
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{body:?}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Several cycles under the soft threshold: the pod keeps running.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let be = pods.get("be").await.unwrap();
    assert_ne!(phase(&be), "Failed", "{:?}", be.status);
    assert!(
        !ox.log().contains("evicting pod"),
        "{}",
        tail(&ox.log(), 40)
    );
}
