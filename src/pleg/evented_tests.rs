//! The evented PLEG over the in-memory runtime: which PLEG the runtime allows, events
//! into the cache without a relist, the fall-back to relisting while the stream is down,
//! the global cache time, and health.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::*;
use crate::cri::CriRead as _;
use crate::cri::support::{FakeNode, pod};
use crate::pleg::{EVENT_CHANNEL_CAPACITY, PlegStats, PlegUnhealthy, PodCache};

struct Rig {
    node: FakeNode,
    cache: Arc<PodCache>,
    stats: Arc<PlegStats>,
    events: mpsc::Receiver<PodLifecycleEvent>,
    tx: mpsc::Sender<PodLifecycleEvent>,
}

fn rig() -> Rig {
    let (tx, events) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    Rig {
        node: FakeNode::new(),
        cache: Arc::new(PodCache::default()),
        stats: Arc::new(PlegStats::default()),
        events,
        tx,
    }
}

/// A runtime that serves container events, running one pod named `name`.
async fn serving_with(name: &str) -> Rig {
    let r = rig();
    r.node.fake.serve_container_events();
    r.node
        .sync(&pod(name, &[], &["app"], "Always"))
        .await
        .unwrap();
    r
}

impl Rig {
    fn generic(&self) -> GenericPleg {
        GenericPleg::new(
            self.node.manager.reader(),
            self.cache.clone(),
            self.tx.clone(),
            self.stats.clone(),
        )
    }

    /// The evented PLEG, started as the agent starts it, running in a task.
    async fn start(&self) -> CancellationToken {
        let mut generic = self.generic();
        generic.relist().await;
        let PlegChoice::Evented(stream) = choose_pleg(&self.node.manager.reader(), true).await
        else {
            panic!("the fake serves container events");
        };
        let cancel = CancellationToken::new();
        let pleg = EventedPleg::new(generic, stream);
        tokio::spawn(pleg.run(cancel.clone()));
        cancel
    }

    /// The event the runtime sends for container `id` of pod `name`.
    async fn event(
        &self,
        name: &str,
        id: &str,
        kind: cri::ContainerEventType,
    ) -> cri::ContainerEventResponse {
        let sandbox = self
            .node
            .fake
            .container_sandbox(id)
            .unwrap_or_else(|| id.to_string());
        let status = self.node.fake.pod_sandbox_status(&sandbox).await.unwrap();
        assert_eq!(status.metadata.as_ref().unwrap().name, name);
        cri::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: 0,
            pod_sandbox_status: Some(status),
            containers_statuses: Vec::new(),
        }
    }

    /// Pod `name`'s container exits with `code` and the runtime says so; the loop hears
    /// of it at once. Returns the container's ID.
    async fn exits(&mut self, name: &str, code: i32) -> String {
        let id = self.node.fake.container_id(name, "app").unwrap();
        self.node.fake.exit_container(&id, code);
        let ev = self
            .event(name, &id, cri::ContainerEventType::ContainerStoppedEvent)
            .await;
        self.node.fake.send_container_event(ev);
        settle().await;
        assert_eq!(self.drain(), [(id.clone(), EventKind::ContainerDied)]);
        id
    }

    fn relists(&self) -> u64 {
        self.stats.relists.load(Ordering::Relaxed)
    }

    fn drain(&mut self) -> Vec<(String, EventKind)> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push((e.container_id, e.kind));
        }
        out
    }
}

/// Let the PLEG task run without moving the clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_runtime_decides_which_pleg_runs() {
    let r = rig();
    let choice = choose_pleg(&r.node.manager.reader(), true).await;
    assert_eq!(choice.name(), "GenericPLEG");
    assert!(
        choice
            .reason()
            .contains("does not implement GetContainerEvents"),
        "{}",
        choice.reason()
    );

    r.node.fake.serve_container_events();
    let choice = choose_pleg(&r.node.manager.reader(), true).await;
    assert_eq!(choice.name(), "EventedPLEG");
    assert!(choice.reason().contains("5m0s"), "{}", choice.reason());
    assert_eq!(r.node.fake.container_event_subscribers(), 1);

    // The EventedPLEG gate set false: the generic PLEG, and the runtime is not asked.
    let choice = choose_pleg(&r.node.manager.reader(), false).await;
    assert_eq!(choice.name(), "GenericPLEG");
    assert!(
        choice
            .reason()
            .contains("EventedPLEG feature gate is false"),
        "{}",
        choice.reason()
    );
    assert_eq!(r.node.fake.container_event_subscribers(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_exit_reaches_the_cache_and_the_loop_without_a_relist() {
    let mut r = serving_with("web").await;
    let cancel = r.start().await;
    r.drain();
    let relists = r.relists();

    let id = r.exits("web", 3).await;
    let cached = r.cache.get("uid-web").unwrap();
    assert_eq!(cached.latest("app").unwrap().exit_code, 3);
    assert_eq!(r.relists(), relists, "no relist was needed");

    // Created refreshes the cache but wakes nobody; started wakes the worker.
    let ev = r
        .event("web", &id, cri::ContainerEventType::ContainerCreatedEvent)
        .await;
    r.node.fake.send_container_event(ev);
    settle().await;
    assert!(r.drain().is_empty());
    let ev = r
        .event("web", &id, cri::ContainerEventType::ContainerStartedEvent)
        .await;
    r.node.fake.send_container_event(ev);
    settle().await;
    assert_eq!(r.drain(), [(id, EventKind::ContainerStarted)]);

    // The slow relist still runs, every 300 s.
    tokio::time::sleep(EVENTED_RELIST_PERIOD + Duration::from_millis(10)).await;
    assert_eq!(r.relists(), relists + 1);
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_oom_event_after_the_exit_is_read_and_wakes_the_worker_again() {
    let mut r = serving_with("hog").await;
    let cancel = r.start().await;
    r.drain();
    let reason = |r: &Rig| {
        let cached = r.cache.get("uid-hog").unwrap();
        cached.latest("app").unwrap().reason.clone()
    };

    // containerd 2.x: the exit (137, "Error") first, its OOM event just after.
    let id = r.exits("hog", 137).await;
    assert_eq!(reason(&r), "Error");
    r.node.fake.late_oom_event(&id);
    tokio::time::sleep(OOM_EVENT_GRACE + Duration::from_millis(10)).await;
    settle().await;
    assert_eq!(reason(&r), "OOMKilled");
    assert_eq!(r.drain(), [(id, EventKind::ContainerDied)]);

    // A SIGKILL that was no OOM kill: read again once, nobody woken for it.
    r.node
        .sync(&pod("hog", &[], &["app"], "Always"))
        .await
        .unwrap();
    r.exits("hog", 137).await;
    let reads = r.node.fake.calls_of("ContainerStatus").len();
    tokio::time::sleep(OOM_EVENT_GRACE + Duration::from_millis(10)).await;
    settle().await;
    assert!(
        r.node.fake.calls_of("ContainerStatus").len() > reads,
        "read again"
    );
    assert!(r.drain().is_empty());
    assert_eq!(reason(&r), "Error");
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_falls_back_to_relisting_and_resubscribes_with_back_off() {
    let mut r = serving_with("web").await;
    let cancel = r.start().await;
    settle().await;
    r.drain();

    // Down: relist at once and every second; what happened meanwhile is found.
    r.node
        .fake
        .fail_next("GetContainerEvents", None, 2, tonic::Code::Unavailable);
    r.node.fake.break_container_events(tonic::Code::Unavailable);
    let id = r.node.fake.container_id("web", "app").unwrap();
    r.node.fake.exit_container(&id, 1);
    settle().await;
    let relists = r.relists();
    assert_eq!(
        r.drain(),
        [(id, EventKind::ContainerDied)],
        "the relist at once found the exit"
    );
    assert_eq!(r.node.fake.container_event_subscribers(), 0);

    // Resubscribing fails twice (after 1 s, then 2 s), and works after 4 s more.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        r.relists() >= relists + 2,
        "relisting every second while down"
    );
    assert_eq!(r.node.fake.container_event_subscribers(), 0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(r.node.fake.container_event_subscribers(), 1);

    // Back up: the relist slows down to 300 s again.
    let relists = r.relists();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        r.relists() <= relists + 1,
        "{} relists",
        r.relists() - relists
    );
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_quiet_pods_worker_is_released_by_the_global_cache_time() {
    let r = serving_with("quiet").await;
    let cancel = r.start().await;
    // A sync that started 450 ms after the PLEG: the move at 500 ms sets the time
    // 100 ms back, before the sync; the one at 1 s releases it.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let since = tokio::time::Instant::now();
    let cache = r.cache.clone();
    let waiter = tokio::spawn(async move { cache.get_newer_than("uid-quiet", Some(since)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        waiter.is_finished(),
        "released within a second, not the 300 s relist"
    );
    cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn health_allows_ten_minutes_between_relists_and_fails_on_a_full_channel() {
    let r = rig();
    r.node.fake.serve_container_events();
    let cancel = r.start().await;
    settle().await;
    assert_eq!(r.stats.healthy(), Ok(()));
    // The relist every 300 s keeps it healthy past the generic PLEG's 3 minutes.
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert_eq!(r.stats.healthy(), Ok(()));
    cancel.cancel();
    settle().await;
    tokio::time::sleep(EVENTED_RELIST_THRESHOLD).await;
    let err = r.stats.healthy().unwrap_err();
    assert!(matches!(err, PlegUnhealthy::Stale { .. }), "{err}");
    assert!(err.to_string().contains("threshold is 10m0s"), "{err}");

    // A full event channel is unhealthy whatever the relists.
    let r = rig();
    r.node.fake.serve_container_events();
    let cancel = r.start().await;
    settle().await;
    for _ in 0..EVENT_CHANNEL_CAPACITY {
        r.tx.try_send(PodLifecycleEvent {
            uid: "u".into(),
            kind: EventKind::ContainerStarted,
            container_id: "c".into(),
        })
        .unwrap();
    }
    let err = r.stats.healthy().unwrap_err();
    assert_eq!(err, PlegUnhealthy::ChannelFull(EVENT_CHANNEL_CAPACITY));
    cancel.cancel();
}
