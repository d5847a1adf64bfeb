//! Cluster mode on a real containerd with the real oxlet binary and the in-repo test
//! apiserver: a static pod's mirror pod appears (annotations, owner reference to the
//! Node) with the pod's Running status and IP, is recreated after deletion, replaced
//! after a manifest edit, restored after someone else changed its status, caught up
//! after an apiserver outage, and deleted with the manifest.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Node, Pod};
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(30);
const NODE: &str = "testnode";
const MIRROR: &str = "web-testnode";

fn mirror(api: &TestApiServer) -> Option<Pod> {
    api.get::<Pod>("default", MIRROR).unwrap()
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The mirror pod once it mirrors the static pod of hash `hash` and reports it Running with an IP.
async fn wait_mirror_running(ox: &Oxlet, api: &TestApiServer, hash: &str) -> Pod {
    ox.poll(&format!("mirror pod of {hash} Running"), START, || {
        mirror(api).filter(|m| {
            let s = m.status.clone().unwrap_or_default();
            annotation(m, "kubernetes.io/config.mirror") == Some(hash)
                && s.phase.as_deref() == Some("Running")
                && s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        })
    })
    .await
}

async fn static_hash(ox: &Oxlet, marker: &str) -> String {
    let pod = ox
        .wait_for(&format!("web {marker} Running"), START, |pods| {
            find(pods, "web")
                .filter(|p| {
                    is_running(p)
                        && p.spec.as_ref().unwrap().containers[0]
                            .command
                            .as_ref()
                            .unwrap()
                            .join(" ")
                            .contains(marker)
                })
                .cloned()
        })
        .await;
    annotation(&pod, "kubernetes.io/config.hash")
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_pods_and_statuses_follow_the_static_pod() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut api = TestApiServer::start(dir.path()).await.unwrap();
    // Node registration is another slice: the test registers the Node itself.
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NODE}})).unwrap();
    let node = api.put(&node).unwrap();

    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_STATUS_PERIOD_MS".into(), "300".into()));
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600 # v1", ""),
    );
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    ox.spawn(&[&kubeconfig]);

    // The mirror pod: the static pod's annotations plus the mirror annotation, owned by the Node.
    let hash1 = static_hash(&ox, "v1").await;
    let m1 = wait_mirror_running(&ox, &api, &hash1).await;
    assert_eq!(annotation(&m1, "kubernetes.io/config.source"), Some("file"));
    assert_eq!(
        annotation(&m1, "kubernetes.io/config.hash"),
        Some(hash1.as_str())
    );
    let owner = &m1.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", NODE));
    assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    let ip = ox
        .pods()
        .await
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(MIRROR))
        .and_then(|p| p.status.clone()?.pod_ip)
        .unwrap();
    assert_eq!(
        m1.status.as_ref().unwrap().pod_ip.as_deref(),
        Some(ip.as_str())
    );

    // Deleted by someone: recreated, and its status written again.
    api.remove::<Pod>("default", MIRROR).unwrap();
    let m2 = wait_mirror_running(&ox, &api, &hash1).await;
    assert_ne!(m2.metadata.uid, m1.metadata.uid);

    // Someone else rewrites the status: the next reconcile restores ours.
    let mut changed = m2.clone();
    changed.status.as_mut().unwrap().pod_ip = Some("192.0.2.1".into());
    api.put(&changed).unwrap();
    ox.poll("the status restored", START, || {
        mirror(&api).filter(|m| m.status.as_ref().unwrap().pod_ip.as_deref() == Some(ip.as_str()))
    })
    .await;

    // A manifest edit: a new static pod, so the mirror pod is replaced (new UID, new hash).
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600 # v2", ""),
    );
    let hash2 = static_hash(&ox, "v2").await;
    assert_ne!(hash2, hash1);
    let m3 = wait_mirror_running(&ox, &api, &hash2).await;
    assert_ne!(m3.metadata.uid, m2.metadata.uid);

    // The apiserver goes away for a few seconds while the pod changes: all catches up.
    api.stop().await.unwrap();
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600 # v3", ""),
    );
    let hash3 = static_hash(&ox, "v3").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    api.restart().await.unwrap();
    let m4 = wait_mirror_running(&ox, &api, &hash3).await;
    assert_ne!(m4.metadata.uid, m3.metadata.uid);

    // The manifest goes: so does the mirror pod.
    std::fs::remove_file(ox.manifests.join("web.yaml")).unwrap();
    ox.poll("the mirror pod deleted", START, || {
        mirror(&api).is_none().then_some(())
    })
    .await;
}

/// With the default 10 s status period, a (re)created mirror pod gets the static
/// pod's status at once: the mirror reconciler wakes the status writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_mirror_pod_gets_its_status_at_once() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NODE}})).unwrap();
    api.put(&node).unwrap();
    let mut ox = Oxlet::new(&bed);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600 # v1", ""),
    );
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    ox.spawn(&[&kubeconfig]);
    let hash = static_hash(&ox, "v1").await;
    let m1 = wait_mirror_running(&ox, &api, &hash).await;

    api.remove::<Pod>("default", MIRROR).unwrap();
    let t = Instant::now();
    let recreated = ox
        .poll("the mirror pod recreated", START, || {
            mirror(&api).filter(|m| m.metadata.uid != m1.metadata.uid)
        })
        .await;
    let m2 = wait_mirror_running(&ox, &api, &hash).await;
    let latency = t.elapsed();
    eprintln!("mirror pod deleted -> recreated and Running in {latency:?}");
    assert_eq!(m2.metadata.uid, recreated.metadata.uid);
    assert!(
        latency < Duration::from_secs(4),
        "status took {latency:?} (the writer's period is 10 s)\n{}",
        tail(&ox.log(), 40)
    );

    // oxlet restarts: the running static pod's mirror keeps its start and transition
    // times (kubelet's status manager takes the mirror's status as the old one).
    let times = |m: &Pod| {
        let s = m.status.clone().unwrap();
        let conditions: Vec<_> = s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.type_, c.status, c.last_transition_time))
            .collect();
        (s.start_time, conditions)
    };
    let before = times(&m2);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ox.sigterm();
    ox.spawn(&[&kubeconfig]);
    ox.wait_running("web", START).await;
    // The status writer's first pass after the restart (its period is 10 s, and a
    // changed status is written at once).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        times(&mirror(&api).unwrap()),
        before,
        "{}",
        tail(&ox.log(), 40)
    );
}
