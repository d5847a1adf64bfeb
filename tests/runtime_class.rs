//! RuntimeClass (node.k8s.io/v1) through the test apiserver on a real containerd: the
//! admission plugin sets the pod's overhead from the class; oxlet reads the class
//! and runs the sandbox on its `handler` (not its name), adds the overhead to the pod
//! cgroup, and refuses a pod whose class is gone with kubelet's event.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "testnode";

fn classy(name: &str, class: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE, "terminationGracePeriodSeconds": 1, "runtimeClassName": class,
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            }],
        },
    }))
    .unwrap()
}

fn read_i64(path: &std::path::Path) -> i64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_class_picks_the_handler_and_adds_its_overhead() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let client = client_of(&server).await;
    let classes: Api<RuntimeClass> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // The class's name is not a handler containerd knows; its handler is.
    let class: RuntimeClass = serde_json::from_value(json!({
        "metadata": {"name": "sandboxed"}, "handler": "runc",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap();

    let created = pods
        .create(&PostParams::default(), &classy("classy", "sandboxed"))
        .await
        .unwrap();
    let overhead = created.spec.as_ref().unwrap().overhead.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&overhead).unwrap(),
        json!({"cpu": "250m", "memory": "64Mi"})
    );
    let running = ox.wait_api_running("classy", WAIT).await;
    assert_eq!(
        running.status.as_ref().unwrap().qos_class.as_deref(),
        Some("Guaranteed"),
        "the overhead does not change the class"
    );
    let sandboxes = cri_sandboxes(&bed, &uid(&running)).await;
    assert_eq!(sandboxes.len(), 1);
    assert_eq!(sandboxes[0].runtime_handler, "runc");
    // The pod cgroup holds the containers' limits plus the overhead.
    let rel = format!("kubepods/pod{}", uid(&running));
    let memory = read_i64(&ox.cgroup_file("memory", &format!("{rel}/memory.limit_in_bytes")));
    assert_eq!(memory, 128 << 20);
    let quota = read_i64(&ox.cgroup_file("cpu", &format!("{rel}/cpu.cfs_quota_us")));
    assert_eq!(quota, 75_000);

    // The admission plugin refuses a class that does not exist.
    let refused = pods
        .create(&PostParams::default(), &classy("nope", "missing"))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains(
            "pods \"nope\" is forbidden: pod rejected: RuntimeClass \"missing\" not found"
        ),
        "{refused}"
    );
    // A pod whose class went away after admission: kubelet's event, no sandbox.
    let orphan = server.put(&classy("orphan", "deleted")).unwrap();
    let want = "Failed to create pod sandbox: runtimeclasses.node.k8s.io \"deleted\" not found";
    let t = std::time::Instant::now();
    loop {
        let events = server.list::<Event>(Some("default")).unwrap();
        let seen = events.iter().any(|e| {
            e.reason.as_deref() == Some("FailedCreatePodSandBox")
                && e.involved_object.name.as_deref() == Some("orphan")
                && e.message.as_deref() == Some(want)
        });
        if seen {
            break;
        }
        assert!(
            t.elapsed() < WAIT,
            "no event {want:?}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(cri_sandboxes(&bed, &uid(&orphan)).await.is_empty());
    let p = server.get::<Pod>("default", "orphan").unwrap().unwrap();
    assert_eq!(phase(&p), "Pending");
}

/// kubelet's `RuntimeHandlers` and `RuntimeFeatures` setters: the Node lists the
/// handlers the runtime's CRI status lists, with their recursive read-only and user
/// namespace support, and `features.supplementalGroupsPolicy` as the runtime says it;
/// both are left out where the runtime says nothing (containerd 1.6 and 1.7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_lists_the_runtimes_handlers_and_features() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let status = bed.runtime_status().await;
    let want_handlers: Vec<serde_json::Value> = (status.runtime_handlers.iter())
        .map(|h| {
            let f = h.features.unwrap_or_default();
            json!({"name": h.name, "features": {
                "recursiveReadOnlyMounts": f.recursive_read_only_mounts,
                "userNamespaces": f.user_namespaces}})
        })
        .collect();
    let want_features = (status.features.as_ref())
        .map(|f| json!({"supplementalGroupsPolicy": f.supplemental_groups_policy}));
    eprintln!("runtime: handlers {want_handlers:?}, features {want_features:?}");
    let node = ox
        .poll("the node's status", WAIT, || {
            let n: k8s_openapi::api::core::v1::Node = server.get("", NODE).ok()??;
            let n = serde_json::to_value(&n).unwrap();
            n.pointer("/status/nodeInfo").is_some().then_some(n)
        })
        .await;
    let handlers = node.pointer("/status/runtimeHandlers").cloned();
    if want_handlers.is_empty() {
        assert_eq!(handlers, None);
    } else {
        assert_eq!(handlers, Some(json!(want_handlers)));
    }
    assert_eq!(node.pointer("/status/features").cloned(), want_features);
    // kubelet's declared features that oxlet carries out: the pod-level resize.
    assert_eq!(
        node.pointer("/status/declaredFeatures").cloned(),
        Some(json!(["InPlacePodLevelResourcesVerticalScaling"]))
    );
}
