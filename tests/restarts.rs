//! oxlet's own restarts: SIGKILL then start again adopts what runs; SIGTERM leaves
//! containers running; `--runonce`.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_and_restart_adopts_running_pods_and_stops_vanished_ones() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "keep.yaml",
        &pod_yaml("keep", "sleep 3600", ""),
    );
    write_manifest(
        &ox.manifests,
        "gone.yaml",
        &pod_yaml("gone", "sleep 3600", "  hostNetwork: true\n"),
    );
    let keep = ox.wait_running("keep", START).await;
    let gone = ox.wait_running("gone", START).await;
    let keep_id = container(&keep, "main").container_id.clone();

    ox.kill9();
    std::fs::remove_file(ox.manifests.join("gone.yaml")).unwrap();
    ox.spawn(&[]);

    let again = ox.wait_running("keep", START).await;
    assert_eq!(uid(&again), uid(&keep));
    assert_eq!(
        container(&again, "main").container_id,
        keep_id,
        "same container adopted"
    );
    assert_eq!(container(&again, "main").restart_count, 0);
    let cs = cri_containers(&bed, &uid(&keep)).await;
    assert_eq!(cs.len(), 1, "nothing was restarted or duplicated");
    assert_eq!(cs[0].state, RUNNING);
    assert_eq!(cri_sandboxes(&bed, &uid(&keep)).await.len(), 1);

    let t = std::time::Instant::now();
    while !cri_sandboxes(&bed, &uid(&gone)).await.is_empty() {
        assert!(
            t.elapsed() < START,
            "pod whose manifest vanished is still there\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(cri_containers(&bed, &uid(&gone)).await.is_empty());
    // And the adopted one keeps running afterwards.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cs = cri_containers(&bed, &uid(&keep)).await;
    assert_eq!((cs.len(), cs[0].state), (1, RUNNING));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_quickly_and_leaves_containers_running() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::start(&bed, &[]);
    write_manifest(&ox.manifests, "p.yaml", &pod_yaml("p", "sleep 3600", ""));
    let p = ox.wait_running("p", START).await;
    assert_eq!(ox.get("/healthz").await.map(|r| r.1), Some("ok".into()));
    assert_eq!(ox.get("/nope").await.map(|r| r.0), Some(404));
    let (status, took) = ox.sigterm();
    assert!(status.success(), "exit status {status:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The pod's worker is in the task tree too, and stopped within the agent's 3 s.
    let log = ox.log();
    assert!(
        !log.contains("did not stop within") && !log.contains("task ended"),
        "{}",
        tail(&log, 30)
    );
    let cs = cri_containers(&bed, &uid(&p)).await;
    assert_eq!((cs.len(), cs[0].state), (1, RUNNING));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runonce_reports_and_exits() {
    let bed = Testbed::start().await;
    let ox = Oxlet::new(&bed);
    write_manifest(
        &ox.manifests,
        "one.yaml",
        &pod_yaml("one", "sleep 3600", ""),
    );
    let (status, out) = ox.run_to_end(&["--runonce"]);
    assert!(
        status.success(),
        "runonce with a good pod: {status:?}\n{out}"
    );
    assert!(
        out.contains("default/one-testnode: Running: running"),
        "{out}"
    );

    let missing = pod_yaml("missing", "true", "")
        .replace("localhost/oxlet/busybox:1", "localhost/oxlet/nope:1")
        .replace("IfNotPresent", "Never");
    write_manifest(&ox.manifests, "missing.yaml", &missing);
    let (status, out) = ox.run_to_end(&["--runonce"]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("ErrImageNeverPull"), "{out}");
}
