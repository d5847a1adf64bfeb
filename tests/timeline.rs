//! Each pod's timeline (`/debug/pods/{namespace}/{name}/timeline`, `oxlet timeline`)
//! end to end: the real binary at `-v=0` on a real containerd and the test apiserver,
//! with a crash-looping static pod, a static pod whose liveness probe kills its
//! container, an API pod rejected at admission and an API pod evicted for its
//! emptyDir. Each story must carry its decisions with their causes and rooms, although
//! the log at `-v=0` shows none of those lines; a deleted pod's story stays readable.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::Value;

const NODE: &str = "testnode";

/// The entries of a pod's newest life, as the read-only port serves them.
async fn entries(ox: &Oxlet, pod: &str) -> Vec<Value> {
    let Some((200, body)) = ox.debug_get(&format!("/debug/pods/{pod}/timeline")).await else {
        return Vec::new();
    };
    let story: Value = serde_json::from_str(&body).unwrap();
    story["lives"]
        .as_array()
        .and_then(|l| l.last())
        .and_then(|l| l["entries"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// Waits until the story has an entry whose `what` contains `what` (and whose cause
/// contains `cause`); returns it.
async fn wait_entry(ox: &Oxlet, pod: &str, what: &str, cause: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = entries(ox, pod).await.into_iter().find(|e| {
            e["what"].as_str().is_some_and(|w| w.contains(what))
                && e["cause"].as_str().unwrap_or("").contains(cause)
        });
        if let Some(e) = found {
            return e;
        }
        if tokio::time::Instant::now() > deadline {
            let shown: Vec<String> = entries(ox, pod)
                .await
                .iter()
                .map(ToString::to_string)
                .collect();
            panic!(
                "{pod}: no entry {what:?} with cause {cause:?}; the story:\n{}",
                shown.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn room(e: &Value) -> &str {
    e["room"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pods_story_tells_its_decisions_with_their_causes() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_VOLUME_STATS_PERIOD_MS".into(), "200".into()));
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "200".into()));
    write_manifest(
        &ox.manifests,
        "crash.yaml",
        &pod_yaml("crash", "echo starting; sleep 1; exit 3", ""),
    );
    let probed = pod_yaml("probed", "sleep 3600", "").replace(
        "    command:",
        "    livenessProbe:\n      exec:\n        command: [\"cat\", \"/tmp/absent\"]\n      \
         periodSeconds: 1\n      failureThreshold: 2\n    command:",
    );
    write_manifest(&ox.manifests, "probed.yaml", &probed);
    ox.spawn(&[
        &format!("--kubeconfig={}", server.kubeconfig().display()),
        "-v=0",
    ]);
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");

    // A crash loop: the start, the exit with its code, the back-off with its cause.
    let crash = format!("default/crash-{NODE}");
    let e = wait_entry(
        &ox,
        &crash,
        "back-off 10s restarting failed container",
        "exited with code 3",
    )
    .await;
    assert_eq!(room(&e), "kuberuntime");
    let story = entries(&ox, &crash).await;
    let first = |what: &str| {
        story
            .iter()
            .find(|e| e["what"].as_str().is_some_and(|w| w.contains(what)))
            .unwrap_or_else(|| panic!("{crash}: no {what:?} in {story:#?}"))
    };
    assert_eq!(room(first("pod update from config")), "syncloop");
    assert_eq!(room(first("created pod cgroup")), "cm");
    assert_eq!(room(first("creating pod sandbox")), "kuberuntime");
    assert_eq!(room(first("started container")), "kuberuntime");
    let exited = first("container exited");
    assert_eq!(room(exited), "pleg");
    assert_eq!(exited["cause"], "Error");
    // Recorded events are in the story too, with their reason as the cause.
    let back_off = wait_entry(
        &ox,
        &crash,
        "Back-off restarting failed container",
        "BackOff",
    )
    .await;
    assert_eq!(room(&back_off), "events");

    // A liveness probe: the threshold crossed, with the probe's own output, then the kill.
    let probed = format!("default/probed-{NODE}");
    let e = wait_entry(
        &ox,
        &probed,
        "liveness probe failed 2 times in a row (failureThreshold 2)",
        "can't open '/tmp/absent'",
    )
    .await;
    assert_eq!(room(&e), "prober");
    let kill = wait_entry(&ox, &probed, "killing container", "failed liveness probe").await;
    assert_eq!(room(&kill), "kuberuntime");

    // Admission: more CPU than the node has.
    let mut greedy = api_pod("greedy", NODE, "sleep 3600", 1);
    greedy.spec.as_mut().unwrap().containers[0].resources =
        Some(serde_json::from_value(serde_json::json!({"requests": {"cpu": "1000"}})).unwrap());
    server.put(&greedy).unwrap();
    let e = wait_entry(
        &ox,
        "default/greedy",
        "pod rejected at admission",
        "OutOfcpu",
    )
    .await;
    assert_eq!(room(&e), "syncloop");
    assert_eq!(e["severity"], "warning");
    assert!(
        e["what"].as_str().unwrap().contains("requested: 1000000"),
        "the numbers are in the sentence: {e}"
    );

    // Eviction: an emptyDir over its sizeLimit.
    server.put(&empty_dir_filler("filler", NODE)).unwrap();
    let e = wait_entry(
        &ox,
        "default/filler",
        "evicting pod over its local storage limit",
        "exceeds the limit \"1Mi\"",
    )
    .await;
    assert_eq!(room(&e), "eviction");
    wait_entry(&ox, "default/filler", "terminating pod within", "evicted").await;
    wait_entry(
        &ox,
        "default/filler",
        "pod's containers stopped after",
        "evicted",
    )
    .await;
    ox.wait_api_phase(&pods, "filler", "Failed", Duration::from_secs(30))
        .await;
    wait_entry(
        &ox,
        "default/filler",
        "pod status written to the apiserver (phase Failed",
        "",
    )
    .await;

    // -v=0 logs none of these decisions; the timelines have them all the same.
    let log = ox.log();
    assert!(
        !log.contains("back-off 10s restarting failed container")
            && !log.contains("liveness probe failed"),
        "-v=0 shows no -v=2 line:\n{}",
        tail(&log, 40)
    );

    // The command prints the story for a person.
    let text = ox.timeline(&probed);
    assert!(text.starts_with(&format!("pod {probed}  uid ")), "{text}");
    assert!(
        text.lines().any(|l| l.contains(" prober ")
            && l.contains("liveness probe failed 2 times")
            && l.contains("[cause: cat: can't open '/tmp/absent'")),
        "{text}"
    );

    // A deleted pod's story stays, marked gone, so its end can be read.
    std::fs::remove_file(ox.manifests.join("crash.yaml")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = ox
            .debug_get(&format!("/debug/pods/{crash}/timeline"))
            .await
            .unwrap();
        assert_eq!(code, 200, "{body}");
        let story: Value = serde_json::from_str(&body).unwrap();
        if story["lives"][0]["goneAt"].is_string() {
            let text = body.as_str();
            assert!(
                text.contains("removed from config"),
                "the kill's cause: {text}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never marked gone: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A pod never seen has no story.
    let (code, body) = ox
        .debug_get("/debug/pods/default/never-was/timeline")
        .await
        .unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("no timeline for pod default/never-was"),
        "{body}"
    );
}
