//! The mirror pod reconciler against the in-process test apiserver.

use serde_json::json;
use testapi::TestApiServer;

use super::*;
use crate::status::apiserver::tests::client_of;

const NODE: &str = "node-a";

struct Bed {
    _dir: tempfile::TempDir,
    server: TestApiServer,
    pods: Arc<PodManager>,
    mirrors: MirrorPods,
}

async fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let pods = Arc::new(PodManager::default());
    let mirrors = MirrorPods::new(
        client_of(&server).await,
        pods.clone(),
        NODE.into(),
        Duration::from_secs(10),
    );
    Bed {
        _dir: dir,
        server,
        pods,
        mirrors,
    }
}

fn node(bed: &Bed) -> Node {
    let n: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).unwrap();
    bed.server.put(&n).unwrap()
}

/// A static pod as the file source makes it: its hash is its UID.
fn static_pod(bed: &Bed, hash: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-node-a", "namespace": "default", "uid": hash,
                     "labels": {"app": "web"},
                     "annotations": {"kubernetes.io/config.source": "file",
                                     "kubernetes.io/config.hash": hash,
                                     "example.com/note": "kept"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    bed.pods.add_or_update(Arc::new(pod));
}

fn mirror(bed: &Bed) -> Option<Pod> {
    bed.server.get::<Pod>("default", "web-node-a").unwrap()
}

#[tokio::test]
async fn created_with_annotations_and_owner_once_the_node_exists() {
    let bed = bed().await;
    static_pod(&bed, "h1");
    let r = bed.mirrors.pass().await.unwrap();
    assert!(r.no_node && r.created == 0);
    assert!(mirror(&bed).is_none());
    let n = node(&bed);
    assert_eq!(bed.mirrors.pass().await.unwrap().created, 1);
    let m = mirror(&bed).unwrap();
    let a = m.metadata.annotations.as_ref().unwrap();
    assert_eq!(a[CONFIG_MIRROR_ANNOTATION], "h1");
    assert_eq!(a["example.com/note"], "kept");
    assert_eq!(m.metadata.labels.as_ref().unwrap()["app"], "web");
    assert_ne!(m.metadata.uid.as_deref(), Some("h1"));
    let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.api_version.as_str(),
            owner.name.as_str()
        ),
        ("Node", "v1", NODE)
    );
    assert_eq!(Some(&owner.uid), n.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    // A second pass leaves it alone.
    assert_eq!(bed.mirrors.pass().await.unwrap(), PassReport::default());
    assert_eq!(mirror(&bed).unwrap().metadata.uid, m.metadata.uid);
}

#[tokio::test]
async fn recreated_after_deletion_and_replaced_on_a_new_hash() {
    let bed = bed().await;
    node(&bed);
    static_pod(&bed, "h1");
    bed.mirrors.pass().await.unwrap();
    let first = mirror(&bed).unwrap().metadata.uid;
    bed.server.remove::<Pod>("default", "web-node-a").unwrap();
    assert_eq!(bed.mirrors.pass().await.unwrap().created, 1);
    let second = mirror(&bed).unwrap().metadata.uid;
    assert_ne!(first, second);
    // The manifest was edited: a new hash (and UID) for the same full name.
    bed.pods.remove("h1");
    static_pod(&bed, "h2");
    let r = bed.mirrors.pass().await.unwrap();
    assert_eq!((r.created, r.deleted), (1, 1));
    let third = mirror(&bed).unwrap();
    assert_ne!(third.metadata.uid, second);
    assert_eq!(
        third.metadata.annotations.unwrap()[CONFIG_MIRROR_ANNOTATION],
        "h2"
    );
}

#[tokio::test]
async fn a_mirror_being_deleted_is_replaced_and_an_orphan_is_deleted() {
    let bed = bed().await;
    node(&bed);
    static_pod(&bed, "h1");
    bed.mirrors.pass().await.unwrap();
    let first = mirror(&bed).unwrap().metadata.uid;
    let api: Api<Pod> = Api::namespaced(client_of(&bed.server).await, "default");
    api.delete("web-node-a", &DeleteParams::default())
        .await
        .unwrap();
    assert!(mirror(&bed).unwrap().metadata.deletion_timestamp.is_some());
    bed.mirrors.pass().await.unwrap();
    let m = mirror(&bed).unwrap();
    assert!(m.metadata.deletion_timestamp.is_none());
    assert_ne!(m.metadata.uid, first);
    // The static pod goes: so does its mirror pod; other pods of the node stay.
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "plain", "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    bed.server.put(&other).unwrap();
    bed.pods.remove("h1");
    assert_eq!(bed.mirrors.pass().await.unwrap().deleted, 1);
    assert!(mirror(&bed).is_none());
    assert!(bed.server.get::<Pod>("default", "plain").unwrap().is_some());
}

/// An oxlet that restarts lists the node's mirror pods before its file source has
/// reported: the mirror pod of a static pod not read yet must not be taken for an orphan.
#[tokio::test]
async fn orphans_wait_until_every_source_has_reported() {
    let bed = bed().await;
    node(&bed);
    static_pod(&bed, "h1");
    bed.mirrors.pass().await.unwrap();
    let first = mirror(&bed).unwrap().metadata.uid;
    // The restart: the same mirror pod, a pod manager that has not been told of it yet.
    let (ready, ready_rx) = watch::channel(false);
    let restarted = MirrorPods::new(
        client_of(&bed.server).await,
        Arc::new(PodManager::default()),
        NODE.into(),
        Duration::from_secs(10),
    )
    .with_sources_ready(ready_rx);
    assert_eq!(restarted.pass().await.unwrap().deleted, 0);
    assert_eq!(mirror(&bed).unwrap().metadata.uid, first);
    // Every source has reported and the static pod is still gone: an orphan.
    ready.send_replace(true);
    assert_eq!(restarted.pass().await.unwrap().deleted, 1);
    assert!(mirror(&bed).is_none());
}

#[tokio::test]
async fn a_poke_runs_a_pass_before_the_period() {
    let bed = bed().await;
    node(&bed);
    let mirrors = Arc::new(MirrorPods::new(
        client_of(&bed.server).await,
        bed.pods.clone(),
        NODE.into(),
        Duration::from_secs(3600),
    ));
    let cancel = CancellationToken::new();
    let (m, c) = (mirrors.clone(), cancel.clone());
    let task = tokio::spawn(async move { m.run(c).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    static_pod(&bed, "h1");
    mirrors.poke();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while mirror(&bed).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no pass after poke");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    task.await.unwrap();
}
