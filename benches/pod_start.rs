//! Pod start latency: oxlet against the raw CRI floor, measured in one run on one
//! containerd. Run with `cargo bench --bench pod_start` (as root, after the README's
//! set-up). Prints a table and writes `target/bench/pod_start.json`.

#[path = "../tests/agent/mod.rs"]
mod agent;
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::{Testbed, busybox_container};
use k8s_cri::v1 as cri;

const SINGLE_REPS: usize = 20;
const BATCH: usize = 30;
const FLOOR_IN_FLIGHT: usize = 8;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One pod straight through the CRI: RunPodSandbox + CreateContainer + StartContainer.
async fn floor_pod(bed: &Testbed, name: &str) -> Duration {
    let mut c = bed.cri().await;
    let t = Instant::now();
    let cfg = bed.sandbox_config(name, false);
    let sb = c
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(cfg.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let id = c
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: sb,
            config: Some(busybox_container("main", &["sleep", "3600"])),
            sandbox_config: Some(cfg),
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    c.start_container(cri::StartContainerRequest { container_id: id })
        .await
        .unwrap();
    t.elapsed()
}

async fn remove_all_sandboxes(bed: &Testbed) {
    let mut c = bed.cri().await;
    let items = c
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    for s in items {
        let _ = c
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: s.id.clone(),
            })
            .await;
        let _ = c
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: s.id,
            })
            .await;
    }
}

async fn floor_batch(bed: &Testbed, n: usize, in_flight: usize) -> Duration {
    let t = Instant::now();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for i in 0..n {
        let sem = sem.clone();
        let name = format!("floor-batch-{i}");
        tasks.push(async move {
            let _p = sem.acquire().await.unwrap();
            floor_pod(bed, &name).await
        });
    }
    futures::future::join_all(tasks).await;
    t.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("pod_start: bench");
        return;
    }
    let bed = Testbed::start().await;

    // Raw CRI floor, sequential.
    let mut floor: Vec<Duration> = Vec::new();
    for i in 0..SINGLE_REPS {
        floor.push(floor_pod(&bed, &format!("floor-{i}")).await);
    }
    remove_all_sandboxes(&bed).await;
    floor.sort();
    let floor_batch_wall = floor_batch(&bed, BATCH, FLOOR_IN_FLIGHT).await;
    remove_all_sandboxes(&bed).await;

    // oxlet: manifest written (atomic rename) → Running on /pods.
    let mut ox = Oxlet::start(&bed, &["-v=0"]);
    ox.poll = Duration::from_millis(2);
    let mut single: Vec<Duration> = Vec::new();
    for i in 0..SINGLE_REPS {
        let name = format!("single{i}");
        let t = Instant::now();
        write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &pod_yaml(&name, "sleep 3600", ""),
        );
        ox.wait_running(&name, Duration::from_secs(60)).await;
        single.push(t.elapsed());
        std::fs::remove_file(ox.manifests.join(format!("{name}.yaml"))).unwrap();
        ox.wait_for("pod gone", Duration::from_secs(60), |p| {
            p.is_empty().then_some(())
        })
        .await;
    }
    single.sort();

    // oxlet: 30 manifests at once.
    let t = Instant::now();
    for i in 0..BATCH {
        let name = format!("batch{i}");
        write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &pod_yaml(&name, "sleep 3600", ""),
        );
    }
    let mut seen: std::collections::HashMap<String, Duration> = Default::default();
    while seen.len() < BATCH {
        for p in ox.pods().await {
            if is_running(&p) {
                let n = p.metadata.name.clone().unwrap_or_default();
                seen.entry(n).or_insert_with(|| t.elapsed());
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "batch did not finish"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let batch_wall = t.elapsed();
    let mut per_pod: Vec<Duration> = seen.values().copied().collect();
    per_pod.sort();
    for i in 0..BATCH {
        std::fs::remove_file(ox.manifests.join(format!("batch{i}.yaml"))).unwrap();
    }
    ox.wait_for("batch gone", Duration::from_secs(120), |p| {
        p.is_empty().then_some(())
    })
    .await;

    let f50 = pct(&floor, 0.5);
    println!("| measure | p50 ms | p90 ms | p99 ms | ratio to floor |");
    println!("|---|---|---|---|---|");
    println!(
        "| raw CRI floor, sequential ({SINGLE_REPS}) | {:.1} | {:.1} | {:.1} | 1.00 |",
        ms(f50),
        ms(pct(&floor, 0.9)),
        ms(pct(&floor, 0.99))
    );
    println!(
        "| oxlet single pod, manifest → Running on /pods ({SINGLE_REPS}) | {:.1} | {:.1} | {:.1} | {:.2} |",
        ms(pct(&single, 0.5)),
        ms(pct(&single, 0.9)),
        ms(pct(&single, 0.99)),
        ms(pct(&single, 0.5)) / ms(f50)
    );
    println!(
        "| raw CRI floor, {BATCH} pods, {FLOOR_IN_FLIGHT} in flight: wall | {:.0} | | | 1.00 |",
        ms(floor_batch_wall)
    );
    println!(
        "| oxlet {BATCH} pods at once: wall (per-pod p50 {:.0}, p99 {:.0}) | {:.0} | | | {:.2} |",
        ms(pct(&per_pod, 0.5)),
        ms(pct(&per_pod, 0.99)),
        ms(batch_wall),
        ms(batch_wall) / ms(floor_batch_wall)
    );
    let json = serde_json::json!({
        "floor_sequential_ms": {"p50": ms(f50), "p90": ms(pct(&floor, 0.9)), "p99": ms(pct(&floor, 0.99))},
        "oxlet_single_ms": {"p50": ms(pct(&single, 0.5)), "p90": ms(pct(&single, 0.9)), "p99": ms(pct(&single, 0.99))},
        "floor_batch_wall_ms": ms(floor_batch_wall),
        "oxlet_batch_wall_ms": ms(batch_wall),
        "oxlet_batch_per_pod_ms": {"p50": ms(pct(&per_pod, 0.5)), "p99": ms(pct(&per_pod, 0.99))},
        "batch": BATCH,
        "reps": SINGLE_REPS,
    });
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("pod_start.json"),
        serde_json::to_string_pretty(&json).unwrap(),
    )
    .unwrap();
    drop(ox);
}
