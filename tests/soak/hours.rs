//! Hours: a node left running with a crash loop, a probe-killed pod, a chatty logger
//! with rotation and idle pods, sampled at an interval: memory must not creep, CPU
//! must stay flat, and no map may grow.

use std::time::{Duration, Instant};

use crate::agent::{Oxlet, tail};
use crate::common::Testbed;
use crate::footprint::{Footprint, NOT_JUDGED, Places, TIME_BOUNDED};
use crate::kit::*;

/// One sample: when, the footprint, and the process's CPU time so far.
struct Sample {
    at: Duration,
    footprint: Footprint,
    cpu: Duration,
}

fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / 100.0)
}

/// The least-squares slope of `points` (hours, MiB), in MiB an hour.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

/// Runs the node for `duration` after a warm-up, sampling every `every`.
pub(crate) async fn hours(scale: Scale) {
    let idle = scale.pick(100, 10);
    let warmup = Duration::from_secs(scale.pick(600, 30));
    let duration = Duration::from_secs(scale.pick(3600, 120));
    let every = Duration::from_secs(scale.pick(60, 10));
    let bed = Testbed::start().await;
    let flags = bed.base_dir().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    let ox = Oxlet::start(
        &bed,
        &[
            "-v=2",
            "--container-log-max-size=1Mi",
            "--container-log-max-files=3",
            "--container-log-monitor-interval=10s",
        ],
    );
    ox.wait_up(Duration::from_secs(120)).await;
    let pods = [
        ("crashloop", Kind::CrashLoop),
        ("probekilled", Kind::ProbeKilled),
        ("chatty", Kind::Chatty),
    ];
    for (name, kind) in pods {
        let p = pod(name, kind, false, &flags);
        crate::agent::write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &serde_json::to_string(&p).unwrap(),
        );
    }
    for i in 0..idle {
        let p = pod(&format!("idle{i:03}"), Kind::Idle, false, &flags);
        crate::agent::write_manifest(
            &ox.manifests,
            &format!("idle{i:03}.yaml"),
            &serde_json::to_string(&p).unwrap(),
        );
    }
    until(
        &ox,
        "every pod has run",
        Duration::from_secs(600),
        async || {
            let pods = shown(&ox).await;
            (pods.len() == idle + 3 && pods.values().all(has_run)).then_some(())
        },
    )
    .await;
    tokio::time::sleep(warmup).await;
    let places = Places::of_bed(&ox, &bed);
    let t = Instant::now();
    let mut samples = Vec::new();
    while t.elapsed() <= duration {
        samples.push(Sample {
            at: t.elapsed(),
            footprint: Footprint::take(&places).await,
            cpu: cpu_time(ox.pid()),
        });
        let next = every * u32::try_from(samples.len()).unwrap();
        if let Some(wait) = next.checked_sub(t.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    let shown_pods = shown(&ox).await;
    let restarts = |name: &str| {
        shown_pods
            .get(&format!("{name}-{NODE}"))
            .map_or(0, |p| containers_of(p).first().map_or(0, |c| c.1))
    };
    report(
        scale,
        &bed,
        &ox,
        &samples,
        [restarts("crashloop"), restarts("probekilled")],
    );
}

fn report(scale: Scale, bed: &Testbed, ox: &Oxlet, samples: &[Sample], restarts: [i32; 2]) {
    // MiB an hour of one memory figure, by least squares over the samples.
    let growth_of = |name: &str| {
        let points: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| {
                (
                    s.at.as_secs_f64() / 3600.0,
                    s.footprint.get(name) as f64 / 1024.0,
                )
            })
            .collect();
        slope(&points)
    };
    // The heap is judged; all of RSS also holds the binary's pages (NOT_JUDGED).
    let growth = growth_of("RSS anon KiB");
    let growth_all = growth_of("RSS KiB");
    let quarter = samples.len() / 4;
    let cores = |w: &[Sample]| {
        let (a, b) = (&w[0], &w[w.len() - 1]);
        (b.cpu - a.cpu).as_secs_f64() / (b.at - a.at).as_secs_f64().max(1e-9)
    };
    let (first_cpu, last_cpu) = (
        cores(&samples[..=quarter.max(1)]),
        cores(&samples[samples.len() - 1 - quarter.max(1)..]),
    );
    let mut report = Report::new(
        &format!(
            "Hours: {} with a crash loop, a probe-killed pod, a chatty logger rotated at 1 MiB and {} idle pods",
            secs(samples.last().map_or(Duration::ZERO, |s| s.at)),
            samples[0]
                .footprint
                .get("census: pod manager: pods")
                .saturating_sub(3)
        ),
        &["what", "first", "last", "max"],
    );
    let mut grew = Vec::new();
    let names: Vec<String> = samples[0].footprint.0.keys().cloned().collect();
    for name in &names {
        let values: Vec<u64> = samples.iter().map(|s| s.footprint.get(name)).collect();
        let (first, last) = (values[0], values[values.len() - 1]);
        let max = values.iter().copied().max().unwrap_or(0);
        // A map is bounded when the second half never goes past the first half's
        // highest (with 5 % or one of slack); the heap is judged by its slope instead.
        let half_max = values[..values.len() / 2 + 1]
            .iter()
            .copied()
            .max()
            .unwrap_or(0);
        let late_max = values[values.len() / 2..]
            .iter()
            .copied()
            .max()
            .unwrap_or(0);
        // What is kept by design for longer than the short run is judged in the full one.
        let too_soon = !scale.full && TIME_BOUNDED.iter().any(|(n, _)| n == name);
        let grows = late_max > (half_max + half_max.div_ceil(20)).max(half_max + 1);
        let memory = name == "RSS anon KiB" || NOT_JUDGED.iter().any(|(n, _)| n == name);
        if !memory && !too_soon && grows {
            grew.push(format!(
                "{name}: {half_max} in the first half, {late_max} in the second"
            ));
        }
        report.row(vec![
            name.clone(),
            first.to_string(),
            last.to_string(),
            max.to_string(),
        ]);
    }
    report.note(format!(
        "the heap (RSS anon) grew {growth:.2} MiB an hour, all of RSS {growth_all:.2} (least squares over {} samples); CPU {first_cpu:.4} core in the first quarter, {last_cpu:.4} in the last; the crash loop restarted {} times, the probe-killed pod {} times",
        samples.len(),
        restarts[0],
        restarts[1]
    ));
    report.finish(scale, &release(bed));
    assert!(grew.is_empty(), "grew: {grew:?}\n{}", tail(&ox.log(), 40));
    assert!(
        restarts[0] > 0 && restarts[1] > 0,
        "the crash loop and the probe kills happened"
    );
    if scale.full {
        assert!(
            growth <= 2.0,
            "the heap grew {growth:.2} MiB an hour (all of RSS {growth_all:.2})"
        );
    }
}
