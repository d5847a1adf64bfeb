//! Cluster mode end to end: a real containerd, the real oxlet binary, the in-repo test
//! apiserver and its pod source. A bound pod's full status and its events reach the
//! apiserver; a graceful delete honours the grace and ends with the final DELETE (grace
//! 0, UID precondition); a force delete removes the object and kills the pod; a deleted mirror pod is
//! recreated at once (not on the 10 s period); a 60 s apiserver outage leaves pods
//! running and statuses, the lease and the node heartbeat catch up.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams};
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(30);
/// oxlet's node name (the helper passes `--hostname-override=testnode`).
const NODE: &str = "testnode";

fn stored(server: &TestApiServer, name: &str) -> Option<Pod> {
    server.get::<Pod>("default", name).unwrap()
}

/// The pod's one container in containerd: (ID, running).
async fn main_container(bed: &Testbed, uid: &str) -> Option<(String, bool)> {
    cri_containers(bed, uid).await.into_iter().next().map(|c| {
        let running = c.state == cri::ContainerState::ContainerRunning as i32;
        (c.id, running)
    })
}

async fn wait_stopped(bed: &Testbed, uid: &str, limit: Duration) -> Instant {
    let t = Instant::now();
    while main_container(bed, uid).await.is_some_and(|(_, r)| r) {
        assert!(t.elapsed() < limit, "{uid} still running after {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Instant::now()
}

/// The pod in the apiserver once its status says Running with everything kubelet reports.
async fn wait_reported_running(ox: &Oxlet, server: &TestApiServer, name: &str) -> Pod {
    ox.poll(&format!("{name} reported Running"), START, || {
        stored(server, name).filter(|p| {
            let s = p.status.clone().unwrap_or_default();
            s.phase.as_deref() == Some("Running")
                && s.container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_runs_reports_its_events_and_is_deleted_gracefully_or_by_force() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let patient = server
        .put(&api_pod("patient", NODE, "trap '' TERM; sleep 3600", 3))
        .unwrap();
    let forced = server
        .put(&api_pod("forced", NODE, "trap '' TERM; sleep 3600", 2))
        .unwrap();
    let (patient_uid, forced_uid) = (uid(&patient), uid(&forced));

    // (a) Running, with podIP, hostIP, startTime, Ready and the container's status.
    let p = wait_reported_running(&ox, &server, "patient").await;
    let s = p.status.unwrap();
    assert!(
        s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
        "{s:?}"
    );
    assert!(
        s.host_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
        "{s:?}"
    );
    assert!(s.start_time.is_some(), "{s:?}");
    let ready = s.conditions.iter().flatten().find(|c| c.type_ == "Ready");
    assert_eq!(ready.map(|c| c.status.as_str()), Some("True"), "{s:?}");
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        (c.name.as_str(), c.ready, c.restart_count),
        ("main", true, 0)
    );
    assert!(
        c.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://"))
    );

    // (e) kubelet's events about the pod reach the apiserver.
    let reasons = ox
        .poll("Pulled, Created and Started events", START, || {
            let reasons: Vec<String> = server
                .list::<Event>(Some("default"))
                .unwrap()
                .into_iter()
                .filter(|e| e.involved_object.uid.as_deref() == Some(patient_uid.as_str()))
                .filter_map(|e| e.reason)
                .collect();
            ["Pulled", "Created", "Started"]
                .iter()
                .all(|r| reasons.iter().any(|x| x == r))
                .then_some(reasons)
        })
        .await;
    assert!(!reasons.iter().any(|r| r == "Failed"), "{reasons:?}");

    // (b) A graceful delete (grace 3 s, SIGTERM ignored): the container lives ≈ the grace.
    wait_reported_running(&ox, &server, "forced").await;
    let asked = Instant::now();
    pods.delete("patient", &DeleteParams::default())
        .await
        .unwrap();
    let stopped = wait_stopped(&bed, &patient_uid, Duration::from_secs(15)).await;
    let lived = stopped - asked;
    assert!(
        lived >= Duration::from_millis(2500) && lived < Duration::from_secs(8),
        "the container lived {lived:?} of a 3 s grace"
    );
    // Then the final DELETE removes the object: grace 0, the pod's UID as precondition.
    ox.poll("patient removed from the apiserver", START, || {
        stored(&server, "patient").is_none().then_some(())
    })
    .await;
    let finals: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "DELETE"
                && r.path == "/api/v1/namespaces/default/pods/patient"
                && r.status == 200
        })
        .collect();
    let last = finals.last().expect("a DELETE of patient");
    let body: serde_json::Value = serde_json::from_str(&last.body).unwrap();
    assert_eq!(body["gracePeriodSeconds"], 0, "{}", last.body);
    assert_eq!(
        body["preconditions"]["uid"].as_str(),
        Some(patient_uid.as_str()),
        "{}",
        last.body
    );

    // (c) A force delete (grace 0): the object is gone at once and the pod is killed.
    // As kubelet (the source's REMOVE carries the last copy, not the deleted object),
    // the kill uses the pod's own grace (2 s here), not 0.
    let asked = Instant::now();
    pods.delete(
        "forced",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        stored(&server, "forced").is_none(),
        "force delete removes the object at once"
    );
    let stopped = wait_stopped(&bed, &forced_uid, Duration::from_secs(10)).await;
    assert!(
        stopped - asked < Duration::from_secs(6),
        "force delete took {:?}",
        stopped - asked
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_mirror_pod_is_recreated_well_within_the_period() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    // The reconcile period stays at its default 10 s.
    let mut ox = Oxlet::new(&bed);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", ""),
    );
    ox.spawn(&[&format!("--kubeconfig={}", server.kubeconfig().display())]);
    let mirror = "web-testnode";
    let first = ox
        .poll("the mirror pod", START, || stored(&server, mirror))
        .await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let asked = Instant::now();
    pods.delete(
        mirror,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let again = ox
        .poll("the mirror pod recreated", START, || {
            stored(&server, mirror).filter(|m| m.metadata.uid != first.metadata.uid)
        })
        .await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(3), "recreated after {took:?}");
    assert!(
        again
            .metadata
            .annotations
            .unwrap()
            .contains_key("kubernetes.io/config.mirror")
    );
}

fn node_ready_heartbeat(server: &TestApiServer) -> Option<jiff::Timestamp> {
    let node = server.get::<Node>("", NODE).unwrap()?;
    let ready = node
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(ready.last_heartbeat_time?.0)
}

fn lease_renewed(server: &TestApiServer) -> Option<jiff::Timestamp> {
    let lease = server.get::<Lease>("kube-node-lease", NODE).unwrap()?;
    Some(lease.spec?.renew_time?.0)
}

/// The 60 s outage (the one slow test): pods keep running unrestarted, a
/// container exit during the outage reaches the status after it, and the lease and
/// the node heartbeat move past the outage within ~15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_60s_apiserver_outage_is_caught_up() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestApiServer::start(dir.path()).await.unwrap();
    // kubelet sends an unchanged node status only every nodeStatusReportFrequency (5 min;
    // the lease is the heartbeat): 10 s here, so the Ready heartbeat can catch up too.
    let config = dir.path().join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeStatusReportFrequency: 10s\n",
    )
    .unwrap();
    let ox = Oxlet::start(
        &bed,
        &[
            &format!("--kubeconfig={}", server.kubeconfig().display()),
            &format!("--config={}", config.display()),
        ],
    );
    let steady = server
        .put(&api_pod("steady", NODE, "sleep 3600", 1))
        .unwrap();
    let mut exiter = api_pod("exiter", NODE, "sleep 20; exit 3", 1);
    exiter.spec.as_mut().unwrap().restart_policy = Some("Never".into());
    server.put(&exiter).unwrap();
    wait_reported_running(&ox, &server, "steady").await;
    wait_reported_running(&ox, &server, "exiter").await;
    ox.poll("the lease", START, || lease_renewed(&server)).await;
    let (before_id, _) = main_container(&bed, &uid(&steady)).await.unwrap();

    server.stop().await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (during_id, running) = main_container(&bed, &uid(&steady)).await.unwrap();
    assert!(
        running && during_id == before_id,
        "steady was restarted during the outage"
    );
    server.restart().await.unwrap();
    let back = jiff::Timestamp::now();

    let catch_up = Duration::from_secs(15);
    let s = ox
        .poll("exiter's exit reported", catch_up, || {
            stored(&server, "exiter")
                .and_then(|p| p.status)
                .filter(|s| s.phase.as_deref() == Some("Failed"))
        })
        .await;
    let term = s.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(term.exit_code, 3);
    ox.poll("the lease renewed after the outage", catch_up, || {
        lease_renewed(&server).filter(|t| *t >= back)
    })
    .await;
    ox.poll("the Ready heartbeat after the outage", catch_up, || {
        node_ready_heartbeat(&server).filter(|t| *t >= back)
    })
    .await;
    let p = stored(&server, "steady").unwrap();
    let c = &p.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(c.restart_count, 0);
    assert_eq!(
        c.container_id.as_deref(),
        Some(format!("containerd://{before_id}").as_str())
    );
    assert_eq!(
        main_container(&bed, &uid(&steady)).await.unwrap(),
        (before_id, true)
    );
}

/// The container statuses' terminated states in a status PATCH body, as
/// (reason, exitCode).
fn terminated_in(patch: &serde_json::Value) -> Vec<(String, i64)> {
    patch["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let t = &c["state"]["terminated"];
            Some((t["reason"].as_str()?.to_string(), t["exitCode"].as_i64()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_container_never_started_is_finally_deleted() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let mut pod = api_pod("nopull", NODE, "sleep 3600", 30);
    pod.spec.as_mut().unwrap().containers[0].image =
        Some("localhost/oxlet/does-not-exist:1".into());
    server.put(&pod).unwrap();
    // The pull fails: the container waits (ErrImagePull / ImagePullBackOff).
    ox.poll("nopull's image pull failing", START, || {
        let s = stored(&server, "nopull")?.status?;
        let reason = s.container_statuses?[0].state.clone()?.waiting?.reason?;
        reason.contains("Image").then_some(())
    })
    .await;

    // kubelet's TerminatePod: the pod ends Failed with its never-started container
    // terminated (ContainerStatusUnknown, 137), so the final DELETE follows.
    let asked = Instant::now();
    pods.delete(
        "nopull",
        &DeleteParams {
            grace_period_seconds: Some(2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    ox.poll(
        "nopull removed from the apiserver",
        Duration::from_secs(15),
        || stored(&server, "nopull").is_none().then_some(()),
    )
    .await;
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(10), "gone after {took:?}");
    let log = server.requests();
    let deleted = log
        .iter()
        .rposition(|r| r.method == "DELETE" && r.path == "/api/v1/namespaces/default/pods/nopull")
        .expect("the final DELETE");
    let last_patch = log[..deleted]
        .iter()
        .rfind(|r| {
            r.method == "PATCH"
                && r.path == "/api/v1/namespaces/default/pods/nopull/status"
                && r.status == 200
        })
        .expect("a status PATCH before the DELETE");
    let body: serde_json::Value = serde_json::from_str(&last_patch.body).unwrap();
    assert_eq!(body["status"]["phase"], "Failed", "{}", last_patch.body);
    assert_eq!(
        terminated_in(&body),
        [("ContainerStatusUnknown".to_string(), 137)],
        "{}",
        last_patch.body
    );
}
