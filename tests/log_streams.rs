//! Followed logs and streams cannot starve the node (issue 42), on a real containerd
//! through the secure port with TLS: a symlink or FIFO planted in a pod's log
//! directory is refused at once and never read; a quiet `kubectl logs -f` lives by
//! `streamingConnectionIdleTimeout`, not the connection's 90 s idle cut; and 600
//! followed logs from one client leave eviction and a static pod's update on time,
//! with no thread per stream.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::secure::*;
use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const START: Duration = Duration::from_secs(30);
const NODE: &str = "testnode";

/// The flags that open the secure port to the test's anonymous client.
const OPEN: [&str; 3] = [
    "--anonymous-auth=true",
    "--authorization-mode=AlwaysAllow",
    "--authentication-token-webhook=false",
];

/// The log directory of the static pod `name`'s container `main`.
async fn container_log_dir(ox: &Oxlet, name: &str) -> PathBuf {
    let pod = ox.wait_running(name, START).await;
    ox.logs
        .join(format!("default_{name}-{NODE}_{}", uid(&pod)))
        .join("main")
}

/// A GET with a deadline: (status, body), or None if no answer came in time.
async fn get_within(c: &Client, path: &str, within: Duration) -> Option<(u16, String)> {
    tokio::time::timeout(within, c.get(path)).await.ok()
}

/// A symlink to a file outside, a FIFO, and a symlinked container directory planted
/// where the container's log is: each request is answered with an error at once, and
/// the symlink's target is never read. On main the symlink was followed (the secret
/// served) and the FIFO held the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_and_fifos_in_the_log_dir_are_refused_at_once() {
    let bed = Testbed::start().await;
    let (ox, port) = start_secure(&bed, &OPEN);
    write_manifest(
        &ox.manifests,
        "quiet.yaml",
        &pod_yaml("quiet", "echo hello; sleep 3600", ""),
    );
    let dir = container_log_dir(&ox, "quiet").await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;
    let logs = "/containerLogs/default/quiet-testnode/main";
    let t = Instant::now();
    while c.get(logs).await != (200, "hello\n".to_string()) {
        assert!(t.elapsed() < START, "the log never said hello");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret = bed.base_dir().join("secret.log");
    std::fs::write(&secret, "2026-11-27T10:00:00Z stdout F SECRET\n").unwrap();
    let log = dir.join("0.log");
    let refused = async |what: &str, path: &str| {
        let (code, body) = get_within(&c, path, Duration::from_secs(3))
            .await
            .unwrap_or_else(|| panic!("{what}: no answer within 3s"));
        assert_eq!(code, 400, "{what}: {body}");
        assert!(
            !body.contains("SECRET"),
            "{what}: the target was read: {body}"
        );
        body
    };

    // A symlink in place of the log file.
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(&secret, &log).unwrap();
    let body = refused("symlink", logs).await;
    assert!(body.contains("symbolic link"), "{body}");
    refused("symlink, followed", &format!("{logs}?follow=true")).await;

    // A FIFO: nothing ever writes it, so opening or reading it would hang.
    std::fs::remove_file(&log).unwrap();
    mkfifo(&log);
    let body = refused("FIFO", logs).await;
    assert!(body.contains("FIFO"), "{body}");
    refused("FIFO, followed", &format!("{logs}?follow=true")).await;

    // The container's directory swapped for a symlink to one holding the secret.
    std::fs::remove_file(&log).unwrap();
    let elsewhere = bed.base_dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(&secret, elsewhere.join("0.log")).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    refused("symlinked directory", logs).await;
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Whether the stream is still open: nothing to read now, and no end of stream.
async fn still_open(s: &mut (impl tokio::io::AsyncRead + Unpin)) -> bool {
    let mut buf = [0u8; 256];
    match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
        Err(_) => true,
        Ok(Ok(n)) => n > 0,
        Ok(Err(_)) => false,
    }
}

/// `kubectl logs -f` on a container that says nothing after its first line: it
/// outlives the connection's 90 s idle cut and is closed once it has been quiet for
/// `streamingConnectionIdleTimeout` (100 s here), with the reason logged at `-v=2`.
/// On main it was cut at 90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_followed_log_lives_by_the_streaming_idle_timeout() {
    let bed = Testbed::start().await;
    let mut flags = OPEN.to_vec();
    flags.push("--streaming-connection-idle-timeout=100s");
    let (ox, port) = start_secure(&bed, &flags);
    write_manifest(
        &ox.manifests,
        "quiet.yaml",
        &pod_yaml("quiet", "echo hello; sleep 3600", ""),
    );
    ox.wait_running("quiet", START).await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;
    let logs = "/containerLogs/default/quiet-testnode/main";
    let mut s = c.connect().await.unwrap();
    s.write_all(format!("GET {logs}?follow=true HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "hello\n").await;
    let quiet_since = Instant::now();
    tokio::time::sleep(Duration::from_secs(95)).await;
    assert!(
        still_open(&mut s).await,
        "a quiet followed log was closed before streamingConnectionIdleTimeout"
    );
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await;
    let after = quiet_since.elapsed();
    assert!(ended.is_ok(), "still open after {after:?}");
    assert!(
        after >= Duration::from_secs(99) && after < Duration::from_secs(110),
        "closed after {after:?} of quiet"
    );
    let log = ox.log();
    assert!(
        log.contains("closing a stream idle for streamingConnectionIdleTimeout")
            && log.contains("stream=\"followed log\""),
        "{}",
        tail(&log, 30)
    );
}

/// Threads of the process `pid` (`/proc/<pid>/status`).
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// How long the filler pod `name` takes from its creation to its eviction.
async fn eviction_time(
    server: &testapi::TestApiServer,
    ox: &Oxlet,
    pods: &Api<Pod>,
    name: &str,
) -> Duration {
    let t = Instant::now();
    server.put(&empty_dir_filler(name, NODE)).unwrap();
    let evicted = ox
        .wait_api_phase(pods, name, "Failed", Duration::from_secs(60))
        .await;
    let took = t.elapsed();
    assert_eq!(evicted.status.unwrap().reason.as_deref(), Some("Evicted"));
    took
}

/// How long a static pod's manifest edit takes to run the new version (its
/// container saying `version`).
async fn static_update_time(ox: &Oxlet, version: u32) -> Duration {
    let t = Instant::now();
    let script = format!("echo v{version}; sleep 3600");
    write_manifest(
        &ox.manifests,
        "static.yaml",
        &pod_yaml("static", &script, ""),
    );
    let want = format!("v{version}");
    ox.wait_for(
        "the static pod's new version running",
        Duration::from_secs(60),
        |pods| {
            let p = find(pods, "static")?;
            let c = &p.spec.as_ref()?.containers[0];
            let runs = c.command.as_ref()?.iter().any(|a| a.contains(&want));
            (runs && is_running(p)).then_some(())
        },
    )
    .await;
    t.elapsed()
}

/// Opens a followed log and reads until its first line; the stream is kept.
async fn follow(c: &Client, path: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut s = c.connect().await.unwrap();
    s.write_all(
        format!("GET {path}?follow=true&tailLines=1 HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "tick").await;
    assert!(seen.starts_with("HTTP/1.0 200"), "{seen}");
    s
}

/// 600 followed logs of one container from one client: eviction and a static pod's
/// update take about as long as without them, oxlet's threads do not grow with
/// the streams, and every stream still carries the container's new lines. On main
/// each follow held a blocking-pool thread (at most 512), so the pool was full and
/// the volume stats eviction waits on never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_followed_logs_leave_eviction_and_static_pods_on_time() {
    const STREAMS: usize = 600;
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_VOLUME_STATS_PERIOD_MS".into(), "200".into()));
    ox.env
        .push(("OXLET_TEST_EVICTION_PERIOD_MS".into(), "200".into()));
    let port = free_port();
    // One authenticated client (a tenant with pods/log on its pod): the secure port
    // keeps anonymous connections to a small budget of their own.
    let ca = Ca::new("log-streams-ca");
    let ca_file = bed.base_dir().join("client-ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let tenant = ca.client("tenant", &[]);
    let mut flags = vec![
        format!("--kubeconfig={}", server.kubeconfig().display()),
        format!("--port={port}"),
        format!("--client-ca-file={}", ca_file.display()),
    ];
    flags.extend(OPEN.iter().map(ToString::to_string));
    ox.spawn(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    server
        .put(&api_pod(
            "ticker",
            NODE,
            "while true; do echo tick; sleep 1; done",
            1,
        ))
        .unwrap();
    ox.wait_api_running("ticker", START).await;
    let c = Client::new(&ox, port, Some(&tenant));
    wait_serving(&c).await;

    // Without streams.
    let static_before = static_update_time(&ox, 1).await;
    let evict_before = eviction_time(&server, &ox, &pods, "filler-a").await;
    let threads_before = threads(ox.pid());

    // With 600 followed logs open.
    let logs = "/containerLogs/default/ticker/main";
    let t = Instant::now();
    let mut streams = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        streams.push(follow(&c, logs).await);
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "opening the streams took too long"
        );
    }
    let opened = t.elapsed();
    let threads_with = threads(ox.pid());
    let census = ox
        .debug_get("/debug/census")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    let static_with = static_update_time(&ox, 2).await;
    let evict_with = eviction_time(&server, &ox, &pods, "filler-b").await;

    // Every stream is still alive and carries the ticker's next line.
    for (i, s) in streams.iter_mut().enumerate() {
        let mut seen = String::new();
        read_until(s, &mut seen, "tick").await;
        assert!(i < STREAMS);
    }
    println!(
        "{STREAMS} followed logs opened in {opened:?}; threads {threads_before} -> {threads_with}; \
         static pod update {static_before:?} -> {static_with:?}; \
         eviction {evict_before:?} -> {evict_with:?}; census {census}"
    );
    assert!(
        threads_with <= threads_before + 8,
        "threads grew with the streams: {threads_before} -> {threads_with}"
    );
    let on_time = |before: Duration, with: Duration| with <= before * 2 + Duration::from_secs(3);
    assert!(
        on_time(static_before, static_with),
        "static pod update {static_before:?} -> {static_with:?}"
    );
    assert!(
        on_time(evict_before, evict_with),
        "eviction {evict_before:?} -> {evict_with:?}"
    );
    assert!(census.contains("\"server.followedLogs\":600"), "{census}");
}
