//! `--against <binary or git rev>`: this build and another, alternately on one test
//! bed, never both at once (each would kill the other's pods as orphans). Prints one
//! table of ratios; a real regression shows here, where the VM's drift cancels out.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::common::Testbed;
use crate::floor::wait_sandboxes;
use crate::run::{self, Batch};
use crate::stats::{Footprint, footprint, mean, ms, pct, sorted};
use crate::{Plan, write_report};

/// A path to an oxlet binary is used as is; anything else is a git rev, built in a
/// worktree with its own target dir (`target/against-target`). The worktree lies
/// outside the repo (`$TMPDIR/oxlet-against/<rev>`): inside it, cargo would take it
/// for a member of this workspace (its `.` member covers every path below).
pub(crate) fn resolve(other: &str) -> PathBuf {
    let path = Path::new(other);
    if path.is_file() {
        return path.canonicalize().unwrap();
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tree = std::env::temp_dir()
        .join("oxlet-against")
        .join(other.replace(['/', ':', '~', '^'], "_"));
    std::fs::create_dir_all(repo.join("target/against")).unwrap();
    let git = |args: &[&str], dir: &Path| {
        let ok = Command::new("git")
            .current_dir(dir)
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?} failed in {}", dir.display());
    };
    if tree.exists() {
        git(&["checkout", "--detach", other], &tree);
    } else {
        let t = tree.to_string_lossy().into_owned();
        git(&["worktree", "add", "--detach", &t, other], repo);
    }
    let target = repo.join("target/against-target");
    eprintln!("bench: building oxlet at {other} in {}", tree.display());
    let ok = Command::new("cargo")
        .current_dir(&tree)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--release", "--bin", "oxlet"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "building oxlet at {other} failed");
    // Each rev gets its own copy: the shared target dir's binary is the last build's.
    let bin = repo.join("target/against").join(format!(
        "oxlet-{}",
        tree.file_name().unwrap().to_string_lossy()
    ));
    std::fs::copy(target.join("release/oxlet"), &bin).unwrap();
    bin
}

/// What one side measured.
#[derive(Default)]
struct Side {
    single_seen: Vec<f64>,
    single_logged: Vec<f64>,
    batch_wall: Vec<f64>,
    teardown: Vec<f64>,
    rest: Vec<Footprint>,
}

/// One round of single pods on a fresh oxlet of `bin`.
async fn single_round(bed: &Testbed, plan: &Plan, bin: &Path, side: &mut Side, tag: &str) {
    let ox = run::start(bed, &format!("ab-single-{tag}"), bin, &[]).await;
    tokio::time::sleep(plan.settle).await;
    for i in 0..plan.ab_round_pods {
        let s = run::single_pod(&ox, bed, &format!("ab{i}")).await;
        side.single_seen.push(s.seen);
        side.single_logged.extend(s.logged);
    }
    run::stop(ox, bed).await;
}

/// One round of the batch, then an at-rest window at batch + 5 pods, then teardown.
async fn rest_round(bed: &Testbed, plan: &Plan, bin: &Path, side: &mut Side, tag: &str) {
    let ox = run::start(bed, &format!("ab-rest-{tag}"), bin, &[]).await;
    tokio::time::sleep(plan.settle).await;
    let Batch { wall, .. } = run::batch(&ox, "b-", plan.density_batch).await;
    side.batch_wall.push(wall);
    run::write_pods(&ox, "extra-", 0..plan.rest_pods - plan.density_batch);
    run::wait_all_running(&ox, plan.rest_pods, std::time::Instant::now()).await;
    tokio::time::sleep(plan.settle).await;
    side.rest
        .push(footprint(&ox, bed.containerd_pid(), plan.window).await);
    let t = std::time::Instant::now();
    run::remove_pods(&ox, "b-", 0..plan.density_batch);
    run::remove_pods(&ox, "extra-", 0..plan.rest_pods - plan.density_batch);
    wait_sandboxes(bed, 0).await;
    side.teardown.push(ms(t.elapsed()));
    run::stop(ox, bed).await;
}

pub(crate) async fn run(plan: &Plan, other: &str) {
    let bins = [run::this_binary().to_path_buf(), resolve(other)];
    eprintln!(
        "bench: this build {} against {}",
        bins[0].display(),
        bins[1].display()
    );
    let bed = Testbed::start().await;
    let mut sides = [Side::default(), Side::default()];
    for round in 0..plan.ab_rounds {
        for (s, bin) in bins.iter().enumerate() {
            eprintln!("bench: single pods, round {round}, side {s}");
            single_round(&bed, plan, bin, &mut sides[s], &format!("{s}-{round}")).await;
        }
    }
    for round in 0..plan.ab_rest_rounds {
        for (s, bin) in bins.iter().enumerate() {
            eprintln!("bench: batch and at rest, round {round}, side {s}");
            rest_round(&bed, plan, bin, &mut sides[s], &format!("{s}-{round}")).await;
        }
    }
    report(plan, &bins, &sides);
}

/// Enough digits for ms (hundreds) and cores (thousandths) alike.
fn num(v: f64) -> String {
    match v.abs() {
        x if x >= 10.0 => format!("{v:.1}"),
        x if x >= 0.1 => format!("{v:.2}"),
        _ => format!("{v:.4}"),
    }
}

fn report(plan: &Plan, bins: &[PathBuf; 2], sides: &[Side; 2]) {
    let p50 = |v: &[f64]| pct(&sorted(v.to_vec()), 0.5);
    let rest = |s: &Side, f: fn(&Footprint) -> f64| mean(&s.rest.iter().map(f).collect::<Vec<_>>());
    let rows: Vec<(String, [f64; 2])> = vec![
        (
            format!(
                "single pod p50, client polling /pods (ms, {}x{} each)",
                plan.ab_rounds, plan.ab_round_pods
            ),
            [0, 1].map(|i| p50(&sides[i].single_seen)),
        ),
        (
            "single pod p50, oxlet's startup log line (ms)".into(),
            [0, 1].map(|i| p50(&sides[i].single_logged)),
        ),
        (
            format!("{}-pod batch wall, mean (ms)", plan.density_batch),
            [0, 1].map(|i| mean(&sides[i].batch_wall)),
        ),
        (
            format!("teardown of {} pods, mean (ms)", plan.rest_pods),
            [0, 1].map(|i| mean(&sides[i].teardown)),
        ),
        (
            format!("oxlet RSS at {} pods (MiB)", plan.rest_pods),
            [0, 1].map(|i| rest(&sides[i], |f| f.rss_mib)),
        ),
        (
            format!("oxlet CPU at {} pods (cores)", plan.rest_pods),
            [0, 1].map(|i| rest(&sides[i], |f| f.cpu_cores)),
        ),
        (
            format!("relist p50 at {} pods (ms)", plan.rest_pods),
            [0, 1].map(|i| rest(&sides[i], |f| pct(&f.relist_ms, 0.5))),
        ),
        (
            format!("containerd CPU at {} pods (cores)", plan.rest_pods),
            [0, 1].map(|i| rest(&sides[i], |f| f.containerd_cpu_cores)),
        ),
    ];
    println!("\n## This build against {}\n", bins[1].display());
    println!("| metric | this build | the other build | ratio |");
    println!("|---|---|---|---|");
    for (name, [a, b]) in &rows {
        println!("| {name} | {} | {} | {:.2} |", num(*a), num(*b), a / b);
    }
    let report = json!({
        "this": bins[0], "other": bins[1], "window_s": plan.window.as_secs(),
        "rows": rows.iter().map(|(n, [a, b])| json!({"metric": n, "this": a, "other": b, "ratio": a / b})).collect::<Vec<_>>(),
    });
    write_report("agent-against.json", &report);
}
