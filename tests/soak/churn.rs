//! Churn: thousands of pods through one node in waves, then everything a pod leaves
//! behind compared with the node before them.

use std::time::{Duration, Instant};

use testapi::TestApiServer;

use std::path::Path;

use crate::agent::{Oxlet, tail};
use crate::footprint::{Footprint, Places, census, compare, rss_kib, runtime_objects};
use crate::kit::*;

const WAVE: usize = 50;

/// `total` pods in waves of [`WAVE`] (static and API; a tenth crash-looping, a tenth
/// with volumes, a tenth probed), beside a resting set of 10.
pub(crate) async fn churn(scale: Scale) {
    let total: usize = scale.pick(2000, 150);
    // The full run waits out the caches kept by design (the longest: a prediction
    // model unseen for 30 min, koordlet's modelExpiration, dropped at its next
    // minutely GC; the metric cache's head window, the timeline's gone lives) and
    // then judges them with the rest.
    let settle = Duration::from_secs(scale.pick(20, 20));
    let final_settle = Duration::from_secs(scale.pick(32 * 60, 20));
    let (bed, server, flags) = cluster_bed().await;
    let ox = cluster_oxlet(&bed, &server, &[]);
    ox.wait_up(Duration::from_secs(120)).await;
    for i in 0..10 {
        add(
            &ox,
            &server,
            &pod(&format!("rest{i}"), Kind::Idle, i % 2 == 1, &flags),
        );
    }
    let resting = 10;
    until_all_ready(
        &ox,
        resting,
        "the resting pods Running",
        Duration::from_secs(120),
    )
    .await;
    tokio::time::sleep(settle).await;
    // The first training round (each minute) models the resting pods and the node:
    // the baseline holds those models, as the end does.
    until(
        &ox,
        "the first prediction models",
        Duration::from_secs(150),
        async || {
            let models = census(&ox).await?["counts"]["prediction models"].as_u64()?;
            (models >= resting as u64).then_some(())
        },
    )
    .await;
    let places = Places::of_bed(&ox, &bed);
    // One wave first: the allocator's pools and the caches kept by design (below)
    // fill once, so the baseline is a node that has run pods, as any node has.
    let cold = Footprint::take(&places).await;
    run_wave(&ox, &server, &flags, "warmup", WAVE, resting).await;
    tokio::time::sleep(settle).await;
    let base = Footprint::take(&places).await;
    let t = Instant::now();
    let mut peak_rss = 0;
    for wave in 0..total.div_ceil(WAVE) {
        let rss = run_wave(
            &ox,
            &server,
            &flags,
            &format!("w{wave:03}"),
            WAVE.min(total - wave * WAVE),
            resting,
        )
        .await;
        peak_rss = peak_rss.max(rss);
    }
    let churned = t.elapsed();
    // Their sandboxes go as their workers finish; then housekeeping's passes.
    until(
        &ox,
        "the runtime back to the resting pods",
        Duration::from_secs(300),
        async || {
            let (sandboxes, _) = runtime_objects(places.socket).await;
            (sandboxes == base.get("runtime sandboxes")).then_some(())
        },
    )
    .await;
    tokio::time::sleep(final_settle).await;
    let after = Footprint::take(&places).await;
    hold_for_a_look(&ox).await;
    let (rows, over) = compare(&base, &after, scale.full);
    let mut report = Report::new(
        &format!("Churn: {total} pods in waves of {WAVE}, beside {resting} resting pods"),
        &["what", "before", "after", ""],
    );
    for r in rows {
        report.row(r.to_vec());
    }
    report.note(format!(
        "before the warm-up wave: RSS {} MiB, {} tokio tasks, {} open fds",
        cold.get("RSS KiB") / 1024,
        cold.get("tokio tasks"),
        cold.get("open fds")
    ));
    report.note(format!(
        "{total} pods started and removed in {} ({:.0} pods a minute); peak RSS {} MiB, {} MiB after, of which the heap (RSS anon) {} MiB against {} MiB before",
        secs(churned),
        total as f64 / churned.as_secs_f64() * 60.0,
        peak_rss / 1024,
        after.get("RSS KiB") / 1024,
        after.get("RSS anon KiB") / 1024,
        base.get("RSS anon KiB") / 1024
    ));
    report.finish(scale, &release(&bed));
    assert!(
        over.is_empty(),
        "not back to the baseline: {over:?}\n{}",
        tail(&ox.log(), 40)
    );
}

/// Starts `count` pods (static and API, a tenth crash-looping, a tenth with volumes,
/// a tenth probed), waits until each has run, removes them and waits until only the
/// `resting` pods are left. Returns the RSS (KiB) while they all ran.
async fn run_wave(
    ox: &Oxlet,
    server: &TestApiServer,
    flags: &Path,
    prefix: &str,
    count: usize,
    resting: usize,
) -> u64 {
    let pods: Vec<_> = (0..count)
        .map(|i| {
            let kind = match i % 10 {
                0 => Kind::CrashLoop,
                1 => Kind::Volumes,
                2 => Kind::Probed,
                _ => Kind::Idle,
            };
            pod(&format!("{prefix}-{i:02}"), kind, i % 2 == 1, flags)
        })
        .collect();
    for p in &pods {
        add(ox, server, p);
    }
    let names: Vec<String> = pods.iter().map(shown_name).collect();
    until(
        ox,
        &format!("wave {prefix}'s pods running or run"),
        Duration::from_secs(300),
        async || {
            let shown = shown(ox).await;
            names
                .iter()
                .all(|n| shown.get(n).is_some_and(has_run))
                .then_some(())
        },
    )
    .await;
    let rss = rss_kib(ox.pid());
    for p in &pods {
        remove(ox, server, p);
    }
    until(
        ox,
        &format!("wave {prefix}'s pods gone"),
        Duration::from_secs(300),
        async || {
            let shown = shown(ox).await;
            (shown.len() == resting).then_some(())
        },
    )
    .await;
    rss
}
