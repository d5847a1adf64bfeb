//! The status writer against the in-process test apiserver (real HTTP, real kube client).

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, PodCondition};
use serde_json::json;
use testapi::TestApiServer;

use super::*;

const NODE: &str = "node-a";

pub(crate) async fn client_of(server: &TestApiServer) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

struct Bed {
    _dir: tempfile::TempDir,
    server: TestApiServer,
    statuses: Arc<StatusManager>,
    pods: Arc<PodManager>,
    finished: Arc<AtomicBool>,
    writer: StatusWriter,
}

async fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let client = client_of(&server).await;
    let statuses = Arc::new(StatusManager::default());
    let pods = Arc::new(PodManager::default());
    let finished = Arc::new(AtomicBool::new(false));
    let f = finished.clone();
    let writer = StatusWriter::new(
        client,
        statuses.clone(),
        pods.clone(),
        Arc::new(move |_: &str| f.load(Ordering::SeqCst)),
        RECONCILE_PERIOD,
    );
    Bed {
        _dir: dir,
        server,
        statuses,
        pods,
        finished,
        writer,
    }
}

/// An apiserver pod stored in the server and known to the pod manager; returns its UID.
fn api_pod(bed: &Bed, name: &str, policy: &str) -> String {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"kubernetes.io/config.source": "api"}},
        "spec": {"nodeName": NODE, "restartPolicy": policy,
                 "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let stored = bed.server.put(&pod).unwrap();
    bed.pods.add_or_update(Arc::new(stored.clone()));
    stored.metadata.uid.unwrap()
}

fn stored(bed: &Bed, name: &str) -> Option<Pod> {
    bed.server.get::<Pod>("default", name).unwrap()
}

/// A running status as the status manager makes it (the QoS class of these pods is
/// BestEffort, and the apiserver refuses a status that changes it).
fn running(ip: &str) -> PodStatus {
    serde_json::from_value(json!({
        "phase": "Running", "podIP": ip, "qosClass": "BestEffort",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c", "image": "busybox", "imageID": "", "ready": true,
                               "restartCount": 0, "state": {"running": {}}}],
    }))
    .unwrap()
}

fn patches(bed: &Bed) -> usize {
    bed.server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status"))
        .count()
}

#[tokio::test]
async fn writes_only_newer_versions() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    bed.statuses.set(&uid, running("10.0.0.1"));
    bed.writer.sync_all(false).await;
    assert_eq!(patches(&bed), 1);
    let s = stored(&bed, "p").unwrap().status.unwrap();
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.1"));
    assert_eq!(s.phase.as_deref(), Some("Running"));
    // Same version: nothing is read or written.
    let before = bed.server.requests().len();
    bed.writer.sync_all(false).await;
    assert_eq!(bed.server.requests().len(), before);
    // A reconcile pass reads, finds the same status, and does not patch.
    bed.writer.sync_all(true).await;
    assert_eq!(patches(&bed), 1);
    bed.statuses.set(&uid, running("10.0.0.2"));
    bed.writer.sync_all(false).await;
    assert_eq!(patches(&bed), 2);
    assert_eq!(
        stored(&bed, "p").unwrap().status.unwrap().pod_ip.as_deref(),
        Some("10.0.0.2")
    );
}

#[tokio::test]
async fn another_pod_by_the_same_name_is_not_written() {
    let mut bed = bed().await;
    api_pod(&bed, "p", "Always");
    // Our pod has another UID than the apiserver's.
    let mut ours = (*bed.pods.all()[0]).clone();
    ours.metadata.uid = Some("other-uid".into());
    bed.pods.add_or_update(Arc::new(ours));
    bed.statuses.set("other-uid", running("10.0.0.1"));
    assert_eq!(
        bed.writer.sync_pod("other-uid").await.unwrap(),
        Outcome::Skipped
    );
    assert_eq!(patches(&bed), 0);
    assert!(
        stored(&bed, "p")
            .unwrap()
            .status
            .and_then(|s| s.pod_ip)
            .is_none()
    );
}

#[tokio::test]
async fn a_terminal_phase_is_never_reverted() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Never");
    let mut p = stored(&bed, "p").unwrap();
    p.status = Some(PodStatus {
        phase: Some("Failed".into()),
        ..Default::default()
    });
    bed.server.put(&p).unwrap();
    bed.statuses.set(&uid, running("10.0.0.1"));
    assert_eq!(bed.writer.sync_pod(&uid).await.unwrap(), Outcome::Refused);
    assert_eq!(
        stored(&bed, "p").unwrap().status.unwrap().phase.as_deref(),
        Some("Failed")
    );
}

#[tokio::test]
async fn reconcile_restores_a_status_changed_by_someone_else_and_removes_entries() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    bed.statuses.set(&uid, running("10.0.0.1"));
    bed.writer.sync_all(false).await;
    // Someone else rewrites the status: another IP, a kubelet-owned condition and a
    // container status we do not report, and a condition of their own.
    let mut p = stored(&bed, "p").unwrap();
    let mut s = running("10.9.9.9");
    s.conditions.as_mut().unwrap().extend([
        PodCondition {
            type_: "Initialized".into(),
            status: "False".into(),
            ..Default::default()
        },
        PodCondition {
            type_: "example.com/gate".into(),
            status: "True".into(),
            ..Default::default()
        },
    ]);
    s.container_statuses
        .as_mut()
        .unwrap()
        .push(ContainerStatus {
            name: "ghost".into(),
            state: Some(ContainerState::default()),
            ..Default::default()
        });
    p.status = Some(s);
    bed.server.put(&p).unwrap();
    // Our version did not change: only the reconcile pass notices.
    bed.writer.sync_all(false).await;
    assert_eq!(
        stored(&bed, "p").unwrap().status.unwrap().pod_ip.as_deref(),
        Some("10.9.9.9")
    );
    bed.writer.sync_all(true).await;
    let s = stored(&bed, "p").unwrap().status.unwrap();
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.1"));
    let types: Vec<_> = s.conditions.unwrap().into_iter().map(|c| c.type_).collect();
    assert_eq!(types, ["Ready", "example.com/gate"]);
    let names: Vec<_> = s
        .container_statuses
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["c"]);
}

#[tokio::test]
async fn final_delete_only_once_the_worker_finished() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Never");
    let client = client_of(&bed.server).await;
    let api: Api<Pod> = Api::namespaced(client, "default");
    // A graceful delete: the pod stays with a deletionTimestamp.
    api.delete("p", &DeleteParams::default()).await.unwrap();
    let p = stored(&bed, "p").unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    bed.pods.add_or_update(Arc::new(p));
    let mut done = running("10.0.0.1");
    done.phase = Some("Failed".into());
    done.container_statuses.as_mut().unwrap()[0].state =
        Some(serde_json::from_value(json!({"terminated": {"exitCode": 137}})).unwrap());
    bed.statuses.set(&uid, done);
    // The worker has not finished: the status is written, the pod stays.
    assert_eq!(bed.writer.sync_pod(&uid).await.unwrap(), Outcome::Patched);
    assert!(stored(&bed, "p").is_some());
    bed.finished.store(true, Ordering::SeqCst);
    assert_eq!(bed.writer.sync_pod(&uid).await.unwrap(), Outcome::Deleted);
    assert!(stored(&bed, "p").is_none());
    let delete = bed
        .server
        .requests()
        .into_iter()
        .rfind(|r| r.method == "DELETE")
        .unwrap();
    assert_eq!(delete.status, 200);
}

#[tokio::test]
async fn a_running_pod_being_deleted_is_not_deleted_yet() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    let client = client_of(&bed.server).await;
    let api: Api<Pod> = Api::namespaced(client, "default");
    api.delete("p", &DeleteParams::default()).await.unwrap();
    bed.pods.add_or_update(Arc::new(stored(&bed, "p").unwrap()));
    bed.statuses.set(&uid, running("10.0.0.1"));
    bed.finished.store(true, Ordering::SeqCst);
    assert_eq!(bed.writer.sync_pod(&uid).await.unwrap(), Outcome::Patched);
    assert!(stored(&bed, "p").is_some());
}

#[tokio::test]
async fn an_outage_is_caught_up() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    bed.statuses.set(&uid, running("10.0.0.1"));
    bed.writer.sync_all(false).await;
    bed.server.stop().await.unwrap();
    bed.statuses.set(&uid, running("10.0.0.2"));
    assert!(bed.writer.sync_pod(&uid).await.is_err());
    bed.server.restart().await.unwrap();
    // The failed version was not recorded as written: the next pass sends it.
    bed.writer.sync_all(false).await;
    assert_eq!(
        stored(&bed, "p").unwrap().status.unwrap().pod_ip.as_deref(),
        Some("10.0.0.2")
    );
}

#[tokio::test]
async fn the_running_writer_follows_changes() {
    let bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    let Bed {
        writer,
        statuses,
        server,
        _dir,
        ..
    } = bed;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(writer.run(cancel.clone()));
    statuses.set(&uid, running("10.0.0.7"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ip = server
            .get::<Pod>("default", "p")
            .unwrap()
            .and_then(|p| p.status)
            .and_then(|s| s.pod_ip);
        if ip.as_deref() == Some("10.0.0.7") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "status not written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    task.await.unwrap();
}

/// Every request the server saw after `from` (method and path), for counting.
fn requests_since(bed: &Bed, from: usize) -> Vec<String> {
    bed.server.requests()[from..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test]
async fn a_reconcile_pass_asks_only_about_pods_whose_apiserver_status_differs() {
    let mut bed = bed().await;
    let uid = api_pod(&bed, "p", "Always");
    let quiet = api_pod(&bed, "q", "Always");
    bed.statuses.set(&uid, running("10.0.0.1"));
    bed.statuses.set(&quiet, running("10.0.0.2"));
    bed.writer.sync_all(false).await;
    assert_eq!(patches(&bed), 2);
    // The watch brings the written pods back into the pod manager.
    for name in ["p", "q"] {
        bed.pods
            .add_or_update(Arc::new(stored(&bed, name).unwrap()));
    }
    let from = bed.server.requests().len();
    bed.writer.sync_all(true).await;
    assert_eq!(requests_since(&bed, from), Vec::<String>::new());
    // Someone else changes p's status; the watch shows it: only p is read and patched.
    let mut p = stored(&bed, "p").unwrap();
    p.status = Some(running("10.9.9.9"));
    let p = bed.server.put(&p).unwrap();
    bed.pods.add_or_update(Arc::new(p));
    let from = bed.server.requests().len();
    bed.writer.sync_all(true).await;
    assert_eq!(
        requests_since(&bed, from),
        [
            "GET /api/v1/namespaces/default/pods/p",
            "PATCH /api/v1/namespaces/default/pods/p/status"
        ]
    );
    assert_eq!(
        stored(&bed, "p").unwrap().status.unwrap().pod_ip.as_deref(),
        Some("10.0.0.1")
    );
}

#[tokio::test]
async fn a_static_pod_is_reconciled_through_its_current_mirror_pod() {
    let mut bed = bed().await;
    let static_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "s", "namespace": "default", "uid": "static-uid",
                     "annotations": {"kubernetes.io/config.source": "file",
                                     "kubernetes.io/config.hash": "h1"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    bed.pods.add_or_update(Arc::new(static_pod));
    bed.statuses.set("static-uid", running("10.0.0.3"));
    // No mirror pod yet: read each pass (kubelet's needsUpdate), nothing written.
    assert_eq!(
        bed.writer.sync_pod("static-uid").await.unwrap(),
        Outcome::Skipped
    );
    let mirror: Pod = serde_json::from_value(json!({
        "metadata": {"name": "s", "namespace": "default",
                     "annotations": {"kubernetes.io/config.source": "api",
                                     "kubernetes.io/config.mirror": "h1"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let mirror = bed.server.put(&mirror).unwrap();
    bed.pods.add_or_update(Arc::new(mirror));
    bed.writer.sync_all(false).await;
    assert_eq!(patches(&bed), 1);
    // In step: a reconcile pass makes no request.
    bed.pods.add_or_update(Arc::new(stored(&bed, "s").unwrap()));
    let from = bed.server.requests().len();
    bed.writer.sync_all(true).await;
    assert_eq!(requests_since(&bed, from), Vec::<String>::new());
    // The mirror pod's status was wiped (e.g. it was recreated): reconciled.
    let mut m = stored(&bed, "s").unwrap();
    m.status = None;
    let m = bed.server.put(&m).unwrap();
    bed.pods.add_or_update(Arc::new(m));
    bed.writer.sync_all(true).await;
    assert_eq!(patches(&bed), 2);
    assert_eq!(
        stored(&bed, "s").unwrap().status.unwrap().pod_ip.as_deref(),
        Some("10.0.0.3")
    );
}
