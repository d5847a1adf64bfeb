//! Probes end to end on a real containerd: liveness (exec, httpGet, tcpSocket) kills
//! and restarts once, then stays; a failing readiness probe keeps a pod unready and
//! never restarts it; a startup probe holds liveness back; a gRPC health probe
//! against a server this test runs on the host (hostNetwork pod).

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

const START: Duration = Duration::from_secs(30);

/// A pod whose container runs `first` on its first run and `later` after a restart
/// (an emptyDir remembers the first run), with `probes` on the container.
fn flaky_pod(name: &str, first: &str, later: &str, ports: &str, probes: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    emptyDir: {{}}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "if [ -f /data/ran ]; then {later}; else touch /data/ran; {first}; fi"]
    volumeMounts:
    - name: data
      mountPath: /data
{ports}{probes}"#
    )
}

fn cond(p: &Pod, kind: &str) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

/// Container `main`'s status, once the pod has one.
fn main_of(pods: &[Pod], name: &str) -> Option<ContainerStatus> {
    container_status(find(pods, name)?, "main").cloned()
}

/// Waits until `name` restarted once and is running and ready again; then checks it
/// stays that way for a few periods.
async fn restarted_once_then_stable(ox: &Oxlet, name: &str) {
    let c = ox
        .wait_for(&format!("{name} restarted once and ready"), START, |pods| {
            main_of(pods, name).filter(|c| {
                c.restart_count == 1
                    && c.ready
                    && c.state.as_ref().is_some_and(|s| s.running.is_some())
            })
        })
        .await;
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    assert!(
        last.is_some(),
        "{name}: lastState says it was killed: {c:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let pods = ox.pods().await;
    let now = main_of(&pods, name).unwrap();
    assert_eq!(now.restart_count, 1, "{name} stays up: {now:?}");
    assert_eq!(now.container_id, c.container_id, "{name}: same container");
    assert!(
        ox.log()
            .contains("Container main failed liveness probe, will be restarted"),
        "kubelet's kill message is logged:\n{}",
        tail(&ox.log(), 40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_http_and_tcp_liveness_restart_once_then_stay() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let liveness = |handler: &str| {
        format!(
            "    livenessProbe:\n{handler}      periodSeconds: 1\n      failureThreshold: 1\n      terminationGracePeriodSeconds: 1\n"
        )
    };
    write_manifest(
        &ox.manifests,
        "exec.yaml",
        &flaky_pod(
            "exec",
            "touch /tmp/healthy; sleep 2; rm /tmp/healthy; sleep 3600",
            "touch /tmp/healthy; sleep 3600",
            "",
            &liveness("      exec:\n        command: [\"cat\", \"/tmp/healthy\"]\n"),
        ),
    );
    write_manifest(
        &ox.manifests,
        "http.yaml",
        &flaky_pod(
            "http",
            "mkdir /www; echo ok > /www/healthz; httpd -p 8080 -h /www; sleep 2; rm /www/healthz; sleep 3600",
            "mkdir /www; echo ok > /www/healthz; httpd -f -p 8080 -h /www",
            "    ports:\n    - name: web\n      containerPort: 8080\n",
            &liveness(
                "      httpGet:\n        path: /healthz\n        port: web\n        httpHeaders:\n        - name: X-Probe\n          value: oxlet\n",
            ),
        ),
    );
    write_manifest(
        &ox.manifests,
        "tcp.yaml",
        &flaky_pod(
            "tcp",
            "nc -ll -p 9090 -e true & sleep 2; kill $!; sleep 3600",
            "nc -ll -p 9090 -e true",
            "",
            &liveness("      tcpSocket:\n        port: 9090\n"),
        ),
    );
    for name in ["exec", "http", "tcp"] {
        restarted_once_then_stable(&ox, name).await;
    }
    // Each handler failed for its own reason (the transition lines carry the output;
    // an exec probe's is the command's own, as kubelet's).
    let log = ox.log();
    for why in [
        "can't open '/tmp/healthy'", // busybox cat's own output
        "HTTP probe failed with statuscode: 404",
        "dial tcp",
    ] {
        assert!(
            log.lines().any(|l| l
                .contains("liveness probe failed 1 time in a row (failureThreshold 1)")
                && l.contains(why)),
            "a transition line says {why:?}:\n{}",
            tail(&log, 60)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_readiness_never_ready_never_restarted_and_startup_holds_liveness() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "unready.yaml",
        &format!(
            "{}    readinessProbe:\n      exec:\n        command: [\"cat\", \"/nonexistent\"]\n      periodSeconds: 1\n",
            pod_yaml("unready", "sleep 3600", "")
        ),
    );
    // Liveness alone would kill it at once (the file appears after 4 s); the startup
    // probe holds it back until the file is there.
    write_manifest(
        &ox.manifests,
        "slow.yaml",
        &format!(
            "{}    startupProbe:\n      exec:\n        command: [\"cat\", \"/tmp/up\"]\n      periodSeconds: 1\n      failureThreshold: 30\n    livenessProbe:\n      exec:\n        command: [\"cat\", \"/tmp/up\"]\n      periodSeconds: 1\n      failureThreshold: 1\n",
            pod_yaml("slow", "sleep 4; touch /tmp/up; sleep 3600", "")
        ),
    );
    let slow = ox.wait_running("slow", START).await;
    let c = container(&slow, "main");
    assert_eq!(
        (c.started, c.ready),
        (Some(false), false),
        "not started yet: {c:?}"
    );
    assert_eq!(cond(&slow, "Ready"), "False");
    let slow = ox
        .wait_for("slow started and ready", START, |pods| {
            find(pods, "slow")
                .filter(|p| container(p, "main").ready && cond(p, "Ready") == "True")
                .cloned()
        })
        .await;
    let c = container(&slow, "main");
    assert_eq!((c.started, c.restart_count), (Some(true), 0), "{c:?}");

    let unready = ox.wait_running("unready", START).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let pods = ox.pods().await;
    let p = find(&pods, "unready").unwrap();
    let c = container(p, "main");
    assert!(!c.ready && c.started == Some(true), "{c:?}");
    assert_eq!(c.restart_count, 0);
    assert_eq!(c.container_id, container(&unready, "main").container_id);
    assert_eq!(cond(p, "ContainersReady"), "False");
    assert_eq!(cond(p, "Ready"), "False");
    assert_eq!(phase(p), "Running");
    assert_eq!(main_of(&pods, "slow").unwrap().restart_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_probe_is_ready_only_while_serving() {
    use tonic_health::ServingStatus;
    let bed = Testbed::start().await;
    let port = free_port();
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], port));
    // The test's health server; aborted at the end, and gone with the test's runtime.
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve(addr),
    );
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "grpc.yaml",
        &format!(
            "{}    readinessProbe:\n      grpc:\n        port: {port}\n      periodSeconds: 1\n",
            pod_yaml("grpc", "sleep 3600", "  hostNetwork: true\n")
        ),
    );
    ox.wait_for("grpc ready", START, |pods| {
        find(pods, "grpc")
            .filter(|p| cond(p, "Ready") == "True")
            .cloned()
    })
    .await;
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    let p = ox
        .wait_for("grpc unready", START, |pods| {
            find(pods, "grpc")
                .filter(|p| cond(p, "Ready") == "False")
                .cloned()
        })
        .await;
    assert_eq!(container(&p, "main").restart_count, 0);
    server.abort();
}

/// After an oxlet restart, probing starts over from kubelet's initial results: the
/// running container is adopted (not restarted) and is ready again once its readiness
/// probe passes; liveness starts from Success, so nothing is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probing_starts_over_after_an_oxlet_restart_without_restarting_anything() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::start(&bed, &[]);
    let probe = |kind: &str| {
        format!("    {kind}:\n      exec:\n        command: [\"true\"]\n      periodSeconds: 1\n")
    };
    write_manifest(
        &ox.manifests,
        "kept.yaml",
        &format!(
            "{}{}{}",
            pod_yaml("kept", "sleep 3600", ""),
            probe("readinessProbe"),
            probe("livenessProbe")
        ),
    );
    let ready = |pods: &[Pod]| {
        find(pods, "kept")
            .filter(|p| cond(p, "Ready") == "True")
            .cloned()
    };
    let before = ox.wait_for("kept ready", START, ready).await;
    ox.kill9();
    ox.spawn(&[]);
    let after = ox
        .wait_for("kept ready after the restart", START, ready)
        .await;
    let (b, a) = (container(&before, "main"), container(&after, "main"));
    assert_eq!(a.container_id, b.container_id, "adopted, not restarted");
    assert_eq!(a.restart_count, 0);
    assert!(
        !ox.log().contains("failed liveness probe"),
        "{}",
        tail(&ox.log(), 40)
    );
}

/// A container that its liveness probe keeps killing backs off as kubelet's does:
/// its newest exited instance counts (kubelet's doBackOff), so after the second
/// restart it waits in CrashLoopBackOff instead of being restarted at once forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_killed_again_and_again_by_liveness_backs_off() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: livloop
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
    livenessProbe:
      exec:
        command: ["false"]
      periodSeconds: 1
      failureThreshold: 1
"#;
    write_manifest(&ox.manifests, "livloop.yaml", manifest);
    let (rc, msg) = ox
        .wait_for(
            "CrashLoopBackOff after liveness kills",
            Duration::from_secs(25),
            |pods| {
                let c = find(pods, "livloop")?
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?;
                let w = c.state.as_ref()?.waiting.as_ref()?;
                (w.reason.as_deref() == Some("CrashLoopBackOff"))
                    .then(|| (c.restart_count, w.message.clone().unwrap_or_default()))
            },
        )
        .await;
    assert!(rc >= 2, "restartCount {rc}");
    assert!(
        msg.starts_with(
            "back-off 10s restarting failed container=main pod=livloop-testnode_default("
        ),
        "{msg}"
    );
    // And it stays backed off for a while: no new restart in the next 5 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods = ox.pods().await;
    let c = container(find(&pods, "livloop").unwrap(), "main");
    assert_eq!(c.restart_count, rc, "restarted inside its back-off");
}
