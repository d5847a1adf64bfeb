//! Events with real parts: containerd, the oxlet binary and the
//! in-repo apiserver. A static pod's container events reach the apiserver as core/v1
//! Events about the pod and container; a crash loop's BackOff is one Event whose count
//! grows; standalone, the same events are in oxlet's `-v=3` log.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Event;
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(30);

fn find<'a>(events: &'a [Event], reason: &str) -> Option<&'a Event> {
    events.iter().find(|e| e.reason.as_deref() == Some(reason))
}

async fn wait_events(
    server: &TestApiServer,
    timeout: Duration,
    ok: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let events = server.list::<Event>(Some("default")).unwrap();
        if ok(&events) || tokio::time::Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn summary(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{:?} {:?} x{:?} {:?}: {:?}\n",
                e.involved_object.name, e.reason, e.count, e.involved_object.field_path, e.message
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_events_reach_the_apiserver_and_backoff_is_counted() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    // The bed's oxlet runs as node "testnode".
    let ox = Oxlet::start(&bed, &[&kubeconfig]);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", ""),
    );
    write_manifest(
        &ox.manifests,
        "crash.yaml",
        &pod_yaml("crash", "exit 1", ""),
    );
    let web = ox.wait_running("web", START).await;
    let web_uid = uid(&web);

    let events = wait_events(&server, Duration::from_secs(10), |e| {
        ["Pulled", "Created", "Started", "Starting"]
            .iter()
            .all(|r| find(e, r).is_some())
    })
    .await;
    for reason in ["Pulled", "Created", "Started"] {
        let e = events
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.involved_object.name.as_deref() == Some("web-testnode")
            })
            .unwrap_or_else(|| panic!("no {reason} for web:\n{}", summary(&events)));
        let o = &e.involved_object;
        assert_eq!(o.kind.as_deref(), Some("Pod"));
        assert_eq!(o.namespace.as_deref(), Some("default"));
        assert_eq!(o.uid.as_deref(), Some(web_uid.as_str()));
        assert_eq!(o.field_path.as_deref(), Some("spec.containers{main}"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        let source = e.source.as_ref().unwrap();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("testnode"));
    }
    let started = find(&events, "Started").unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.message.as_deref() == Some("Started container main")),
        "{:?}",
        started.message
    );
    let starting = find(&events, "Starting").unwrap();
    assert_eq!(starting.involved_object.kind.as_deref(), Some("Node"));
    assert_eq!(starting.involved_object.name.as_deref(), Some("testnode"));

    // The crash loop: one BackOff Event about the pod, its count growing.
    let events = wait_events(&server, START, |e| {
        e.iter()
            .any(|e| e.reason.as_deref() == Some("BackOff") && e.count.unwrap_or(0) > 1)
    })
    .await;
    let backoffs: Vec<&Event> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("BackOff"))
        .collect();
    assert_eq!(backoffs.len(), 1, "{}", summary(&events));
    let b = backoffs[0];
    assert!(b.count.unwrap() > 1, "{}", summary(&events));
    assert_eq!(b.type_.as_deref(), Some("Warning"));
    assert_eq!(b.involved_object.name.as_deref(), Some("crash-testnode"));
    let msg = b.message.as_deref().unwrap();
    assert!(
        msg.starts_with("Back-off restarting failed container main in pod crash-testnode_default("),
        "{msg}"
    );
    // A repeat is a PATCH of the same object, not another POST.
    let patches = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/events/") && r.status == 200)
        .count();
    assert!(patches >= 1, "no event PATCH");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_events_are_in_the_v3_log() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["-v=3"]);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", ""),
    );
    ox.wait_running("web", START).await;
    let want = [
        ("Starting", "Event: Starting kubelet."),
        (
            "Pulled",
            // The message Go-quoted: its own quotes escaped.
            "Event: Container image \\\"localhost/oxlet/busybox:1\\\" already present on machine",
        ),
        ("Created", "Event: Created container: main"),
        ("Started", "Event: Started container main"),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = ox.log();
        let missing: Vec<_> = want
            .iter()
            .filter(|(reason, message)| {
                let reason = format!("reason=\"{reason}\"");
                !log.lines()
                    .any(|l| l.contains(&reason) && l.contains(message))
            })
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "missing {missing:?} in\n{}",
            tail(&log, 60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = ox.log();
    let started = log
        .lines()
        .find(|l| l.contains("Event: Started container main"))
        .unwrap();
    assert!(started.contains("podUID=\""), "{started}");
    assert!(
        started.contains("fieldPath=\"spec.containers{main}\""),
        "{started}"
    );
}
