//! Without `--container-runtime-endpoint` and with nothing at the default socket, oxlet
//! starts its own containerd under `--root-dir`, imports the archives in
//! `<root-dir>/images/`, runs the pods, and stops its containerd on exit.

mod agent;
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use agent::*;
use k8s_cri::v1 as cri;

const START: Duration = Duration::from_secs(60);

async fn sandboxes(socket: &Path) -> Vec<cri::PodSandbox> {
    let channel = tonic::transport::Endpoint::from_shared(format!("unix://{}", socket.display()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    cri::runtime_service_client::RuntimeServiceClient::new(channel)
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oxlet_starts_and_stops_its_own_containerd() {
    assert!(
        !Path::new("/run/containerd/containerd.sock").exists(),
        "this test needs the default containerd socket to be absent (a system containerd runs here)"
    );
    let base = tempfile::Builder::new()
        .prefix("oxm-")
        .tempdir_in("/tmp")
        .unwrap();
    let mut ox = Oxlet::in_dir(base.path(), None);
    let image_dir = ox.copy_images_to_root();
    std::fs::write(image_dir.join("broken.tar"), b"not an image archive").unwrap();
    write_manifest(
        &ox.manifests,
        "m.yaml",
        &pod_yaml("m", "sleep 3600", "  hostNetwork: true\n"),
    );
    // A pod on the pod network gets an address from --pod-cidr, on --managed-cni-bridge.
    write_manifest(&ox.manifests, "n.yaml", &pod_yaml("n", "sleep 3600", ""));
    ox.spawn(&[]);
    ox.wait_running("m", START).await;
    let n = ox.wait_running("n", START).await;
    let net = ox.managed_network().unwrap();
    let ip = n.status.unwrap().pod_ip.unwrap();
    let prefix = net.subnet().trim_end_matches("0/24").to_string();
    assert!(ip.starts_with(&prefix), "{ip} is not in {}", net.subnet());
    let ports = std::fs::read_dir(format!("/sys/class/net/{}/brif", net.bridge()))
        .unwrap()
        .count();
    assert_eq!(ports, 1, "n's veth is on {}", net.bridge());
    // kubelet's updatePodCIDR: the runtime was told the CIDR too (UpdateRuntimeConfig).
    let told = format!("newPodCIDR=\"{}\"", net.subnet());
    assert!(ox.log().contains(&told), "{}", tail(&ox.log(), 30));
    let log = ox.log();
    assert!(
        log.contains("starting a managed containerd"),
        "{}",
        tail(&log, 30)
    );
    assert!(
        log.contains("broken.tar"),
        "the broken archive is named: {}",
        tail(&log, 30)
    );
    let socket = ox.root.join("containerd/containerd.sock");
    assert_eq!(sandboxes(&socket).await.len(), 2);

    let (status, _) = ox.sigterm();
    assert!(status.success());
    // Every task (pod worker, PLEG, servers, then the supervisor) stopped in time.
    let log = ox.log();
    assert!(
        !log.contains("did not stop within") && !log.contains("task ended"),
        "{}",
        tail(&log, 30)
    );
    let t = Instant::now();
    while socket_answers(&socket).await {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "managed containerd still up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Start again with the manifest gone: the new containerd sees the old pod, and oxlet
    // stops and removes it, then exits cleanly, leaving nothing behind.
    std::fs::remove_file(ox.manifests.join("m.yaml")).unwrap();
    std::fs::remove_file(ox.manifests.join("n.yaml")).unwrap();
    ox.spawn(&[]);
    let t = Instant::now();
    loop {
        if socket_answers(&socket).await && sandboxes(&socket).await.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < START,
            "old pod not cleaned up\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = ox.sigterm();
    assert!(status.success());
    for m in std::fs::read_to_string("/proc/mounts").unwrap().lines() {
        assert!(
            !m.contains(&base.path().display().to_string()),
            "left mounted: {m}"
        );
    }
}

async fn socket_answers(socket: &Path) -> bool {
    let Ok(ep) = tonic::transport::Endpoint::from_shared(format!("unix://{}", socket.display()))
    else {
        return false;
    };
    let Ok(Ok(channel)) = tokio::time::timeout(Duration::from_secs(1), ep.connect()).await else {
        return false;
    };
    cri::runtime_service_client::RuntimeServiceClient::new(channel)
        .version(cri::VersionRequest::default())
        .await
        .is_ok()
}
