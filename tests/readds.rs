//! A static pod removed and restored with the same UID, on a real containerd: while
//! its old life is still terminating (it runs again once terminated), and after it
//! completed (it runs again as a new life, with a fresh status).

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(30);

/// The main container's CRI ID as `/pods` reports it.
fn container_id(p: &Pod) -> String {
    container(p, "main")
        .container_id
        .clone()
        .unwrap_or_default()
}

fn start_time(p: &Pod) -> jiff::Timestamp {
    p.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
        .expect("startTime")
}

/// How many times oxlet logged that the pod's worker finished.
fn terminated_count(ox: &Oxlet, pod_uid: &str) -> usize {
    ox.log()
        .lines()
        .filter(|l| l.contains("pod terminated") && l.contains(pod_uid))
        .count()
}

/// Waits until the pod's worker has finished more often than `before` times.
async fn wait_worker_finished(ox: &Oxlet, pod_uid: &str, before: usize) {
    let t = Instant::now();
    while terminated_count(ox, pod_uid) <= before {
        assert!(
            t.elapsed() < START,
            "worker of {pod_uid} did not finish\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_gone(ox: &Oxlet, name: &str) {
    ox.wait_for(&format!("{name} gone from /pods"), START, |pods| {
        find(pods, name).is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_restored_while_terminating_runs_again_once_terminated() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    // A fixed UID, and a container that ignores SIGTERM: stopping it takes the whole
    // 5 s grace period.
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: stubborn
  uid: oxlet-test-readd-stubborn
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
"#;
    write_manifest(&ox.manifests, "stubborn.yaml", manifest);
    let first = ox.wait_running("stubborn", START).await;
    let pod_uid = uid(&first);
    assert_eq!(pod_uid, "oxlet-test-readd-stubborn");
    let old_id = container_id(&first);
    let old_cri = old_id.trim_start_matches("containerd://").to_string();

    std::fs::remove_file(ox.manifests.join("stubborn.yaml")).unwrap();
    wait_gone(&ox, "stubborn").await;
    let removed = Instant::now();
    write_manifest(&ox.manifests, "stubborn.yaml", manifest);

    // While the old container is still stopping, nothing new starts.
    let mut saw_old_running_after_restore = false;
    loop {
        let cs = cri_containers(&bed, &pod_uid).await;
        let old_running = cs.iter().any(|c| c.id == old_cri && c.state == RUNNING);
        if !old_running {
            break;
        }
        saw_old_running_after_restore = true;
        assert_eq!(
            cs.iter().filter(|c| c.state == RUNNING).count(),
            1,
            "a second container started while the old one terminates"
        );
        assert!(
            removed.elapsed() < Duration::from_secs(15),
            "old container not stopped\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        saw_old_running_after_restore,
        "the restore came after the old life ended: the test did not test a re-add while terminating"
    );
    let stopped_after = removed.elapsed();
    assert!(
        stopped_after >= Duration::from_secs(3),
        "SIGTERM is ignored, so the kill takes the grace period: {stopped_after:?}"
    );

    // Then the pod runs again: a new container, under the same UID.
    let again = ox
        .wait_for("the restored pod running a new container", START, |pods| {
            find(pods, "stubborn")
                .filter(|p| is_running(p) && container_id(p) != old_id)
                .cloned()
        })
        .await;
    let running_after = removed.elapsed();
    assert_eq!(uid(&again), pod_uid);
    let cs = cri_containers(&bed, &pod_uid).await;
    let running: Vec<_> = cs.iter().filter(|c| c.state == RUNNING).collect();
    assert_eq!(running.len(), 1, "{cs:?}");
    assert_ne!(running[0].id, old_cri);
    assert!(
        !cs.iter().any(|c| c.id == old_cri),
        "the previous life's container was removed"
    );
    let log = ox.log();
    assert!(
        log.contains("re-added while terminating"),
        "{}",
        tail(&log, 40)
    );
    println!(
        "old container stopped {stopped_after:?} and the new one ran {running_after:?} after removal"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_pod_removed_and_restored_is_a_new_life() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = pod_yaml("once", "sleep 1; exit 0", "  restartPolicy: Never\n");
    write_manifest(&ox.manifests, "once.yaml", &manifest);
    let succeeded = |pods: &[Pod]| {
        find(pods, "once")
            .filter(|p| phase(p) == "Succeeded")
            .cloned()
    };
    let mut life = ox.wait_for("once Succeeded", START, succeeded).await;
    let pod_uid = uid(&life);
    let mut finished_before = 0;

    // Restored at once (its finished worker may still be known), then restored after
    // housekeeping had time to forget it (> 2 s): both are new lives.
    for pause in [Duration::ZERO, Duration::from_secs(3)] {
        // Removed only once its worker has finished (terminal containers and status
        // kept while it was desired), not while it is still being stopped.
        wait_worker_finished(&ox, &pod_uid, finished_before).await;
        std::fs::remove_file(ox.manifests.join("once.yaml")).unwrap();
        wait_gone(&ox, "once").await;
        // startTime has a resolution of one second.
        tokio::time::sleep(pause.max(Duration::from_millis(1100))).await;
        if !pause.is_zero() {
            assert!(
                cri_containers(&bed, &pod_uid).await.is_empty()
                    && cri_sandboxes(&bed, &pod_uid).await.is_empty(),
                "a removed completed pod leaves nothing in the runtime"
            );
        }
        finished_before = terminated_count(&ox, &pod_uid);
        write_manifest(&ox.manifests, "once.yaml", &manifest);

        // Seen again, and never with the old life's terminal status.
        let old_id = container_id(&life);
        let t = Instant::now();
        let mut phases = Vec::new();
        let next = loop {
            let pods = ox.pods().await;
            if let Some(p) = find(&pods, "once") {
                assert_eq!(uid(p), pod_uid, "identical manifest, same UID");
                let fresh = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_none_or(|_| container_id(p) != old_id);
                assert!(
                    fresh,
                    "restored pod shows the old life's container: {}",
                    serde_json::to_string_pretty(p).unwrap()
                );
                if phases.last().map(String::as_str) != Some(phase(p)) {
                    phases.push(phase(p).to_string());
                }
                if phase(p) == "Succeeded" {
                    break p.clone();
                }
            }
            assert!(
                t.elapsed() < START,
                "restored pod did not complete again; phases {phases:?}\n{}",
                tail(&ox.log(), 60)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            phases.iter().any(|p| p == "Pending" || p == "Running"),
            "the restored pod started over: phases {phases:?}"
        );
        assert!(
            start_time(&next) > start_time(&life),
            "fresh startTime: {} then {}",
            start_time(&life),
            start_time(&next)
        );
        let running = cri_containers(&bed, &pod_uid).await;
        assert_eq!(
            running.len(),
            1,
            "only the new life's container: {running:?}"
        );
        println!(
            "restored after {pause:?}: startTime {} -> {}, phases {phases:?}, restartCount {}",
            start_time(&life),
            start_time(&next),
            container(&next, "main").restart_count
        );
        life = next;
    }
}
