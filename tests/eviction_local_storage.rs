//! Local storage limit eviction end to end: the real oxlet binary on
//! a real containerd, an apiserver pod whose container fills an emptyDir past its
//! `sizeLimit`. The volume usage task measures it, the eviction manager's
//! `localStorageEviction` check (`src/eviction/local_storage.rs`) finds it and the pod
//! becomes Failed/Evicted with kubelet's message, and its disk is given back: the
//! emptyDir is torn down and the evicted pod's containers are removed, while the pod
//! object keeps its final status.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tonic::transport::Channel;

const NODE: &str = "testnode";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_dir_over_its_size_limit_evicts_the_api_pod() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_VOLUME_STATS_PERIOD_MS".into(), "200".into()));
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "200".into()));
    ox.spawn(&[&format!("--kubeconfig={}", server.kubeconfig().display())]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");

    server.put(&empty_dir_filler("filler", NODE)).unwrap();
    // A neighbour within its limits is left alone.
    server
        .put(&api_pod("quiet", NODE, "sleep 3600", 1))
        .unwrap();

    let evicted = ox
        .wait_api_phase(&pods, "filler", "Failed", Duration::from_secs(40))
        .await;
    let filler_uid = uid(&evicted);
    let s = evicted.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        s.message.as_deref(),
        Some("Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ")
    );
    assert!(
        s.conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    let quiet = ox.wait_api_running("quiet", Duration::from_secs(30)).await;
    assert_eq!(phase(&quiet), "Running");

    // kubelet tears down a terminated pod's volumes and removes an evicted pod's
    // containers: the 4 MiB is free although the pod object stays.
    let volumes = ox.root.join("pods").join(&filler_uid).join("volumes");
    let mut cri = bed.cri().await;
    let t = Instant::now();
    loop {
        let left = containers_of(&mut cri, &filler_uid).await;
        if !volumes.exists() && left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "volumes still there: {}, containers left: {left:?}\n{}",
            volumes.exists(),
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = pods.get("filler").await.unwrap().status.unwrap();
    assert_eq!(
        s.reason.as_deref(),
        Some("Evicted"),
        "the final status stays"
    );
    assert!(
        s.container_statuses
            .clone()
            .unwrap_or_default()
            .iter()
            .any(|c| c.name == "main" && c.state.as_ref().is_some_and(|s| s.terminated.is_some())),
        "the final status keeps the container: {:?}",
        s.container_statuses
    );

    // After a restart the finished pod keeps what it had (kubelet's old status is the
    // apiserver's when the status manager has none): reason, message, and its
    // terminated container, although the runtime no longer has it.
    let before = s;
    // The status is final before the worker has removed the pod's content; let the
    // first life end ("pod terminated") so the restart is counted from a finished pod.
    let terminated = "\"pod terminated\" pod=\"default/filler\"";
    ox.wait_logged(terminated, 1, Duration::from_secs(30)).await;
    ox.sigterm();
    ox.spawn(&[&format!("--kubeconfig={}", server.kubeconfig().display())]);
    ox.wait_logged(terminated, 2, Duration::from_secs(30)).await;
    ox.wait_api_running("quiet", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = pods.get("filler").await.unwrap().status.unwrap();
    assert_eq!(after.phase, before.phase);
    assert_eq!(after.reason, before.reason);
    assert_eq!(after.message, before.message);
    assert_eq!(after.container_statuses, before.container_statuses);
}

/// The IDs of the pod's containers that containerd still has.
async fn containers_of(cri: &mut RuntimeServiceClient<Channel>, uid: &str) -> Vec<String> {
    use k8s_cri::v1 as cri_api;
    cri.list_containers(cri_api::ListContainersRequest {
        filter: Some(cri_api::ContainerFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .containers
    .into_iter()
    .map(|c| c.id)
    .collect()
}

/// What the container ephemeral-storage check counts besides logs: containerd's CRI
/// reports a running container's writable layer in `ListContainerStats` (from its
/// snapshot usage, refreshed about every 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_reports_the_writable_layer_a_container_fills() {
    use k8s_cri::v1 as cri;
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    ox.spawn(&[]);
    write_manifest(
        &ox.manifests,
        "layer.yaml",
        &pod_yaml(
            "layer",
            "dd if=/dev/zero of=/layer-blob bs=1024 count=3072 && sleep 3600",
            "",
        ),
    );
    let pod = ox.wait_running("layer", Duration::from_secs(30)).await;
    let uid = uid(&pod);
    let mut c = bed.cri().await;
    let t = Instant::now();
    loop {
        let stats = c
            .list_container_stats(cri::ListContainerStatsRequest {
                filter: Some(cri::ContainerStatsFilter {
                    label_selector: [("io.kubernetes.pod.uid".to_string(), uid.clone())].into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .stats;
        let used = stats
            .iter()
            .filter_map(|s| s.writable_layer.as_ref()?.used_bytes.as_ref())
            .map(|u| u.value)
            .max()
            .unwrap_or(0);
        if used >= 3 << 20 {
            eprintln!("writable layer {used} bytes after {:?}", t.elapsed());
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(25),
            "writable layer {used} bytes: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
