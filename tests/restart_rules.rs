//! Container restart rules (ContainerRestartRules, beta and on by default in 1.35)
//! on a real containerd, for a static pod and an apiserver pod side by side: a
//! container's own `restartPolicy` overrides the pod's, and `restartPolicyRules`
//! restart it on the exit codes they list; the phase follows, and the apiserver
//! takes the statuses.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::Api;

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "testnode";

/// Exits 42 the first time and 0 after (the emptyDir outlives the container).
const RETRY_ONCE: &str = "if [ -f /data/ran ]; then exit 0; fi; touch /data/ran; exit 42";

fn container(name: &str, script: &str, own: Option<&str>, codes: &[i32]) -> serde_json::Value {
    let mut c = serde_json::json!({
        "name": name, "image": "localhost/oxlet/busybox:1",
        "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    if let Some(own) = own {
        c["restartPolicy"] = own.into();
    }
    if !codes.is_empty() {
        c["restartPolicyRules"] = serde_json::json!([
            {"action": "Restart", "exitCodes": {"operator": "In", "values": codes}}
        ]);
    }
    c
}

/// A pod under `policy` with `containers`, bound to the node when `node` is set.
fn pod(name: &str, policy: &str, node: Option<&str>, containers: Vec<serde_json::Value>) -> Pod {
    let mut p = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1, "restartPolicy": policy,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": containers,
        },
    });
    if let Some(node) = node {
        p["spec"]["nodeName"] = node.into();
    }
    serde_json::from_value(p).unwrap()
}

/// An Always pod: `main` runs on; `once` (its own Never) exits 3 and stays exited;
/// `retry` (Never, with a rule restarting it on 42) exits 42, runs again, exits 0.
fn mixed(name: &str, node: Option<&str>) -> Pod {
    pod(
        name,
        "Always",
        node,
        vec![
            container("main", "sleep 3600", None, &[]),
            container("once", "exit 3", Some("Never"), &[]),
            container("retry", RETRY_ONCE, Some("Never"), &[42]),
        ],
    )
}

/// A Never pod whose one container is restarted on 42 only: it ends Succeeded.
fn job(name: &str, node: Option<&str>) -> Pod {
    pod(
        name,
        "Never",
        node,
        vec![container("job", RETRY_ONCE, Some("Never"), &[42])],
    )
}

fn terminated_with(s: Option<&ContainerStatus>, code: i32, restarts: i32) -> bool {
    s.is_some_and(|s| {
        s.restart_count == restarts
            && (s.state.as_ref())
                .and_then(|st| st.terminated.as_ref())
                .is_some_and(|t| t.exit_code == code)
    })
}

/// Whether `p` shows what `mixed` should settle into.
fn mixed_settled(p: &Pod) -> bool {
    phase(p) == "Running"
        && container_status(p, "main")
            .and_then(|s| s.state.as_ref())
            .is_some_and(|s| s.running.is_some())
        && terminated_with(container_status(p, "once"), 3, 0)
        && terminated_with(container_status(p, "retry"), 0, 1)
}

fn job_done(p: &Pod) -> bool {
    phase(p) == "Succeeded" && terminated_with(container_status(p, "job"), 0, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_restart_by_their_own_policy_and_rules() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let api: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    for (file, p) in [
        ("mixed.json", mixed("mixed", None)),
        ("job.json", job("job", None)),
    ] {
        write_manifest(&ox.manifests, file, &serde_json::to_string(&p).unwrap());
    }
    server.put(&mixed("api-mixed", Some(NODE))).unwrap();
    server.put(&job("api-job", Some(NODE))).unwrap();

    ox.wait_for("the static pods settled", WAIT, |pods| {
        let mixed = find(pods, "mixed").filter(|p| mixed_settled(p));
        let job = find(pods, "job").filter(|p| job_done(p));
        mixed.and(job).map(|_| ())
    })
    .await;
    ox.wait_for("the apiserver pods settled", WAIT, |pods| {
        let mixed = named(pods, "api-mixed").filter(|p| mixed_settled(p));
        let job = named(pods, "api-job").filter(|p| job_done(p));
        mixed.and(job).map(|_| ())
    })
    .await;
    // The apiserver took the statuses (its status checks refuse a terminated
    // container that comes back under a Never policy unless its rules allow it).
    let job = ox.wait_api_phase(&api, "api-job", "Succeeded", WAIT).await;
    assert!(job_done(&job), "{:?}", job.status);
    let t = std::time::Instant::now();
    loop {
        let p = api.get("api-mixed").await.unwrap();
        if mixed_settled(&p) {
            break;
        }
        assert!(t.elapsed() < WAIT, "api-mixed: {:?}", p.status);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Past the first back-off (10 s), nothing that should stay exited ran again.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let pods = ox.pods().await;
    for p in [find(&pods, "mixed"), named(&pods, "api-mixed")] {
        let p = p.expect("the mixed pods are still there");
        assert!(mixed_settled(p), "{:?}\n{}", p.status, tail(&ox.log(), 40));
    }
    for p in [find(&pods, "job"), named(&pods, "api-job")] {
        assert!(job_done(p.expect("the job pods are still there")));
    }
    let once = container_status(find(&pods, "mixed").unwrap(), "once").unwrap();
    let cs = cri_containers(&bed, &uid(find(&pods, "mixed").unwrap())).await;
    let once_instances = cs
        .iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "once"))
        .count();
    assert_eq!(
        (once.restart_count, once_instances),
        (0, 1),
        "the Never container ran once"
    );
}
