//! The secure port's front door under load, on loopback only and bounded in count and
//! time: a flood of silent connects does not lock out an authenticated client's exec,
//! and a flood of random bearer tokens does not slow the pod status writes.

mod agent;
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent::secure::*;
use agent::*;
use common::Testbed;
use futures::StreamExt as _;
use tokio_tungstenite::tungstenite::Message;

const START: Duration = Duration::from_secs(30);

/// The flood: this many connects a second, for this long, each held silent for
/// `HOLD` (longer than oxlet's 5 s handshake timeout would need to pile them up past
/// a cap taken before TLS).
const FLOOD_RATE: u64 = 2_000;
const FLOOD_FOR: Duration = Duration::from_secs(10);
const HOLD: Duration = Duration::from_secs(3);

/// Connects to `to` from `from` at [`FLOOD_RATE`] for [`FLOOD_FOR`], sending nothing,
/// each socket dropped after [`HOLD`]. Returns how many connects succeeded.
async fn silent_flood(from: std::net::IpAddr, to: SocketAddr) -> u64 {
    let made = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut held = std::collections::VecDeque::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = FLOOD_RATE / 100;
    let mut pending = tokio::task::JoinSet::new();
    while start.elapsed() < FLOOD_FOR {
        tick.tick().await;
        for _ in 0..per_tick {
            let made = made.clone();
            pending.spawn(async move {
                let socket = tokio::net::TcpSocket::new_v4().ok()?;
                socket.bind(SocketAddr::new(from, 0)).ok()?;
                let s = tokio::time::timeout(Duration::from_millis(500), socket.connect(to))
                    .await
                    .ok()?
                    .ok()?;
                made.fetch_add(1, Ordering::Relaxed);
                Some(s)
            });
        }
        while let Some(done) = pending.try_join_next() {
            if let Ok(Some(s)) = done {
                held.push_back((Instant::now(), s));
            }
        }
        while held.front().is_some_and(|(t, _)| t.elapsed() > HOLD) {
            held.pop_front();
        }
    }
    pending.abort_all();
    made.load(Ordering::Relaxed)
}

/// How long an exec over the WebSocket channel protocol takes to open (the 101) and
/// to bring its output.
async fn timed_exec(client: &Client, pod: &str) -> (Duration, Duration) {
    let t = Instant::now();
    let mut ws = channel_socket(
        client,
        &format!("/exec/default/{pod}/main?command=echo&command=hi&output=1"),
    )
    .await;
    let opened = t.elapsed();
    let mut out = String::new();
    while let Some(Ok(msg)) = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("the exec's output")
    {
        if let Message::Binary(data) = msg
            && data.first() == Some(&1)
        {
            out.push_str(&String::from_utf8_lossy(&data[1..]));
        }
    }
    assert_eq!(out, "hi\n");
    (opened, t.elapsed())
}

/// 2,000 silent connects a second for 10 s from 127.0.0.2, while a client with a
/// trusted certificate on 127.0.0.1 opens an exec every quarter second: each opens
/// within 1 s. With one cap taken before TLS, the silent ones filled it and closed
/// the exec's connections at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connects_do_not_lock_out_an_authenticated_exec() {
    let bed = Testbed::start().await;
    let ca = Ca::new("front-door-ca");
    let ca_file = bed.base_dir().join("client-ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--client-ca-file={}", ca_file.display()),
            "--anonymous-auth=false",
        ],
    );
    write_manifest(
        &ox.manifests,
        "idle.yaml",
        &pod_yaml("idle", "sleep 3600", ""),
    );
    ox.wait_running("idle", START).await;
    let admin = ca.client("system:kube-apiserver", &[]);
    let client = Client::new(&ox, port, Some(&admin));
    wait_serving(&client).await;
    let (quiet, _) = timed_exec(&client, "idle-testnode").await;

    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let flood = tokio::spawn(silent_flood([127, 0, 0, 2].into(), to));
    let mut opens = Vec::new();
    let t = Instant::now();
    // Let the flood build up first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    while t.elapsed() < FLOOD_FOR - Duration::from_millis(500) {
        let exec =
            tokio::time::timeout(Duration::from_secs(5), timed_exec(&client, "idle-testnode"));
        let (opened, whole) = exec.await.expect("an exec during the flood never opened");
        opens.push((opened, whole));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let made = flood.await.unwrap();
    let mut open: Vec<Duration> = opens.iter().map(|o| o.0).collect();
    open.sort();
    let worst = *open.last().unwrap();
    eprintln!(
        "flood: {made} silent connects in {FLOOD_FOR:?} ({} a second); {} execs during it: \
         open median {:?}, worst {worst:?} (quiet: {quiet:?}); whole exec worst {:?}",
        made / FLOOD_FOR.as_secs(),
        open.len(),
        open[open.len() / 2],
        opens.iter().map(|o| o.1).max().unwrap(),
    );
    assert!(
        made >= FLOOD_RATE * FLOOD_FOR.as_secs() / 2,
        "the flood made only {made} connects"
    );
    assert!(
        worst < Duration::from_secs(1),
        "an exec took {worst:?} to open"
    );
    let (code, _) = client.get("/healthz").await;
    assert_eq!(code, 200);
}

/// Pod status writes (PATCHes of `…/status`) the apiserver saw in `window`.
fn status_writes(server: &testapi::TestApiServer, window: std::ops::Range<Instant>) -> usize {
    (server.requests().iter())
        .filter(|r| r.method == "PATCH" && r.path.ends_with("/status") && r.path.contains("/pods/"))
        .filter(|r| window.contains(&r.at))
        .count()
}

/// A static pod whose readiness flips every 2 s: a status write each time.
fn flapping(name: &str) -> String {
    format!(
        "{}    readinessProbe:\n      exec:\n        command: [\"cat\", \"/tmp/ready\"]\n      periodSeconds: 1\n      failureThreshold: 1\n",
        pod_yaml(
            name,
            "while true; do touch /tmp/ready; sleep 2; rm /tmp/ready; sleep 2; done",
            ""
        )
    )
}

/// Random bearer tokens for `for_` at most, `count` in all, `at_once` connections at
/// a time; each request is given up after 30 s. Returns how many were answered 401.
async fn token_flood(client: Arc<Client>, count: usize, at_once: usize, for_: Duration) -> usize {
    let gate = Arc::new(tokio::sync::Semaphore::new(at_once));
    let refused = Arc::new(AtomicU64::new(0));
    let mut all = tokio::task::JoinSet::new();
    for i in 0..count {
        let (client, gate, refused) = (client.clone(), gate.clone(), refused.clone());
        all.spawn(async move {
            let _turn = gate.acquire_owned().await;
            let header = format!(
                "Authorization: Bearer random-{i}-{}\r\n",
                std::process::id()
            );
            let answer = tokio::time::timeout(
                Duration::from_secs(30),
                client.request("GET", "/pods", &header),
            );
            if let Ok(Ok((401, _))) = answer.await {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let _ = tokio::time::timeout(for_, async { while all.join_next().await.is_some() {} }).await;
    all.abort_all();
    refused.load(Ordering::Relaxed) as usize
}

/// 1,000 random bearer tokens while four pods' readiness flips: the pod status writes
/// keep their rate, as the TokenReviews wait on their own client's rate limit. On the
/// node's main client the reviews took the status writes' turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_tokens_do_not_slow_the_status_writes() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--kubeconfig={}", server.kubeconfig().display()),
            "--authentication-token-webhook",
            "--authorization-mode=Webhook",
            "--anonymous-auth=false",
            "--kube-api-qps=10",
            "--kube-api-burst=10",
        ],
    );
    ox.wait_up(START).await;
    for i in 0..4 {
        let name = format!("flap{i}");
        write_manifest(&ox.manifests, &format!("{name}.yaml"), &flapping(&name));
    }
    for i in 0..4 {
        ox.wait_running(&format!("flap{i}"), START).await;
    }
    let client = Arc::new(Client::new(&ox, port, None));
    wait_serving(&client).await;
    let window = Duration::from_secs(10);
    // Settle, then the rate without a flood.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let quiet = status_writes(&server, t0..Instant::now());

    let reviews_before = (server.requests().iter())
        .filter(|r| r.path.ends_with("tokenreviews"))
        .count();
    let flood = tokio::spawn(token_flood(
        client.clone(),
        1_000,
        200,
        window + Duration::from_secs(2),
    ));
    let t1 = Instant::now();
    tokio::time::sleep(window).await;
    let during = status_writes(&server, t1..Instant::now());
    let refused = flood.await.unwrap();
    let reviews = (server.requests().iter())
        .filter(|r| r.path.ends_with("tokenreviews"))
        .count()
        - reviews_before;
    eprintln!(
        "status writes in {window:?}: {quiet} without a flood, {during} during 1000 random \
         tokens ({reviews} TokenReviews sent, {refused} requests answered 401 in the window)"
    );
    assert!(
        quiet >= 8,
        "the pods' readiness did not flip: {quiet} writes"
    );
    assert!(
        reviews >= 50,
        "the flood reached the apiserver only {reviews} times"
    );
    assert!(
        during * 2 >= quiet,
        "status writes fell from {quiet} to {during} during the token flood"
    );
}
