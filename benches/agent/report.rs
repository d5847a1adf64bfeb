//! The full run's tables (markdown, as docs/benchmarks.md shows them) and
//! `target/bench/agent.json`.

use serde_json::json;

use crate::normal::Results;
use crate::stats::{Footprint, dist, pct};
use crate::{POLL, Plan, write_report};

/// A table row of a distribution: p50, p90, p99, and p50 as a ratio to both floors.
fn row(what: &str, v: &[f64], bare: f64, fair: f64) {
    let p50 = pct(v, 0.5);
    println!(
        "| {what} | {p50:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
        pct(v, 0.9),
        pct(v, 0.99),
        p50 / bare,
        p50 / fair
    );
}

fn starts(plan: &Plan, r: &Results) {
    let s = &r.singles;
    let (bare, fair) = (pct(&s.bare, 0.5), pct(&s.fair, 0.5));
    let n = plan.single_reps;
    println!("\n## Pod start (ms)\n");
    println!("| measure | p50 | p90 | p99 | ratio to bare floor p50 | ratio to fair floor p50 |");
    println!("|---|---|---|---|---|---|");
    row(
        &format!("bare CRI floor, sequential ({n})"),
        &s.bare,
        bare,
        fair,
    );
    row(
        &format!("fair CRI floor: oxlet's requests replayed, sequential ({n})"),
        &s.fair,
        bare,
        fair,
    );
    row(
        &format!("oxlet single pod: manifest renamed in → status Running, oxlet's log ({n})"),
        &s.logged,
        bare,
        fair,
    );
    row(
        &format!(
            "same, as a client polling /pods every {} ms sees it",
            POLL.as_millis()
        ),
        &s.seen,
        bare,
        fair,
    );
    let c = &r.cluster;
    let cbare = pct(&c.floor, 0.5);
    let m = plan.api_reps;
    row(
        &format!("cluster mode: bare CRI floor, alternating ({m})"),
        &c.floor,
        cbare,
        fair,
    );
    row(
        &format!("cluster mode: pod created in the apiserver → oxlet's log says Running ({m})"),
        &c.logged,
        cbare,
        fair,
    );
    row(
        &format!("cluster mode: pod created → the apiserver's status says Running, a watch ({m})"),
        &c.seen,
        cbare,
        fair,
    );
    println!("\nCluster-mode ratios are to the bare floor pods alternating with them.");
    println!("\n## Stages of one pod start, from oxlet's log (ms)\n");
    println!("| stage | p50 | p90 | p99 |");
    println!("|---|---|---|---|");
    for (k, v) in &s.stages {
        println!(
            "| {k} | {:.1} | {:.1} | {:.1} |",
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99)
        );
    }
}

fn batches(plan: &Plan, r: &Results) {
    let b = &r.batches;
    let (small, dense, c) = (plan.small_batch, plan.density_batch, b.best_c);
    println!("\n## Batches (ms)\n");
    println!("| measure | wall | per-pod p50 | per-pod p99 | ratio |");
    println!("|---|---|---|---|---|");
    for (c, w) in &b.floor {
        println!("| bare CRI floor, {dense} pods, {c} in flight | {w:.0} | | | |");
    }
    println!(
        "| bare CRI floor, {dense} pods, {c} in flight, just before oxlet's batch | {:.0} | | | 1.00 |",
        b.floor_density
    );
    println!(
        "| fair CRI floor, {dense} pods, {c} in flight, right after | {:.0} | | | {:.2} × bare |",
        b.fair_density,
        b.fair_density / b.floor_density
    );
    println!(
        "| bare CRI floor, {small} pods, {c} in flight | {:.0} | | | |",
        b.floor_small
    );
    println!(
        "| oxlet {small} pods at once | {:.0} | {:.0} | {:.0} | {:.2} × bare |",
        b.small.wall,
        pct(&b.small.per_pod, 0.5),
        pct(&b.small.per_pod, 0.99),
        b.small.wall / b.floor_small
    );
    println!(
        "| oxlet {dense} pods at once | {:.0} | {:.0} | {:.0} | {:.2} × bare, {:.2} × fair (at {c} in flight, run just before) |",
        b.density.wall,
        pct(&b.density.per_pod, 0.5),
        pct(&b.density.per_pod, 0.99),
        b.density.wall / b.floor_density,
        b.density.wall / b.fair_density
    );
    let [ox, cd, cd_bare, cd_fair] = b.cpu;
    println!(
        "| CPU during the {dense}-pod batch: oxlet {ox:.2} s, containerd {cd:.2} s (containerd for the bare floor {cd_bare:.2} s, for the fair floor {cd_fair:.2} s) | | | | |"
    );
    println!(
        "| bare CRI teardown: stop + remove {dense} sandboxes, all at once | {:.0} | | | 1.00 |",
        b.floor_teardown
    );
    println!(
        "| oxlet teardown: {dense} manifests deleted → all sandboxes gone | {:.0} | | | {:.2} × bare teardown |",
        r.teardown,
        r.teardown / b.floor_teardown
    );
}

fn rest_row(label: &str, f: &Footprint) {
    println!(
        "| {label} | {:.1} | {:.4} | {:.1} | {:.4} | {:.2} | {:.2} | {:.2} |",
        f.rss_mib,
        f.cpu_cores,
        f.containerd_rss_mib,
        f.containerd_cpu_cores,
        pct(&f.relist_ms, 0.5),
        pct(&f.relist_ms, 0.99),
        f.cpu_ms_per_relist
    );
}

/// Per-task CPU over a window, where the build reports it.
fn tasks(label: &str, f: &Footprint) {
    println!("\n### oxlet CPU per task, {label}\n");
    let Some(tasks) = &f.tasks else {
        println!("(no /debug/tasks in this build: per-task CPU not measured)");
        return;
    };
    println!("| task | cores |");
    println!("|---|---|");
    for (name, cores) in tasks {
        println!("| {name} | {cores:.5} |");
    }
}

fn at_rest(plan: &Plan, r: &Results) {
    println!(
        "\n## At rest ({} s windows, each after {} s settling)\n",
        plan.window.as_secs(),
        plan.settle.as_secs()
    );
    println!(
        "| pods | oxlet RSS MiB | oxlet CPU cores | containerd RSS MiB | containerd CPU cores | relist p50 ms | relist p99 ms | oxlet CPU ms per relist |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (n, f) in &r.footprints {
        rest_row(&n.to_string(), f);
    }
    let c = &r.cluster;
    rest_row(
        &format!("{} apiserver pods (cluster mode)", c.rest_pods),
        &c.rest,
    );
    println!(
        "\nCluster mode at {} pods: oxlet {:.4} core (target ≤ 0.015).",
        c.rest_pods, c.rest.cpu_cores
    );
    if let Some((_, f)) = r.footprints.iter().find(|(n, _)| *n == plan.rest_pods) {
        tasks(&format!("{} static pods", plan.rest_pods), f);
    }
    tasks(&format!("{} apiserver pods", c.rest_pods), &c.rest);
}

pub(crate) fn print(plan: &Plan, r: &Results) {
    starts(plan, r);
    batches(plan, r);
    at_rest(plan, r);
    let (s, b, c) = (&r.singles, &r.batches, &r.cluster);
    let logged50 = pct(&s.logged, 0.5);
    let report = json!({
        "quick": plan.quick,
        "floor_sequential_ms": dist(&s.bare),
        "fair_floor_sequential_ms": dist(&s.fair),
        "oxlet_single_ms": dist(&s.logged),
        "oxlet_single_observed_on_pods_ms": dist(&s.seen),
        "single_ratio_to_floor_p50": logged50 / pct(&s.bare, 0.5),
        "single_ratio_to_fair_floor_p50": logged50 / pct(&s.fair, 0.5),
        "stages_ms": s.stages.iter().map(|(k, v)| (k.to_string(), dist(v))).collect::<serde_json::Map<_, _>>(),
        "floor_batch_105_ms": b.floor.iter().chain([&(b.best_c, b.floor_density)])
            .map(|(c, w)| json!({"in_flight": c, "wall": w})).collect::<Vec<_>>(),
        "fair_floor_batch_105_ms": {"in_flight": b.best_c, "wall": b.fair_density},
        "floor_batch_30_ms": {"in_flight": b.best_c, "wall": b.floor_small},
        "oxlet_batch_30_ms": {"wall": b.small.wall, "per_pod": dist(&b.small.per_pod), "ratio": b.small.wall / b.floor_small},
        "oxlet_batch_105_ms": {"wall": b.density.wall, "per_pod": dist(&b.density.per_pod),
            "ratio": b.density.wall / b.floor_density, "ratio_to_fair": b.density.wall / b.fair_density},
        "batch_sizes": {"small": plan.small_batch, "density": plan.density_batch},
        "teardown_105_ms": r.teardown,
        "floor_teardown_105_ms": b.floor_teardown,
        "batch_105_cpu_s": {"oxlet": b.cpu[0], "containerd": b.cpu[1], "containerd_floor": b.cpu[2], "containerd_fair_floor": b.cpu[3]},
        "window_s": plan.window.as_secs(),
        "settle_s": plan.settle.as_secs(),
        "at_rest": r.footprints.iter().map(|(n, f)| f.json(*n)).collect::<Vec<_>>(),
        "cluster": {
            "floor_sequential_ms": dist(&c.floor),
            "oxlet_single_ms": dist(&c.logged),
            "apiserver_running_ms": dist(&c.seen),
            "at_rest": c.rest.json(c.rest_pods),
        },
        "cores": std::thread::available_parallelism().map(std::num::NonZero::get).unwrap_or(0),
    });
    write_report("agent.json", &report);
}
