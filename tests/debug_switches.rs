//! kubelet's switches on a real node: a `KubeletConfiguration` with
//! `enableDebuggingHandlers: false` turns exec, attach, port-forward, run, the logs
//! and `/runningpods/` into kubelet's disabled answer on the secure port (after
//! authentication, as kubelet's filters run first), while the pods, stats and health
//! stay served; and the example's way of running (flags alone) warns when exec is
//! open to anonymous users off loopback, and keeps the ports to loopback with
//! `--address=127.0.0.1`, as `scripts/run-example.sh` runs it.

mod agent;
mod common;

use std::time::Duration;

use agent::secure::*;
use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);
const DISABLED: &str = "Debug endpoints are disabled.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debugging_handlers_off_answer_as_kubelet_and_the_api_stays() {
    let bed = Testbed::start().await;
    let ca = Ca::new("switches-ca");
    let ca_file = bed.base_dir().join("client-ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let config = bed.base_dir().join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         enableDebuggingHandlers: false\n\
         authentication:\n  webhook:\n    enabled: false\n\
         authorization:\n  mode: AlwaysAllow\n",
    )
    .unwrap();
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--config={}", config.display()),
            &format!("--client-ca-file={}", ca_file.display()),
        ],
    );
    ox.wait_up(START).await;
    let alice = ca.client("alice", &[]);
    let client = Client::new(&ox, port, Some(&alice));
    wait_serving(&client).await;
    write_manifest(
        &ox.manifests,
        "idle.yaml",
        &pod_yaml("idle", "sleep 3600", ""),
    );
    ox.wait_running("idle", START).await;
    let pod = "idle-testnode";

    let (_, configz) = client.get("/configz").await;
    assert!(!configz.contains("kubeletconfig"), "{configz}");
    for (method, path) in [
        (
            "GET",
            format!("/exec/default/{pod}/main?command=ls&output=1"),
        ),
        (
            "POST",
            format!("/exec/default/{pod}/main?command=ls&output=1"),
        ),
        ("POST", format!("/attach/default/{pod}/main?output=1")),
        ("POST", format!("/portForward/default/{pod}")),
        ("POST", format!("/run/default/{pod}/main?cmd=ls")),
        ("GET", format!("/containerLogs/default/{pod}/main")),
        ("GET", "/logs/".to_string()),
        ("GET", "/runningpods/".to_string()),
        ("GET", "/debug/pprof/heap".to_string()),
    ] {
        let (code, body) = client.request(method, &path, "").await.unwrap();
        assert_eq!((code, body.as_str()), (405, DISABLED), "{method} {path}");
    }
    // Not installed at all with the debugging handlers off, as on kubelet.
    for (method, path) in [
        ("GET", "/configz".to_string()),
        ("GET", "/statusz".to_string()),
        ("GET", "/flagz".to_string()),
        ("PUT", "/debug/flags/v".to_string()),
        ("POST", format!("/checkpoint/default/{pod}/main")),
    ] {
        let (code, body) = client.request(method, &path, "").await.unwrap();
        assert_eq!(
            (code, body.as_str()),
            (404, "404 page not found\n"),
            "{method} {path}"
        );
    }
    // Authentication still comes first: no certificate, no answer.
    let anonymous = Client::new(&ox, port, None);
    assert_eq!(
        anonymous
            .get(&format!("/exec/default/{pod}/main?command=ls"))
            .await,
        (401, "Unauthorized".to_string())
    );
    // The rest of the API is served.
    let (code, body) = client.get("/pods").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(pod), "{body}");
    assert_eq!(client.get("/healthz").await, (200, "ok".to_string()));
    assert_eq!(client.get("/stats/summary").await.0, 200);
    // The read-only port never serves them, as kubelet's.
    let (code, body) = ox
        .get(&format!("/containerLogs/default/{pod}/main"))
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (405, DISABLED));
    assert_eq!(ox.get("/pods").await.unwrap().0, 200);
}

/// An address of this machine other than loopback: the source address the kernel
/// picks for a route out (a UDP connect sends nothing).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
}

const WARNING: &str =
    "serves exec, attach, port-forward and run to anonymous users on a non-loopback address";

/// Flags alone (kubelet's defaults) on 0.0.0.0: the secure port takes anyone, and
/// the start says so; with run-example's `--address=127.0.0.1` no other address
/// reaches either API port, and nothing is warned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_exec_off_loopback_is_warned_and_the_example_stays_on_loopback() {
    let bed = Testbed::start().await;
    let outside = non_loopback_ip().expect("this machine has an address besides loopback");
    {
        let (ox, port) = start_secure(&bed, &[]);
        ox.wait_up(START).await;
        wait_serving(&Client::new(&ox, port, None)).await;
        let log = ox.log();
        let line = (log.lines())
            .find(|l| l.contains(WARNING))
            .unwrap_or_else(|| panic!("no warning:\n{}", tail(&log, 40)));
        // A warning (klog's `W` header, or the plain format's `WARN`).
        assert!(line.starts_with('W') || line.contains(" WARN "), "{line}");
        assert!(
            line.contains(&format!("addr=\"0.0.0.0:{port}\""))
                || line.contains(&format!("addr=0.0.0.0:{port}")),
            "{line}"
        );
        assert!(
            line.contains("authorizationMode=\"AlwaysAllow\"")
                || line.contains("authorizationMode=AlwaysAllow"),
            "{line}"
        );
        // Reachable from outside loopback: this is what the warning is about.
        assert!(
            tokio::net::TcpStream::connect((outside, port))
                .await
                .is_ok()
        );
    }
    let mut ox = Oxlet::in_dir(&bed.base_dir().join("example"), Some(bed.endpoint()));
    let port = free_port();
    ox.spawn(&[&format!("--port={port}"), "--address=127.0.0.1"]);
    ox.wait_up(START).await;
    wait_serving(&Client::new(&ox, port, None)).await;
    assert!(!ox.log().contains(WARNING), "{}", tail(&ox.log(), 40));
    for p in [port, ox.port] {
        let err = tokio::net::TcpStream::connect((outside, p))
            .await
            .unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "{outside}:{p}"
        );
    }
}
