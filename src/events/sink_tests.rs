//! The sink against the in-repo apiserver (`testapi`): real HTTP, real Event objects.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use testapi::TestApiServer;

use super::*;
use crate::events::{EventRecorder, EventType, ObjectRef, reason};

async fn client_of(server: &TestApiServer) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn pod_ref(name: &str) -> ObjectRef {
    ObjectRef {
        kind: "Pod",
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        field_path: "spec.containers{app}".into(),
    }
}

fn start(
    client: kube::Client,
    settings: SinkSettings,
) -> (
    EventRecorder,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (rec, mut rx) = EventRecorder::queued(crate::events::MAX_QUEUED_EVENTS);
    let cancel = CancellationToken::new();
    // Test-only: the sink under test, awaited at the end of each test.
    let stop = cancel.clone();
    let task = tokio::spawn(async move { run_sink(client, settings, &mut rx, stop).await });
    (rec, cancel, task)
}

async fn wait_for(server: &TestApiServer, ok: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let events = server.list::<Event>(Some("default")).unwrap();
        if ok(&events) || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_repeat_is_a_patch_with_count_two() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let settings = SinkSettings::new(50, 100, "node-a".into());
    let (rec, cancel, task) = start(client_of(&server).await, settings);
    let obj = pod_ref("p");
    let msg = "Back-off restarting failed container app in pod p_default(uid-p)";
    rec.event(&obj, EventType::Warning, reason::BACK_OFF, msg);
    wait_for(&server, |e| e.len() == 1).await;
    rec.event(&obj, EventType::Warning, reason::BACK_OFF, msg);
    let events = wait_for(&server, |e| e.first().and_then(|e| e.count) == Some(2)).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.count, Some(2));
    assert_eq!(e.reason.as_deref(), Some("BackOff"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.message.as_deref(), Some(msg));
    let src = e.source.as_ref().unwrap();
    assert_eq!(src.component.as_deref(), Some("kubelet"));
    assert_eq!(src.host.as_deref(), Some("node-a"));
    let io = &e.involved_object;
    assert_eq!(io.kind.as_deref(), Some("Pod"));
    assert_eq!(io.uid.as_deref(), Some("uid-p"));
    assert_eq!(io.field_path.as_deref(), Some("spec.containers{app}"));
    assert!(e.metadata.name.as_deref().unwrap().starts_with("p."));
    let methods: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/events"))
        .map(|r| (r.method, r.status))
        .collect();
    assert_eq!(
        methods,
        [("POST".to_owned(), 201), ("PATCH".to_owned(), 200)]
    );
    cancel.cancel();
    task.await.unwrap();
}

/// kubelet's `AnnotatedEventf` (an eviction's offending containers): the annotations
/// are on the Event object.
#[tokio::test]
async fn an_annotated_event_carries_its_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let settings = SinkSettings::new(50, 100, "node-a".into());
    let (rec, cancel, task) = start(client_of(&server).await, settings);
    let annotations = std::collections::BTreeMap::from([
        ("offending_containers".to_string(), "app".to_string()),
        ("starved_resource".to_string(), "memory".to_string()),
    ]);
    rec.annotated_event(
        &pod_ref("q"),
        EventType::Warning,
        reason::EVICTED,
        "The node was low on resource: memory. ",
        annotations.clone(),
    );
    rec.event(
        &pod_ref("plain"),
        EventType::Normal,
        reason::PULLED,
        "pulled",
    );
    let events = wait_for(&server, |e| e.len() == 2).await;
    let of = |name: &str| {
        events
            .iter()
            .find(|e| e.involved_object.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name}: {events:?}"))
    };
    assert_eq!(of("q").metadata.annotations.as_ref(), Some(&annotations));
    assert_eq!(of("plain").metadata.annotations, None);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn writes_hold_the_event_qps() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    // Burst 2 at once, then 10 per second: 7 events take at least 0.5 s.
    let (rec, cancel, task) = start(
        client_of(&server).await,
        SinkSettings::new(10, 2, "n".into()),
    );
    let began = Instant::now();
    for i in 0..7 {
        rec.event(
            &pod_ref(&format!("p{i}")),
            EventType::Normal,
            reason::PULLED,
            "m",
        );
    }
    let events = wait_for(&server, |e| e.len() == 7).await;
    let took = began.elapsed();
    assert_eq!(events.len(), 7);
    assert!(took >= Duration::from_millis(480), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn an_absent_apiserver_drops_events_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = TestApiServer::start(dir.path()).await.unwrap();
    let client = client_of(&server).await;
    server.stop().await.unwrap();
    let mut settings = SinkSettings::new(50, 100, "n".into());
    settings.retry_sleep = Duration::from_millis(1);
    let (rec, cancel, task) = start(client, settings);
    let obj = pod_ref("p");
    let mut took = Vec::with_capacity(3000);
    let began = Instant::now();
    for i in 0..3000 {
        let t = Instant::now();
        rec.event(&obj, EventType::Normal, reason::PULLED, format!("m{i}"));
        took.push(t.elapsed());
    }
    let total = began.elapsed();
    took.sort();
    let (median, p99) = (took[took.len() / 2], took[took.len() * 99 / 100]);
    eprintln!(
        "3000 events while the apiserver is down: {total:?} in all, median {median:?}, \
         p99 {p99:?}, slowest {:?}",
        took[took.len() - 1]
    );
    // Microseconds, not the seconds a retried write takes (a loaded 2-core test machine
    // can preempt any one call, so the bound is on the 99th percentile).
    assert!(median < Duration::from_micros(100), "{median:?}");
    assert!(p99 < Duration::from_millis(2), "{p99:?}");
    assert!(total < Duration::from_secs(1), "{total:?}");
    // The queue holds 1000; the rest were dropped at the recorder.
    assert!(rec.dropped() >= 1000, "{}", rec.dropped());
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the sink stops on cancel even while retrying")
        .unwrap();
}
