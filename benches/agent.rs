//! oxlet's benchmarks, each against a baseline measured in the same run on the same
//! containerd: pod start latency against two raw CRI floors (bare: minimal configs;
//! fair: oxlet's own requests replayed), batch start (30 and 105 pods), footprint at
//! rest (0/10/35/110 pods), PLEG relist cost, teardown, and the same for pods created
//! in a test apiserver (cluster mode).
//!
//! Run: `cargo bench --bench agent` (as root, after the README's set-up). Prints
//! tables and writes `target/bench/agent.json`. `OXLET_BENCH_WINDOW=<seconds>` sets
//! the at-rest windows (120 s); `OXLET_BENCH_QUICK=1` is a smoke run (few pods, 5 s
//! windows). `cargo bench --bench agent -- --against <binary or git rev>` runs that
//! build and this one alternately instead and prints their ratios; `-- --resize` times
//! in-place resizes through the test apiserver against a bare UpdateContainerResources;
//! `-- --runtimes` runs this build on each containerd release (exit to status, the
//! node at rest).

#[path = "agent/ablation.rs"]
mod ablation;
#[path = "agent/against.rs"]
mod against;
#[path = "../tests/agent/mod.rs"]
mod agent;
#[path = "agent/cluster.rs"]
mod cluster;
#[path = "../tests/common/mod.rs"]
mod common;
#[path = "agent/fair.rs"]
mod fair;
#[path = "agent/floor.rs"]
mod floor;
#[path = "agent/normal.rs"]
mod normal;
#[path = "agent/proxy.rs"]
mod proxy;
#[path = "agent/report.rs"]
mod report;
#[path = "agent/resize.rs"]
mod resize;
#[path = "agent/run.rs"]
mod run;
#[path = "agent/runtimes.rs"]
mod runtimes;
#[path = "agent/stats.rs"]
mod stats;

use std::time::Duration;

/// A container that exits on SIGTERM, so teardown measures oxlet, not grace periods.
const RESTING: &str = "trap 'exit 0' TERM; sleep 3600 & wait";
const WAIT: Duration = Duration::from_secs(300);
/// How often `/pods` is polled: gently, since a fast poller takes CPU from
/// containerd on 2 cores.
const POLL: Duration = Duration::from_millis(20);
const STARTUP_LINE: &str = "observed pod startup duration";

/// How much of everything: the full run, or a quick smoke run.
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) single_reps: usize,
    pub(crate) small_batch: usize,
    /// kubelet's density test size.
    pub(crate) density_batch: usize,
    /// The big at-rest window's pods: the batch plus 5 (110, kubelet's max-pods).
    pub(crate) rest_pods: usize,
    /// The other at-rest windows' pod counts (besides 0).
    pub(crate) other_rest: Vec<usize>,
    pub(crate) window: Duration,
    /// The wait before each at-rest window, so start-up work (the first volume
    /// measurement, the metric cache's first rounds) is over.
    pub(crate) settle: Duration,
    pub(crate) floor_concurrency: Vec<usize>,
    /// Cluster mode: single apiserver pods.
    pub(crate) api_reps: usize,
    /// `--resize`: resizes timed, each beside one bare `UpdateContainerResources`.
    pub(crate) resize_reps: usize,
    /// Rounds of the fair floor's ablation (every variant once a round).
    pub(crate) ablation_rounds: usize,
    /// `--against`: rounds of single pods per side, pods per round, and rounds of
    /// batch + at-rest window per side.
    pub(crate) ab_rounds: usize,
    pub(crate) ab_round_pods: usize,
    pub(crate) ab_rest_rounds: usize,
}

impl Plan {
    fn from_env() -> Plan {
        let quick = std::env::var("OXLET_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let window = std::env::var("OXLET_BENCH_WINDOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(if quick { 5 } else { 120 });
        let density_batch = if quick { 10 } else { 105 };
        Plan {
            quick,
            single_reps: if quick { 3 } else { 30 },
            small_batch: if quick { 5 } else { 30 },
            density_batch,
            rest_pods: density_batch + 5,
            other_rest: if quick { vec![5] } else { vec![35, 10] },
            window: Duration::from_secs(window),
            settle: Duration::from_secs(if quick { 2 } else { 10 }),
            floor_concurrency: if quick { vec![4, 8] } else { vec![4, 8, 16] },
            api_reps: if quick { 3 } else { 20 },
            resize_reps: if quick { 5 } else { 50 },
            ablation_rounds: if quick { 1 } else { 10 },
            ab_rounds: if quick { 2 } else { 4 },
            ab_round_pods: if quick { 2 } else { 10 },
            ab_rest_rounds: if quick { 1 } else { 2 },
        }
    }
}

/// Writes `target/bench/<file>`.
fn write_report(file: &str, report: &serde_json::Value) {
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join(file),
        serde_json::to_string_pretty(report).unwrap(),
    )
    .unwrap();
    eprintln!("bench: wrote {}", out.join(file).display());
}

/// The value of `--against X` or `--against=X`.
fn against_arg() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--against=")
            .map(str::to_string)
            .or_else(|| {
                (a == "--against")
                    .then(|| args.get(i + 1).cloned())
                    .flatten()
            })
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary
    // without it, and must not start a 15-minute benchmark.
    if !std::env::args().any(|a| a == "--bench") {
        println!("agent: benchmark; run it with `cargo bench --bench agent`");
        return;
    }
    let plan = Plan::from_env();
    if std::env::args().any(|a| a == "--runtimes") {
        return runtimes::run(&plan).await;
    }
    if std::env::args().any(|a| a == "--resize") {
        return resize::run(&plan).await;
    }
    match against_arg() {
        Some(other) => against::run(&plan, &other).await,
        None => normal::run(&plan).await,
    }
}
