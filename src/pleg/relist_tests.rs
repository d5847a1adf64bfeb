//! The relisting PLEG over the in-memory runtime: events, the cache, and waits for
//! data newer than a worker's last sync.

use std::time::Duration;

use super::*;
use crate::cri::support::{FakeNode, pod};

struct Rig {
    node: FakeNode,
    pleg: GenericPleg,
    cache: Arc<PodCache>,
    events: mpsc::Receiver<PodLifecycleEvent>,
}

fn rig() -> Rig {
    let node = FakeNode::new();
    let cache = Arc::new(PodCache::default());
    let (tx, events) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    let pleg = GenericPleg::new(
        node.manager.reader(),
        cache.clone(),
        tx,
        Arc::new(PlegStats::default()),
    );
    Rig {
        node,
        pleg,
        cache,
        events,
    }
}

fn drain(rx: &mut mpsc::Receiver<PodLifecycleEvent>) -> Vec<(String, EventKind)> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push((e.container_id, e.kind));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn relist_reports_started_and_died_and_keeps_the_cache() {
    let mut r = rig();
    let p = pod("web", &[], &["app"], "Always");
    r.node.sync(&p).await.unwrap();
    let id = r.node.fake.container_id("web", "app").unwrap();

    r.pleg.relist().await;
    let sandbox = r.pleg.snapshot()[0].sandboxes[0].id.clone();
    // The sandbox counts as a container, as in kubelet.
    let mut events = drain(&mut r.events);
    events.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        events,
        [
            (id.clone(), EventKind::ContainerStarted),
            (sandbox, EventKind::ContainerStarted)
        ]
    );
    let cached = r.cache.get("uid-web").unwrap();
    assert_eq!(cached.latest("app").unwrap().state, ContainerState::Running);

    // Nothing changed: no event.
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert!(drain(&mut r.events).is_empty());

    r.node.fake.oom_kill(&id);
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert_eq!(
        drain(&mut r.events),
        [(id.clone(), EventKind::ContainerDied)]
    );
    let c = r
        .cache
        .get("uid-web")
        .unwrap()
        .latest("app")
        .unwrap()
        .clone();
    assert_eq!((c.exit_code, c.reason.as_str()), (137, "OOMKilled"));

    // Removed from the runtime: the running sandbox died, the dead container is
    // only removed (no event is sent for a removal), and the cache forgets the pod
    // (kubelet's `updateCache`), so 2,000 pods through a node leave no entry behind;
    // a reader still gets an empty status once this relist ran.
    let sandbox = r.pleg.snapshot()[0].sandboxes[0].id.clone();
    r.node
        .manager
        .remove_pod("uid-web", "default/web")
        .await
        .unwrap();
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert_eq!(drain(&mut r.events), [(sandbox, EventKind::ContainerDied)]);
    assert!(r.cache.get("uid-web").is_none());
    assert_eq!(r.cache.len(), 0);
    let read = r.cache.get_newer_than(
        "uid-web",
        Some(tokio::time::Instant::now() - RELIST_PERIOD / 2),
    );
    assert!(read.await.unwrap().containers.is_empty());
    assert!(r.pleg.snapshot().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_worker_waits_for_a_relist_newer_than_its_last_sync() {
    let mut r = rig();
    let p = pod("wait", &[], &["app"], "Always");
    r.node.sync(&p).await.unwrap();
    r.pleg.relist().await;
    let last_sync = tokio::time::Instant::now();
    let cache = r.cache.clone();
    let waiter =
        tokio::spawn(async move { cache.get_newer_than("uid-wait", Some(last_sync)).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !waiter.is_finished(),
        "no data newer than the last sync yet"
    );

    let id = r.node.fake.container_id("wait", "app").unwrap();
    r.node.fake.exit_container(&id, 2);
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    let st = waiter.await.unwrap().unwrap();
    assert_eq!(st.latest("app").unwrap().exit_code, 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_relist_changes_nothing_and_a_failed_inspection_is_retried() {
    let mut r = rig();
    let p = pod("flaky", &[], &["app"], "Always");
    r.node.sync(&p).await.unwrap();
    r.node
        .fake
        .fail_next("ListContainers", None, 1, tonic::Code::Unavailable);
    r.pleg.relist().await;
    assert!(drain(&mut r.events).is_empty());
    assert!(r.cache.get("uid-flaky").is_none());

    // The listing works but reading the pod's status fails once: the waiter gets the
    // error and, as in kubelet's Relist, the pod's events are held back and its record
    // is kept, so the next relist finds the same changes and sends them then.
    r.node.fake.fail_next(
        "PodSandboxStatus",
        Some("flaky"),
        1,
        tonic::Code::Unavailable,
    );
    r.pleg.relist().await;
    assert!(drain(&mut r.events).is_empty(), "held back while unread");
    assert!(r.cache.get_newer_than("uid-flaky", None).await.is_err());
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert_eq!(
        drain(&mut r.events).len(),
        2,
        "sandbox and container started, once read"
    );
    let st = r.cache.get_newer_than("uid-flaky", None).await.unwrap();
    assert_eq!(st.latest("app").unwrap().state, ContainerState::Running);
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert!(drain(&mut r.events).is_empty(), "nothing new");

    // A container's death seen while its pod cannot be read is told on the retry,
    // with its exit (kubelet's podRecords keep the old state until an inspection works).
    let id = r.node.fake.container_id("flaky", "app").unwrap();
    r.node.fake.oom_kill(&id);
    r.node.fake.fail_next(
        "PodSandboxStatus",
        Some("flaky"),
        1,
        tonic::Code::Unavailable,
    );
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert!(drain(&mut r.events).is_empty());
    tokio::time::advance(RELIST_PERIOD).await;
    r.pleg.relist().await;
    assert_eq!(drain(&mut r.events), [(id, EventKind::ContainerDied)]);
}
