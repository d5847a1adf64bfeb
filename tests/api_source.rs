//! The apiserver pod source on a real containerd, against the in-repo test apiserver
//! and the real oxlet binary: pods bound to the node run, others and mirror pods do
//! not; a graceful delete kills after its grace, a force delete at once; an apiserver
//! outage and a 410 leave pods running and new pods still start.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

const START: Duration = Duration::from_secs(30);
/// oxlet's node name (the helper passes `--hostname-override=testnode`).
const NODE: &str = "testnode";

async fn wait_running(ox: &Oxlet, name: &str) -> Pod {
    ox.wait_api_running(name, START).await
}

/// Whether the pod's one container is running in containerd.
async fn container_running(bed: &Testbed, uid: &str) -> bool {
    cri_containers(bed, uid)
        .await
        .iter()
        .any(|c| c.state == cri::ContainerState::ContainerRunning as i32)
}

/// Polls containerd until the pod's container is no longer running; returns when.
async fn wait_stopped(bed: &Testbed, uid: &str, timeout: Duration) -> Instant {
    let t = Instant::now();
    while container_running(bed, uid).await {
        assert!(
            t.elapsed() < timeout,
            "{uid} still running after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_pods_run_and_deletes_kill_them_with_the_right_grace() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");

    server.put(&api_pod("web", NODE, "sleep 3600", 1)).unwrap();
    server
        .put(&api_pod("elsewhere", "othernode", "sleep 3600", 1))
        .unwrap();
    let mut mirror = api_pod("mirror", NODE, "sleep 3600", 1);
    mirror.metadata.annotations =
        Some([("kubernetes.io/config.mirror".to_string(), "h".to_string())].into());
    let mirror = server.put(&mirror).unwrap();
    // Ignores SIGTERM, so only the grace's end (SIGKILL) stops it.
    let stubborn = server
        .put(&api_pod(
            "stubborn",
            NODE,
            "trap '' TERM; while true; do sleep 1; done",
            30,
        ))
        .unwrap();
    server
        .put(&api_pod("quick", NODE, "sleep 3600", 1))
        .unwrap();

    let web = wait_running(&ox, "web").await;
    let ann = web.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann["kubernetes.io/config.source"], "api");
    assert!(ann.contains_key("kubernetes.io/config.seen"));
    assert!(container_running(&bed, &uid(&web)).await);
    let stubborn_uid = uid(&wait_running(&ox, "stubborn").await);
    let quick_uid = uid(&wait_running(&ox, "quick").await);
    assert_eq!(stubborn_uid, uid(&stubborn));
    // Neither the other node's pod nor the mirror pod is run.
    let names: Vec<String> = ox
        .pods()
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("elsewhere") || n == "mirror"),
        "{names:?}"
    );
    assert!(cri_sandboxes(&bed, &uid(&mirror)).await.is_empty());

    // A graceful delete with 20 s (shorter than the spec's 30), then a second with
    // 2 s a second later: the kill is shortened to end about 3 s after the first.
    let t0 = Instant::now();
    pods.delete("stubborn", &DeleteParams::default().grace_period(20))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    pods.delete("stubborn", &DeleteParams::default().grace_period(2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        container_running(&bed, &stubborn_uid).await,
        "killed before its grace\n{}",
        tail(&ox.log(), 40)
    );
    let stopped = wait_stopped(&bed, &stubborn_uid, Duration::from_secs(15)).await;
    let took = stopped - t0;
    eprintln!("graceful delete (20 s, then 2 s after 1 s) stopped the container after {took:?}");
    assert!(took >= Duration::from_millis(2900), "{took:?}");
    assert!(
        took < Duration::from_secs(8),
        "{took:?}\n{}",
        tail(&ox.log(), 40)
    );
    // Once the pod has terminated, the status manager's final delete removes the object.
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.get::<Pod>("default", "stubborn").unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "no final delete after the kill\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A force delete (grace 0: the object is gone at once) kills the pod.
    pods.delete("quick", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(
        server.get::<Pod>("default", "quick").unwrap().is_none(),
        "a force delete removes the object at once"
    );
    wait_stopped(&bed, &quick_uid, Duration::from_secs(10)).await;
    ox.wait_for("quick gone from oxlet", START, |pods| {
        named(pods, "quick").is_none().then_some(())
    })
    .await;
    // The others run on.
    assert!(container_running(&bed, &uid(&web)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_outage_and_a_410_leave_pods_running() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut server, ox) = start_with_apiserver(&bed, dir.path()).await;
    server
        .put(&api_pod("before", NODE, "sleep 3600", 1))
        .unwrap();
    let before = uid(&wait_running(&ox, "before").await);

    // Away for 10 s: the last set is kept, nothing is killed.
    server.stop().await.unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        assert!(
            container_running(&bed, &before).await,
            "killed during the outage\n{}",
            tail(&ox.log(), 40)
        );
        assert!(named(&ox.pods().await, "before").is_some());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    server.restart().await.unwrap();
    server
        .put(&api_pod("after", NODE, "sleep 3600", 1))
        .unwrap();
    wait_running(&ox, "after").await;

    // Away again; meanwhile "after" is force-deleted, "compacted" is created and the
    // history is compacted: as client-go's reflector, oxlet lists again after the
    // failed watch (a resumed watch would get 410 and relist too) and catches up.
    server.stop().await.unwrap();
    let after = uid(&named(&ox.pods().await, "after").cloned().unwrap());
    assert!(server.remove::<Pod>("default", "after").unwrap());
    server
        .put(&api_pod("compacted", NODE, "sleep 3600", 1))
        .unwrap();
    server.compact();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart().await.unwrap();
    wait_running(&ox, "compacted").await;
    wait_stopped(&bed, &after, Duration::from_secs(15)).await;
    assert!(container_running(&bed, &before).await);
    assert_eq!(
        cri_sandboxes(&bed, &before).await.len(),
        1,
        "never restarted"
    );
    let log = ox.log();
    assert!(
        log.contains("apiserver pod source: list/watch failed"),
        "the outage was logged\n{}",
        tail(&log, 40)
    );
}
