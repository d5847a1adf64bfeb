//! PersistentVolumeClaims on a real containerd through the test apiserver: a claim
//! bound to a `hostPath` volume (as kind's local-path provisioner makes them, with
//! `nodeAffinity` for this node) and one bound to a `local` volume are mounted, with
//! `subPath` and `readOnly`; what one pod wrote is there for the next after an oxlet
//! restart; an unbound claim, a volume for another node and a CSI volume keep their
//! pods waiting with kubelet's `FailedMount` words.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "testnode";

fn on_node(node: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}})
}

/// A volume of `source` for `node`, and a claim named `claim` for it.
fn volume(name: &str, source: Value, node: &str) -> PersistentVolume {
    let mut spec = json!({
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard",
        "nodeAffinity": on_node(node),
    });
    let (kind, body) = source.as_object().unwrap().iter().next().unwrap();
    spec[kind] = body.clone();
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn claim(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap()
}

/// Binds `claim` to `pv` as the PV controller would (both objects' bound status).
fn bind(server: &testapi::TestApiServer, claim_name: &str, pv_name: &str) {
    let mut c = server
        .get::<PersistentVolumeClaim>("default", claim_name)
        .unwrap()
        .unwrap();
    c.spec.as_mut().unwrap().volume_name = Some(pv_name.into());
    c.status = Some(
        serde_json::from_value(json!({"phase": "Bound",
        "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}))
        .unwrap(),
    );
    let c = server.put(&c).unwrap();
    let mut v = server
        .get::<PersistentVolume>("", pv_name)
        .unwrap()
        .unwrap();
    v.spec.as_mut().unwrap().claim_ref = Some(
        serde_json::from_value(json!({
        "kind": "PersistentVolumeClaim", "namespace": "default", "name": claim_name,
        "uid": c.metadata.uid}))
        .unwrap(),
    );
    v.status = Some(serde_json::from_value(json!({"phase": "Bound"})).unwrap());
    server.put(&v).unwrap();
}

/// A pod mounting `claim` at /data (and its `sub` at /sub), running `script`.
fn pod(name: &str, claim: &str, read_only: bool, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE, "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "data", "mountPath": "/sub", "subPath": "sub"}],
            }],
        },
    }))
    .unwrap()
}

/// Waits for a FailedMount event on pod `name` whose message holds `want`.
async fn wait_failed_mount(server: &testapi::TestApiServer, ox: &Oxlet, name: &str, want: &str) {
    let t = std::time::Instant::now();
    loop {
        let events = server.list::<Event>(Some("default")).unwrap();
        let hit = events.iter().any(|e| {
            e.reason.as_deref() == Some("FailedMount")
                && e.involved_object.name.as_deref() == Some(name)
                && e.message.as_deref().is_some_and(|m| m.contains(want))
        });
        if hit {
            return;
        }
        let seen: Vec<_> = (events.iter())
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .map(|e| format!("{:?}: {:?}", e.reason, e.message))
            .collect();
        assert!(
            t.elapsed() < WAIT,
            "no FailedMount {want:?} for {name}: {seen:?}\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

const WRITE: &str = "echo kept > /data/file; echo deep > /sub/inner; cat /data/file; sleep 3600";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bound_to_host_path_and_local_volumes_are_mounted_and_outlive_pods() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("pv-host");
    let local = dir.path().join("pv-local");
    std::fs::create_dir_all(local.join("sub")).unwrap();
    let (server, mut ox) = start_with_apiserver(&bed, dir.path()).await;
    let client = client_of(&server).await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let hp = json!({"hostPath": {"path": host, "type": "DirectoryOrCreate"}});
    let made = [
        ("pv-host", hp, NODE, "data-host"),
        (
            "pv-local",
            json!({"local": {"path": local}}),
            NODE,
            "data-local",
        ),
        (
            "pv-away",
            json!({"hostPath": {"path": dir.path().join("away")}}),
            "othernode",
            "data-away",
        ),
        (
            "pv-csi",
            json!({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}),
            NODE,
            "data-csi",
        ),
    ];
    for (pv, source, node, c) in &made {
        pvs.create(&PostParams::default(), &volume(pv, source.clone(), node))
            .await
            .unwrap();
        pvcs.create(&PostParams::default(), &claim(c))
            .await
            .unwrap();
        bind(&server, c, pv);
    }
    pvcs.create(&PostParams::default(), &claim("data-pending"))
        .await
        .unwrap();

    // A hostPath volume: written through the claim, a subPath inside it.
    pods.create(
        &PostParams::default(),
        &pod("writer", "data-host", false, WRITE),
    )
    .await
    .unwrap();
    let writer = ox.wait_api_running("writer", WAIT).await;
    let log = ox.main_log_once(&writer, "kept").await;
    assert!(log.contains("kept"), "{log}");
    assert_eq!(
        std::fs::read_to_string(host.join("file")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("sub/inner")).unwrap(),
        "deep\n"
    );
    // A local volume, mounted read-only as the pod's claim source asks.
    let probe = "touch /data/x 2>/dev/null && echo rw || echo ro; sleep 3600";
    pods.create(
        &PostParams::default(),
        &pod("reader", "data-local", true, probe),
    )
    .await
    .unwrap();
    let reader = ox.wait_api_running("reader", WAIT).await;
    assert!(ox.main_log_once(&reader, "r").await.contains("ro"));
    assert!(!local.join("x").exists());

    // The data outlives the pod and an oxlet restart in between.
    pods.delete("writer", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    ox.kill9();
    ox.spawn(&[&kubeconfig]);
    ox.wait_up(WAIT).await;
    let read = "cat /data/file /sub/inner; sleep 3600";
    pods.create(
        &PostParams::default(),
        &pod("again", "data-host", false, read),
    )
    .await
    .unwrap();
    let again = ox.wait_api_running("again", WAIT).await;
    let log = ox.main_log_once(&again, "deep").await;
    assert!(log.contains("kept") && log.contains("deep"), "{log}");
    assert!(
        host.join("file").exists(),
        "the volume's data is never removed"
    );

    // What cannot be mounted waits with kubelet's words, and gets no sandbox.
    for (name, c, want) in [
        (
            "unbound",
            "data-pending",
            "error processing PVC default/data-pending: PVC is not bound",
        ),
        (
            "away",
            "data-away",
            "MountVolume.NodeAffinity check failed for volume \"pv-away\": no matching NodeSelectorTerms",
        ),
        (
            "csi",
            "data-csi",
            "driver name ebs.csi.aws.com not found in the list of registered CSI drivers",
        ),
        (
            "missing",
            "no-such-claim",
            "failed to fetch PVC from API server: persistentvolumeclaims \"no-such-claim\" not found",
        ),
    ] {
        let p = server.put(&pod(name, c, false, "sleep 3600")).unwrap();
        wait_failed_mount(&server, &ox, name, want).await;
        assert!(cri_sandboxes(&bed, &uid(&p)).await.is_empty(), "{name}");
        let stored = server.get::<Pod>("default", name).unwrap().unwrap();
        assert_eq!(phase(&stored), "Pending", "{name}");
    }
}
