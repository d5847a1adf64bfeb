//! The full bench: this build against the bare and fair floors, static pods and
//! cluster mode, starts, batches, teardown and at-rest windows.

use std::time::Instant;

use crate::agent::Oxlet;
use crate::cluster::{self, ClusterResult};
use crate::common::Testbed;
use crate::fair::{self, FairFloor};
use crate::floor::{floor_batch, floor_pod, remove_all_sandboxes, wait_sandboxes};
use crate::run::{self, Batch};
use crate::stats::{Footprint, cpu_seconds, field, footprint, ms, sorted};
use crate::{Plan, report};

/// Single pods: bare floor, fair floor and oxlet, one after another each round.
pub(crate) struct Singles {
    pub(crate) bare: Vec<f64>,
    pub(crate) fair: Vec<f64>,
    /// Manifest renamed in → oxlet's startup log line.
    pub(crate) logged: Vec<f64>,
    /// Manifest renamed in → a client polling `/pods` sees Running.
    pub(crate) seen: Vec<f64>,
    pub(crate) stages: Vec<(&'static str, Vec<f64>)>,
}

/// Runs the three kinds of single pod in turn (so all see the same machine: this
/// VM's speed drifts by 10-20 % over minutes). oxlet runs meanwhile; it ignores the
/// floors' sandboxes, which carry none of its labels.
async fn singles(bed: &Testbed, ox: &Oxlet, fair: &FairFloor, plan: &Plan) -> Singles {
    eprintln!(
        "bench: single pod x{}, alternating bare floor, fair floor, oxlet",
        plan.single_reps
    );
    let (mut bare, mut fair_v, mut logged, mut seen, mut renamed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut lines = Vec::new();
    for i in 0..plan.single_reps {
        bare.push(ms(floor_pod(bed, &format!("floor-{i}")).await));
        remove_all_sandboxes(bed).await;
        wait_sandboxes(bed, 0).await;
        fair_v.push(ms(fair.pod(bed, &format!("fair-{i}")).await));
        fair.remove_all(bed).await;
        let s = run::single_pod(ox, bed, &format!("single{i}")).await;
        seen.push(s.seen);
        renamed.extend(run::rename_to_seen(&s));
        logged.push(s.logged.expect("oxlet logged the pod's startup"));
        lines.extend(s.line);
    }
    let stage_names = [
        "seenToWorkerMs",
        "workerToSandboxMs",
        "sandboxToContainersMs",
        "containersToStartedMs",
        "startedToStatusMs",
        "podStartMs",
    ];
    let mut stages = vec![("renameToSeenMs", sorted(renamed))];
    stages.extend(stage_names.iter().map(|k| {
        (
            *k,
            sorted(lines.iter().filter_map(|l| field(l, k)).collect()),
        )
    }));
    Singles {
        bare: sorted(bare),
        fair: sorted(fair_v),
        logged: sorted(logged),
        seen: sorted(seen),
        stages,
    }
}

pub(crate) struct Batches {
    /// Bare floor, density batch: (in flight, wall ms) for each concurrency tried.
    pub(crate) floor: Vec<(usize, f64)>,
    pub(crate) best_c: usize,
    pub(crate) floor_small: f64,
    pub(crate) fair_density: f64,
    pub(crate) small: Batch,
    pub(crate) density: Batch,
    /// The bare floor's density batch at the best concurrency, rerun just before
    /// the fair floor's and oxlet's.
    pub(crate) floor_density: f64,
    pub(crate) floor_teardown: f64,
    /// CPU seconds during the density batches: oxlet, containerd; containerd for the
    /// bare and the fair floor.
    pub(crate) cpu: [f64; 4],
}

/// Floor batches at each concurrency, then the small and density batches, each right
/// after its floors; the density batch's pods stay running.
async fn batches(bed: &Testbed, ox: &Oxlet, fair: &FairFloor, plan: &Plan) -> Batches {
    eprintln!("bench: floor batches");
    let containerd = bed.containerd_pid();
    let mut floor = Vec::new();
    for &c in &plan.floor_concurrency {
        let wall = floor_batch(bed, plan.density_batch, c).await;
        remove_all_sandboxes(bed).await;
        floor.push((c, ms(wall)));
    }
    let (best_c, _) = floor
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap();
    let floor_small = ms(floor_batch(bed, plan.small_batch, best_c).await);
    remove_all_sandboxes(bed).await;
    eprintln!("bench: batch {}", plan.small_batch);
    let small = run::batch(ox, "b30-", plan.small_batch).await;
    run::remove_pods(ox, "b30-", 0..plan.small_batch);
    run::wait_pod_count(ox, 0).await;
    wait_sandboxes(bed, 0).await;

    let c0 = cpu_seconds(containerd);
    let floor_density = ms(floor_batch(bed, plan.density_batch, best_c).await);
    let floor_cpu = cpu_seconds(containerd) - c0;
    // The teardown floor: stop and remove the sandboxes straight through the CRI.
    let t = Instant::now();
    remove_all_sandboxes(bed).await;
    let floor_teardown = ms(t.elapsed());
    let c0 = cpu_seconds(containerd);
    let fair_density = ms(fair.batch(bed, plan.density_batch, best_c).await);
    let fair_cpu = cpu_seconds(containerd) - c0;
    fair.remove_all(bed).await;
    eprintln!("bench: batch {}", plan.density_batch);
    let (o0, c0) = (cpu_seconds(ox.pid()), cpu_seconds(containerd));
    let density = run::batch(ox, "b105-", plan.density_batch).await;
    let cpu = [
        cpu_seconds(ox.pid()) - o0,
        cpu_seconds(containerd) - c0,
        floor_cpu,
        fair_cpu,
    ];
    Batches {
        floor,
        best_c,
        floor_small,
        fair_density,
        small,
        density,
        floor_density,
        floor_teardown,
        cpu,
    }
}

/// Brings oxlet to `n` running `rest-` pods, settles, and measures a window.
async fn rest_window(bed: &Testbed, ox: &Oxlet, plan: &Plan, n: usize) -> Footprint {
    eprintln!("bench: footprint at {n} pods");
    let have = ox.pods().await.len();
    if have < n {
        run::write_pods(ox, "rest-", have..n);
    } else {
        run::remove_pods(ox, "rest-", n..have);
    }
    run::wait_pod_count(ox, n).await;
    run::wait_all_running(ox, n, Instant::now()).await;
    wait_sandboxes(bed, n).await;
    tokio::time::sleep(plan.settle).await;
    footprint(ox, bed.containerd_pid(), plan.window).await
}

/// Everything the full run measured.
pub(crate) struct Results {
    pub(crate) singles: Singles,
    pub(crate) batches: Batches,
    pub(crate) teardown: f64,
    /// (pods, window), by pods.
    pub(crate) footprints: Vec<(usize, Footprint)>,
    pub(crate) cluster: ClusterResult,
}

pub(crate) async fn run(plan: &Plan) {
    let bed = Testbed::start().await;
    // Captured first: two oxlets must never run at once on one containerd.
    eprintln!("bench: capturing oxlet's CRI requests for the fair floor");
    let fair = fair::capture(&bed, run::this_binary(), &[]).await;
    let ox = run::start(&bed, "oxlet", run::this_binary(), &[]).await;
    while ox.get("/healthz").await.is_none_or(|(code, _)| code != 200) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    eprintln!("bench: footprint at 0 pods");
    tokio::time::sleep(plan.settle).await;
    let mut footprints = vec![(0, footprint(&ox, bed.containerd_pid(), plan.window).await)];
    let singles = singles(&bed, &ox, &fair, plan).await;
    let ablation = crate::ablation::run(&bed, &fair, plan.ablation_rounds).await;
    let batches = batches(&bed, &ox, &fair, plan).await;

    let extra = plan.rest_pods - plan.density_batch;
    eprintln!("bench: footprint at {} pods", plan.rest_pods);
    run::write_pods(&ox, "extra-", 0..extra);
    run::wait_all_running(&ox, plan.rest_pods, Instant::now()).await;
    tokio::time::sleep(plan.settle).await;
    footprints.push((
        plan.rest_pods,
        footprint(&ox, bed.containerd_pid(), plan.window).await,
    ));
    run::remove_pods(&ox, "extra-", 0..extra);
    run::wait_pod_count(&ox, plan.density_batch).await;
    wait_sandboxes(&bed, plan.density_batch).await;

    eprintln!("bench: teardown");
    let t = Instant::now();
    run::remove_pods(&ox, "b105-", 0..plan.density_batch);
    wait_sandboxes(&bed, 0).await;
    let teardown = ms(t.elapsed());
    run::wait_pod_count(&ox, 0).await;
    for &n in &plan.other_rest {
        footprints.push((n, rest_window(&bed, &ox, plan, n).await));
    }
    run::stop(ox, &bed).await;
    footprints.sort_by_key(|(n, _)| *n);

    let cluster = cluster::run(&bed, plan).await;
    fair.finish();
    report::print(
        plan,
        &Results {
            singles,
            batches,
            teardown,
            footprints,
            cluster,
        },
    );
    crate::ablation::print(&ablation);
    crate::write_report("agent-ablation.json", &crate::ablation::json(&ablation));
}
