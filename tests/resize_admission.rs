//! In-place resize admission on a real containerd, through the in-repo test apiserver:
//! a resize larger than the node is `Infeasible`, one larger than what is free is
//! `Deferred` and is granted when another pod leaves; the allocation survives a
//! `kill -9` of oxlet (neither forgotten nor granted again), and every decision is an
//! event and a condition with the pod's generation.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams};
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(30);
const NODE: &str = "testnode";

/// A pod asking for `cpu_milli` millicores (request only: Burstable).
fn asking(name: &str, cpu_milli: i64) -> Pod {
    let mut p = api_pod(name, NODE, "sleep 3600", 1);
    p.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(serde_json::json!({"requests": {"cpu": format!("{cpu_milli}m")}}))
            .unwrap(),
    );
    p
}

/// Asks for a new CPU request on the pod's container (the one way to resize).
async fn resize_cpu(pods: &Api<Pod>, name: &str, cpu_milli: i64) -> Pod {
    let patch = serde_json::json!({"spec": {"containers": [
        {"name": "main", "resources": {"requests": {"cpu": format!("{cpu_milli}m")}}}
    ]}});
    resize_pod(pods, name, patch).await
}

/// The node's allocatable CPU in millicores, as oxlet registered it.
async fn allocatable_cpu(ox: &Oxlet, server: &TestApiServer) -> i64 {
    let q = ox
        .poll("node allocatable reported", START, || {
            let node = server.get::<Node>("", NODE).unwrap()?;
            Some(node.status?.allocatable?.get("cpu")?.0.clone())
        })
        .await;
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => q.parse::<i64>().unwrap() * 1000,
    }
}

fn allocated_cpu(p: &Pod) -> Option<String> {
    let c = container_status(p, "main")?;
    Some(c.allocated_resources.as_ref()?.get("cpu")?.0.clone())
}

/// The pod once `pred` holds of what the apiserver has.
async fn wait_pod(
    ox: &Oxlet,
    server: &TestApiServer,
    name: &str,
    what: &str,
    pred: impl Fn(&Pod) -> bool,
) -> Pod {
    ox.poll(what, START, || {
        server
            .get::<Pod>("default", name)
            .unwrap()
            .filter(|p| pred(p))
    })
    .await
}

fn events_for(server: &TestApiServer, name: &str, reason: &str) -> Vec<Event> {
    server
        .list::<Event>(Some("default"))
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_past_the_node_is_infeasible_and_past_whats_free_waits_for_room() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let capacity = allocatable_cpu(&ox, &server).await;
    let (a_cpu, b_cpu) = (capacity / 4, capacity / 2);
    server.put(&asking("a", a_cpu)).unwrap();
    server.put(&asking("b", b_cpu)).unwrap();
    for name in ["a", "b"] {
        ox.wait_api_running(name, START).await;
    }
    let a = wait_pod(&ox, &server, "a", "a's allocation reported", |p| {
        allocated_cpu(p).is_some()
    })
    .await;
    let restarts = container(&a, "main").restart_count;

    // More than the node has: Infeasible, with kubelet's message and the generation.
    let big = resize_cpu(&pods, "a", capacity * 2).await;
    let generation = big.metadata.generation.unwrap();
    let a = wait_pod(&ox, &server, "a", "a Infeasible", |p| {
        pod_condition(p, "PodResizePending")
            .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
    })
    .await;
    let c = pod_condition(&a, "PodResizePending").unwrap();
    assert_eq!(
        c.message.as_deref(),
        Some(
            format!(
                "Node didn't have enough capacity: cpu, requested: {}, capacity: {capacity}",
                capacity * 2
            )
            .as_str()
        )
    );
    assert_eq!(c.observed_generation, Some(generation));
    assert_eq!(
        allocated_cpu(&a).as_deref(),
        Some(format!("{a_cpu}m").as_str())
    );
    assert!(!events_for(&server, "a", "ResizeInfeasible").is_empty());

    // More than is free beside b: Deferred, with the admission's message.
    let more = capacity - b_cpu + 100;
    resize_cpu(&pods, "a", more).await;
    let a = wait_pod(&ox, &server, "a", "a Deferred", |p| {
        pod_condition(p, "PodResizePending")
            .is_some_and(|c| c.reason.as_deref() == Some("Deferred"))
    })
    .await;
    let message = pod_condition(&a, "PodResizePending")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(
        message.starts_with(&format!(
            "Node didn't have enough resource: cpu, requested: {more}, used: {b_cpu}, capacity: {capacity}"
        )),
        "{message}"
    );
    assert!(!events_for(&server, "a", "ResizeDeferred").is_empty());
    // The allocation did not move: the checkpoint still has a's old request.
    let state = std::fs::read_to_string(ox.root.join("allocated_pods_state")).unwrap();
    assert!(state.contains(&format!("{a_cpu}m")), "{state}");

    // b leaves: the waiting resize is granted and applied; the container never restarted.
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let a = wait_pod(&ox, &server, "a", "a resized after b left", |p| {
        allocated_cpu(p).as_deref() == Some(format!("{more}m").as_str())
            && pod_condition(p, "PodResizePending").is_none()
            && pod_condition(p, "PodResizeInProgress").is_none()
    })
    .await;
    assert_eq!(container(&a, "main").restart_count, restarts);
    let request = container(&a, "main")
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(|r| r["cpu"].0.clone());
    assert_eq!(request.as_deref(), Some(format!("{more}m").as_str()));
    for reason in ["ResizeStarted", "ResizeCompleted"] {
        assert!(
            !events_for(&server, "a", reason).is_empty(),
            "no {reason} event\n{}",
            tail(&ox.log(), 40)
        );
    }
    let log = ox.log();
    assert!(
        log.contains("pod resize pending") && log.contains("pod resize allocated"),
        "{}",
        tail(&log, 40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allocation_survives_a_kill_9_neither_forgotten_nor_granted_again() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, mut ox) = start_with_apiserver(&bed, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let capacity = allocatable_cpu(&ox, &server).await;
    server.put(&asking("a", capacity / 4)).unwrap();
    server.put(&asking("b", capacity / 2)).unwrap();
    for name in ["a", "b"] {
        ox.wait_api_running(name, START).await;
    }
    // a waits for room; the spec now asks for more than its allocation.
    let more = capacity - capacity / 2 + 100;
    resize_cpu(&pods, "a", more).await;
    wait_pod(&ox, &server, "a", "a Deferred", |p| {
        pod_condition(p, "PodResizePending")
            .is_some_and(|c| c.reason.as_deref() == Some("Deferred"))
    })
    .await;

    ox.kill9();
    ox.spawn(&[&format!("--kubeconfig={}", server.kubeconfig().display())]);
    // Started again, a is admitted at what it was granted, not at its spec (which would
    // not fit beside b), and its resize is still Deferred: decided again at the first
    // retry once every source has reported (kubelet's 30 s), never granted.
    ox.wait_logged("pod resize pending", 2, Duration::from_secs(60))
        .await;
    let a = wait_pod(&ox, &server, "a", "a Deferred after the restart", |p| {
        pod_condition(p, "PodResizePending")
            .is_some_and(|c| c.reason.as_deref() == Some("Deferred"))
            && is_running(p)
    })
    .await;
    assert_eq!(
        allocated_cpu(&a).as_deref(),
        Some(format!("{}m", capacity / 4).as_str())
    );
    let b = server.get::<Pod>("default", "b").unwrap().unwrap();
    assert!(is_running(&b), "b kept running: {:?}", b.status);
    assert_eq!(container(&a, "main").restart_count, 0);
}
