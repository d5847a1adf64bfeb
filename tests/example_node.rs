//! The README's main job seen from another machine: oxlet runs with exactly the
//! arguments `scripts/run-example.sh` gives it (`--print-args`), on a real containerd,
//! with the example pods; a client in a second network namespace, linked to this
//! host by a veth pair the test makes, cannot reach exec (`/run`) nor either API port,
//! while the same request from this machine runs the command. Before the example kept
//! its ports to loopback, the same client ran commands in the pods as `system:anonymous`.

mod agent;
mod common;

use std::process::Command;
use std::time::Duration;

use agent::secure::*;
use agent::*;
use common::Testbed;

/// The veth pair's /30: the host's end and the namespace's end (RFC 2544's benchmark
/// range, which no real network on these machines uses).
const HOST_END: &str = "198.18.255.1";
const NS_END: &str = "198.18.255.2";

/// A network namespace with one veth link to the host, removed on drop (also when an
/// assertion fails).
struct OtherMachine {
    ns: String,
    host_link: String,
}

impl OtherMachine {
    fn new() -> OtherMachine {
        let id = std::process::id() % 100_000;
        let m = OtherMachine {
            ns: format!("oxlet-other-{id}"),
            host_link: format!("oxo{id}h"),
        };
        let peer = format!("oxo{id}n");
        ip(&["netns", "add", &m.ns]);
        ip(&[
            "link",
            "add",
            &m.host_link,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ]);
        ip(&["link", "set", &peer, "netns", &m.ns]);
        ip(&[
            "addr",
            "add",
            &format!("{HOST_END}/30"),
            "dev",
            &m.host_link,
        ]);
        ip(&["link", "set", &m.host_link, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &m.ns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&["addr", "add", &format!("{NS_END}/30"), "dev", &peer]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["link", "set", "lo", "up"]);
        m
    }

    /// Whether a TCP connect from the namespace to the host's end on `port` succeeds
    /// within 3 s (bash's /dev/tcp: no client to install).
    fn connects(&self, port: u16) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, "timeout", "3", "bash", "-c"])
            .arg(format!("exec 3<>/dev/tcp/{HOST_END}/{port}"))
            .status()
            .expect("running ip netns exec")
            .success()
    }

    /// What curl in the namespace gets for exec (`/run`) on the host's end: its exit
    /// code (7: could not connect) and the body, if any.
    fn run_command(&self, port: u16, pod: &str) -> (i32, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "curl", "-sk", "--max-time", "5"])
            .args(["-X", "POST"])
            .arg(format!(
                "https://{HOST_END}:{port}/run/default/{pod}/httpd?cmd=ls%20/"
            ))
            .output()
            .expect("running curl in the namespace");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

impl Drop for OtherMachine {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "delete", &self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.ns])
            .status();
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("running ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

/// The arguments `scripts/run-example.sh` runs oxlet with, less the manifest
/// directory, which the test bed's oxlet gets as a copy of the example's.
fn example_args() -> Vec<String> {
    let out = Command::new("bash")
        .args(["scripts/run-example.sh", "--print-args"])
        .output()
        .expect("running run-example.sh --print-args");
    assert!(out.status.success(), "run-example.sh --print-args failed");
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let mut args = Vec::new();
    let mut it = all.into_iter();
    while let Some(a) = it.next() {
        if a == "--pod-manifest-path" {
            it.next();
        } else if !a.starts_with("--pod-manifest-path=") {
            args.push(a);
        }
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_node_refuses_exec_to_another_machine() {
    let args = example_args();
    assert!(
        args.iter().any(|a| a.starts_with("--address=")),
        "run-example.sh sets no --address: {args:?}"
    );
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    for entry in std::fs::read_dir("examples/manifests").unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, ox.manifests.join(path.file_name().unwrap())).unwrap();
    }
    let port = free_port();
    let mut extra: Vec<&str> = args.iter().map(String::as_str).collect();
    let port_flag = format!("--port={port}");
    extra.push(&port_flag);
    ox.spawn(&extra);
    ox.wait_up(Duration::from_secs(30)).await;
    ox.wait_running("web", Duration::from_secs(60)).await;

    // From this machine, exec runs: the example's node serves it to loopback.
    let (code, body) = Client::new(&ox, port, None)
        .request("POST", "/run/default/web-testnode/httpd?cmd=ls%20/", "")
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("bin"), "{body}");

    // The other machine reaches this host: a listener on every address answers it.
    let other = OtherMachine::new();
    let open = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let open_port = open.local_addr().unwrap().port();
    assert!(
        other.connects(open_port),
        "the namespace cannot reach the host at all; the test would prove nothing"
    );
    // But neither API port, and exec least of all.
    for p in [port, ox.port] {
        assert!(
            !other.connects(p),
            "port {p} is reachable from another machine"
        );
    }
    let (curl, body) = other.run_command(port, "web-testnode");
    assert_eq!(curl, 7, "curl did not fail to connect: {body}");
    assert!(body.is_empty(), "{body}");
}
