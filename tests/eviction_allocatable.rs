//! Pods' allocatable memory on real cgroups: with `enforceNodeAllocatable`
//! including pods (the default), kubelet copies each hard `memory.available` threshold
//! to `allocatableMemory.available`, observed on the kubepods cgroup against its limit,
//! and arms a second memcg notification there. Here the kubepods limit is 512 MiB
//! (everything else is kube-reserved) and the threshold 256 MiB, while the node itself
//! has gigabytes available: a pod filling Memory emptyDirs past 256 MiB is evicted for
//! `allocatableMemory.available`. The monitoring period is 2 minutes, so the eviction
//! within seconds is the kernel's notification on kubepods waking the manager.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

const NODE: &str = "testnode";

fn cgroup_v1() -> bool {
    // cgroup v2 has one unified hierarchy: no `memory` controller directory.
    std::path::Path::new("/sys/fs/cgroup/memory/memory.usage_in_bytes").exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_over_the_pods_allocatable_is_evicted_on_the_kubepods_notification() {
    if !cgroup_v1() {
        eprintln!("skipped: memcg threshold notifications need cgroup v1 (kubelet has none on v2)");
        return;
    }
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "120000".into()));
    let reserved = meminfo("MemTotal:") - (512 << 20);
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        &format!("--kube-reserved=memory={reserved}"),
        "--eviction-hard=memory.available<256Mi",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    server
        .put(&api_pod("quiet", NODE, "sleep 3600", 1))
        .unwrap();
    ox.wait_api_running("quiet", Duration::from_secs(30)).await;
    // The first cycle with readings arms both notifiers; only then does the pod eat.
    let t = std::time::Instant::now();
    while !ox
        .log()
        .contains("notifier=\"hard allocatable memory eviction threshold\"")
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Memory emptyDirs are tmpfs charged to the pod. Each is sized to node allocatable
    // (256 MiB here), so two of 200 MiB: the kernel checks thresholds every few hundred
    // pages written, and the crossing must come before the writes end.
    let mut eater = api_pod(
        "eater",
        NODE,
        "dd if=/dev/zero of=/a/blob bs=1M count=200 && dd if=/dev/zero of=/b/blob bs=1M count=200 && sleep 3600",
        1,
    );
    let spec = eater.spec.as_mut().unwrap();
    let volume = |name: &str| {
        serde_json::from_value(serde_json::json!({"name": name, "emptyDir": {"medium": "Memory"}}))
            .unwrap()
    };
    let mount = |name: &str| {
        serde_json::from_value(serde_json::json!({"name": name, "mountPath": format!("/{name}")}))
            .unwrap()
    };
    spec.volumes = Some(vec![volume("a"), volume("b")]);
    spec.containers[0].volume_mounts = Some(vec![mount("a"), mount("b")]);
    server.put(&eater).unwrap();

    let p = ox
        .wait_api_phase(&pods, "eater", "Failed", Duration::from_secs(40))
        .await;
    let s = p.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("Evicted"));
    let message = s.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "The node was low on resource: memory. Threshold quantity: 256Mi, available: "
        ),
        "{message}"
    );
    let log = ox.log();
    assert!(
        log.contains("eviction manager: memory threshold notification"),
        "the eviction came before the 2-minute period without the notification?\n{}",
        tail(&log, 60)
    );
    assert!(
        log.contains("signal=\"allocatableMemory.available\""),
        "{}",
        tail(&log, 60)
    );
    let quiet = pods.get("quiet").await.unwrap();
    assert_eq!(phase(&quiet), "Running", "{:?}", quiet.status);
}
