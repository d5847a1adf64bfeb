//! The bare raw CRI floor (minimal configs straight through the CRI) and the sandbox
//! helpers every phase uses to wait for containerd to be empty.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;

use crate::common::{Testbed, busybox_container};
use crate::{RESTING, WAIT};

/// One pod straight through the CRI: RunPodSandbox + CreateContainer + StartContainer.
pub(crate) async fn floor_pod(bed: &Testbed, name: &str) -> Duration {
    let mut client = bed.cri().await;
    let t = Instant::now();
    let sb = bed.sandbox_config(name, false);
    let c = busybox_container("main", &["sh", "-c", RESTING]);
    start_pod(&mut client, sb, c, String::new()).await;
    t.elapsed()
}

/// The three calls that start a one-container pod, as both floors make them.
pub(crate) async fn start_pod(
    client: &mut cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    sb: cri::PodSandboxConfig,
    c: cri::ContainerConfig,
    runtime_handler: String,
) {
    let id = client
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(sb.clone()),
            runtime_handler,
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let cid = client
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: id,
            config: Some(c),
            sandbox_config: Some(sb),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    client
        .start_container(cri::StartContainerRequest { container_id: cid })
        .await
        .unwrap();
}

/// `n` bare floor pods with `in_flight` at a time; returns the wall time.
pub(crate) async fn floor_batch(bed: &Testbed, n: usize, in_flight: usize) -> Duration {
    run_batch(n, in_flight, |i| async move {
        floor_pod(bed, &format!("floor-b{i}")).await
    })
    .await
}

/// Runs `pod(i)` for `0..n`, `in_flight` at a time; returns the wall time.
pub(crate) async fn run_batch<F, Fut>(n: usize, in_flight: usize, pod: F) -> Duration
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Duration>,
{
    let t = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let tasks = (0..n).map(|i| {
        let sem = sem.clone();
        let pod = &pod;
        async move {
            let _p = sem.acquire().await.unwrap();
            pod(i).await
        }
    });
    futures::future::join_all(tasks).await;
    t.elapsed()
}

pub(crate) async fn sandbox_count(bed: &Testbed) -> usize {
    bed.cri()
        .await
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items
        .len()
}

/// Stops and removes every sandbox at once (the floors' teardown; also the capture
/// oxlet's pod once that oxlet is gone).
pub(crate) async fn remove_all_sandboxes(bed: &Testbed) {
    let c = bed.cri().await;
    let items = c
        .clone()
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    let stops = items.iter().map(|s| {
        let mut c = c.clone();
        let id = s.id.clone();
        async move {
            let _ = c
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await;
            let _ = c
                .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await;
        }
    });
    futures::future::join_all(stops).await;
}

/// Waits until containerd lists exactly `n` sandboxes; returns how long that took.
pub(crate) async fn wait_sandboxes(bed: &Testbed, n: usize) -> Duration {
    let t = Instant::now();
    while sandbox_count(bed).await != n {
        assert!(t.elapsed() < WAIT, "sandboxes did not reach {n}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.elapsed()
}
