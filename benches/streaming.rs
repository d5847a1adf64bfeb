//! The secure port's streams against the same streams straight to the runtime's
//! streaming server, in one run on one containerd:
//!
//! - exec stdout throughput (256 MiB of zeros) and port-forward throughput (a 64 MiB
//!   file from an HTTP server in the pod), both over WebSocket channel streams;
//! - time to an exec's first byte (`echo x`), from the first connect: through oxlet
//!   (TLS, the upgrade, oxlet's CRI `Exec`) against the CRI `Exec` call plus the
//!   runtime's own upgrade;
//! - how long a line a container writes takes to reach a client following its log
//!   (the runtime's own timestamp of the line to its arrival).
//!
//! Direct and oxlet runs alternate, so drift hits both alike. Run: `cargo bench --bench
//! streaming` (as root, after the README's set-up). Prints a table and writes
//! `target/bench/streaming.json`. `OXLET_BENCH_QUICK=1` is a smoke run.

#[path = "../tests/agent/mod.rs"]
mod agent;
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use agent::secure::{ChannelSocket, Client};
use agent::*;
use common::Testbed;
use futures::{SinkExt as _, StreamExt as _};
use k8s_cri::v1 as cri;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

const START: Duration = Duration::from_secs(60);
const EXEC_BYTES: u64 = 256 << 20;
const FILE_BYTES: u64 = 64 << 20;

struct Plan {
    throughput_reps: usize,
    first_byte_reps: usize,
    follow_lines: usize,
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * p).round() as usize]
}

/// A channel WebSocket to the runtime's own streaming URL (plain HTTP, as it serves).
async fn direct_socket(url: &str) -> WebSocketStream<tokio::net::TcpStream> {
    let ws_url = url.replacen("http://", "ws://", 1);
    let mut req = ws_url.as_str().into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    let host = req.uri().authority().unwrap().as_str().to_string();
    let tcp = tokio::net::TcpStream::connect(host).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("runtime upgrade")
        .0
}

/// Reads channel `data_channel` until `want` bytes came (or the stream ends); the
/// first frame of a port-forward channel (the port) is skipped. Returns the bytes
/// and the time to the first data byte.
async fn drain<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    data_channel: u8,
    want: u64,
    skip_port: bool,
    started: Instant,
) -> (u64, Duration) {
    let mut got = 0u64;
    let mut first = None;
    let mut skipped = !skip_port;
    while got < want {
        let Some(Ok(msg)) = ws.next().await else {
            break;
        };
        let Message::Binary(data) = msg else { continue };
        let Some((&ch, rest)) = data.split_first() else {
            continue;
        };
        if ch != data_channel || rest.is_empty() {
            continue;
        }
        if !skipped {
            skipped = true;
            continue;
        }
        first.get_or_insert_with(|| started.elapsed());
        got += rest.len() as u64;
    }
    (got, first.unwrap_or_default())
}

/// The running container's and ready sandbox's IDs of the pod named `name`.
async fn ids(bed: &Testbed, ox: &Oxlet, name: &str) -> (String, String) {
    let pod = ox.wait_running(name, START).await;
    let uid = uid(&pod);
    let c = (cri_containers(bed, &uid).await.into_iter())
        .find(|c| c.state == RUNNING)
        .unwrap()
        .id;
    let s = cri_sandboxes(bed, &uid)
        .await
        .into_iter()
        .next()
        .unwrap()
        .id;
    (c, s)
}

fn exec_query(cmd: &[&str]) -> String {
    let mut q: Vec<String> = cmd
        .iter()
        .map(|c| format!("command={}", agent::secure::percent(c)))
        .collect();
    q.push("output=1".into());
    q.join("&")
}

async fn direct_exec_url(bed: &Testbed, container: &str, cmd: &[&str]) -> String {
    let mut c = bed.cri().await;
    let req = cri::ExecRequest {
        container_id: container.to_string(),
        cmd: cmd.iter().map(ToString::to_string).collect(),
        stdout: true,
        ..Default::default()
    };
    c.exec(req).await.unwrap().into_inner().url
}

async fn direct_port_forward_url(bed: &Testbed, sandbox: &str) -> String {
    let mut c = bed.cri().await;
    let req = cri::PortForwardRequest {
        pod_sandbox_id: sandbox.to_string(),
        port: vec![8080],
    };
    let url = c.port_forward(req).await.unwrap().into_inner().url;
    format!("{url}?port=8080")
}

/// MiB/s of one exec of `head -c EXEC_BYTES /dev/zero`, through oxlet or direct.
async fn exec_throughput(bed: &Testbed, client: &Client, container: &str, via_oxlet: bool) -> f64 {
    let n = EXEC_BYTES.to_string();
    let cmd = ["head", "-c", n.as_str(), "/dev/zero"];
    let t = Instant::now();
    let got = if via_oxlet {
        let mut ws: ChannelSocket = agent::secure::channel_socket(
            client,
            &format!("/exec/default/src-testnode/main?{}", exec_query(&cmd)),
        )
        .await;
        drain(&mut ws, 1, EXEC_BYTES, false, t).await.0
    } else {
        let url = direct_exec_url(bed, container, &cmd).await;
        let mut ws = direct_socket(&url).await;
        drain(&mut ws, 1, EXEC_BYTES, false, t).await.0
    };
    assert_eq!(got, EXEC_BYTES);
    got as f64 / f64::from(1 << 20) / t.elapsed().as_secs_f64()
}

/// MiB/s of one GET of the pod's big file through port-forward.
async fn port_forward_throughput(
    bed: &Testbed,
    client: &Client,
    sandbox: &str,
    via_oxlet: bool,
) -> f64 {
    let request = Message::Binary({
        let mut f = vec![0u8];
        f.extend_from_slice(b"GET /big HTTP/1.0\r\n\r\n");
        f.into()
    });
    let t = Instant::now();
    let got = if via_oxlet {
        let mut ws =
            agent::secure::channel_socket(client, "/portForward/default/src-testnode?port=8080")
                .await;
        ws.send(request).await.unwrap();
        drain(&mut ws, 0, FILE_BYTES, true, t).await.0
    } else {
        let url = direct_port_forward_url(bed, sandbox).await;
        let mut ws = direct_socket(&url).await;
        ws.send(request).await.unwrap();
        drain(&mut ws, 0, FILE_BYTES, true, t).await.0
    };
    assert!(got >= FILE_BYTES, "{got}");
    got as f64 / f64::from(1 << 20) / t.elapsed().as_secs_f64()
}

/// Milliseconds from the first connect to the first byte of `echo x`.
async fn first_byte(bed: &Testbed, client: &Client, container: &str, via_oxlet: bool) -> f64 {
    let cmd = ["echo", "x"];
    let t = Instant::now();
    let at = if via_oxlet {
        let mut ws = agent::secure::channel_socket(
            client,
            &format!("/exec/default/src-testnode/main?{}", exec_query(&cmd)),
        )
        .await;
        drain(&mut ws, 1, 1, false, t).await.1
    } else {
        let url = direct_exec_url(bed, container, &cmd).await;
        let mut ws = direct_socket(&url).await;
        drain(&mut ws, 1, 1, false, t).await.1
    };
    at.as_secs_f64() * 1000.0
}

/// Milliseconds from each line's runtime timestamp to its arrival at a follower.
async fn follow_latencies(client: &Client, lines: usize) -> Vec<f64> {
    let mut s = client.connect().await.unwrap();
    s.write_all(
        b"GET /containerLogs/default/ticker-testnode/main?follow=true&timestamps=true&tailLines=0 HTTP/1.0\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut buf = [0u8; 8192];
    let mut in_body = false;
    while out.len() < lines {
        let n = tokio::io::AsyncReadExt::read(&mut s, &mut buf)
            .await
            .unwrap();
        assert!(n > 0, "the followed log ended");
        let now = jiff::Timestamp::now();
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        if !in_body {
            let Some(at) = pending.find("\r\n\r\n") else {
                continue;
            };
            pending.drain(..at + 4);
            in_body = true;
        }
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Some(ts) = line
                .split(' ')
                .next()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            {
                out.push((now - ts).total(jiff::Unit::Millisecond).unwrap_or(0.0));
            }
        }
    }
    out
}

fn main() {
    let quick = std::env::var("OXLET_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let plan = Plan {
        throughput_reps: if quick { 1 } else { 5 },
        first_byte_reps: if quick { 5 } else { 40 },
        follow_lines: if quick { 50 } else { 500 },
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(plan));
}

async fn run(plan: Plan) {
    let bed = Testbed::start().await;
    let port = free_port();
    let ox = Oxlet::start(
        &bed,
        &[
            &format!("--port={port}"),
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            "-v=0",
        ],
    );
    let src = "mkdir -p /www && head -c 67108864 /dev/zero > /www/big && httpd -f -p 8080 -h /www";
    write_manifest(&ox.manifests, "src.yaml", &pod_yaml("src", src, ""));
    let ticker = "while true; do echo tick; usleep 20000; done";
    write_manifest(
        &ox.manifests,
        "ticker.yaml",
        &pod_yaml("ticker", ticker, ""),
    );
    let (container, sandbox) = ids(&bed, &ox, "src").await;
    ox.wait_running("ticker", START).await;
    let client = Client::new(&ox, port, None);
    agent::secure::wait_serving(&client).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (mut ex_o, mut ex_d, mut pf_o, mut pf_d, mut fb_o, mut fb_d) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..plan.throughput_reps {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for via in order {
            let e = exec_throughput(&bed, &client, &container, via).await;
            let p = port_forward_throughput(&bed, &client, &sandbox, via).await;
            if via {
                (ex_o.push(e), pf_o.push(p))
            } else {
                (ex_d.push(e), pf_d.push(p))
            };
        }
    }
    for i in 0..plan.first_byte_reps {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for via in order {
            let ms = first_byte(&bed, &client, &container, via).await;
            if via { fb_o.push(ms) } else { fb_d.push(ms) }
        }
    }
    let follow = follow_latencies(&client, plan.follow_lines).await;

    let m = |v: &[f64]| pct(v, 0.5);
    println!(
        "\n## Streams through the secure port against the runtime's own (one run, alternating)\n"
    );
    println!("| measure | through oxlet p50 | direct p50 | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| exec stdout, MiB/s ({} × 256 MiB) | {:.0} | {:.0} | {:.2} |",
        plan.throughput_reps,
        m(&ex_o),
        m(&ex_d),
        m(&ex_o) / m(&ex_d)
    );
    println!(
        "| port-forward, MiB/s ({} × 64 MiB) | {:.0} | {:.0} | {:.2} |",
        plan.throughput_reps,
        m(&pf_o),
        m(&pf_d),
        m(&pf_o) / m(&pf_d)
    );
    println!(
        "| exec first byte, ms ({}) | {:.1} | {:.1} | {:.2} |",
        plan.first_byte_reps,
        m(&fb_o),
        m(&fb_d),
        m(&fb_o) / m(&fb_d)
    );
    println!(
        "\nfollowed log, line written → client ({} lines): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        follow.len(),
        pct(&follow, 0.5),
        pct(&follow, 0.99),
        pct(&follow, 1.0)
    );
    let report = serde_json::json!({
        "exec_mib_s": {"oxlet": ex_o, "direct": ex_d},
        "port_forward_mib_s": {"oxlet": pf_o, "direct": pf_d},
        "exec_first_byte_ms": {"oxlet": fb_o, "direct": fb_d},
        "follow_latency_ms": {"p50": pct(&follow, 0.5), "p99": pct(&follow, 0.99), "max": pct(&follow, 1.0)},
    });
    std::fs::create_dir_all("target/bench").unwrap();
    std::fs::write(
        "target/bench/streaming.json",
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .unwrap();
    drop(ox);
}
