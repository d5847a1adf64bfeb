//! A pressure condition clears after the transition period once its threshold is no
//! Longer met, on real containerd with the real oxlet binary: an apiserver
//! pod forks 600 processes, `pid.available` is set to be met with 300 more tasks than
//! the machine has now, so PIDPressure rises; the pod, the one to rank, is evicted, its
//! processes go, and PIDPressure is gone a transition period later. In a file of its
//! own, so no other test's processes run beside it.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

const NODE: &str = "testnode";

/// Tasks now (`/proc/loadavg`'s fourth field, as the metric advisor counts them).
fn tasks() -> u64 {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap();
    let field = text.split_whitespace().nth(3).unwrap();
    field.split_once('/').unwrap().1.parse().unwrap()
}

fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn conditions(ox: &Oxlet) -> serde_json::Value {
    let (_, body) = ox.debug_get("/debug/eviction").await.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()["conditions"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_pressure_evicts_the_forking_pod_and_clears_after_the_transition_period() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let fork = "i=0; while [ $i -lt 600 ]; do sleep 3600 & i=$((i+1)); done; wait";
    server.put(&api_pod("forker", NODE, fork, 1)).unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "1000".into()));
    // Met once the machine has 300 more tasks than now (the pod brings 600); the
    // harness's memory threshold stays as it is.
    let threshold = pid_max() - (tasks() + 300);
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        &format!("--eviction-hard=pid.available<{threshold}"),
        "--eviction-pressure-transition-period=3s",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    // PIDPressure rises while the pod forks, and the pod is evicted.
    let t = Instant::now();
    let mut saw_pressure = false;
    loop {
        saw_pressure |= conditions(&ox).await == serde_json::json!(["PIDPressure"]);
        let p = pods.get("forker").await.unwrap();
        if phase(&p) == "Failed" {
            let s = p.status.unwrap();
            assert_eq!(s.reason.as_deref(), Some("Evicted"));
            let m = s.message.unwrap_or_default();
            assert!(m.starts_with("The node was low on resource: pids."), "{m}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{:?}\n{}",
            p.status,
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(saw_pressure, "{}", tail(&ox.log(), 40));
    // Its processes gone, the threshold is no longer met; the condition is held for
    // the transition period, then cleared.
    let evicted = Instant::now();
    loop {
        if conditions(&ox).await == serde_json::json!([]) {
            break;
        }
        assert!(
            evicted.elapsed() < Duration::from_secs(40),
            "{}\n{}",
            conditions(&ox).await,
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        evicted.elapsed() >= Duration::from_secs(2),
        "cleared {:?} after the eviction, before the 3 s transition period",
        evicted.elapsed()
    );
    assert!(
        ox.log().contains("node pressure conditions changed"),
        "{}",
        tail(&ox.log(), 40)
    );
}
