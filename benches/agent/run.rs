//! Driving a measured oxlet: start it with the bench's flags (only those its build
//! knows), write and delete static pods, and time their starts.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::agent::{Oxlet, flags_of, is_running, pod_yaml, tail, write_manifest};
use crate::common::Testbed;
use crate::floor::wait_sandboxes;
use crate::stats::{field, line_time, ms};
use crate::{POLL, RESTING, STARTUP_LINE, WAIT};

/// This build's oxlet (the bench's own release binary).
pub(crate) fn this_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_oxlet"))
}

/// An oxlet for `binary` in the fresh dir `base`, logging pod startups and each
/// relist, polled gently; not started. Returns it and the extra flags to start it with.
pub(crate) fn prepare(base: &Path, endpoint: String, binary: &Path) -> (Oxlet, Vec<String>) {
    let mut ox = Oxlet::in_dir(base, Some(endpoint));
    let flags = flags_of(binary);
    let mut extra = Vec::new();
    // Per-task CPU on /debug/tasks, where the build has it.
    if flags.iter().any(|f| f == "task-cpu-accounting") {
        extra.push("--task-cpu-accounting=true".to_string());
    }
    ox.binary = binary.to_path_buf();
    ox.known_flags = Some(flags);
    // Polling /pods competes with containerd for the 2 cores (at 2 ms it added ~30 ms
    // to every start), so it stays at 20 ms and oxlet's own clock is read too.
    ox.poll = POLL;
    ox.env.push((
        "RUST_LOG".into(),
        "warn,oxlet=info,oxlet::pleg=trace".into(),
    ));
    (ox, extra)
}

/// Starts an oxlet of `binary` on the bed in a fresh dir named `dir`, with `extra`
/// flags, and waits until it serves `/pods`.
pub(crate) async fn start(bed: &Testbed, dir: &str, binary: &Path, extra: &[String]) -> Oxlet {
    let base = bed.base_dir().join(dir);
    assert!(!base.exists(), "{} is fresh", base.display());
    let (mut ox, mut flags) = prepare(&base, bed.endpoint(), binary);
    flags.extend_from_slice(extra);
    ox.spawn(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    ox.wait_up(WAIT).await;
    ox
}

/// Deletes every manifest, waits until containerd lists no sandbox, then SIGTERM: the
/// next oxlet on this containerd must find nothing to adopt or kill.
pub(crate) async fn stop(mut ox: Oxlet, bed: &Testbed) {
    for e in std::fs::read_dir(&ox.manifests).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    wait_sandboxes(bed, 0).await;
    let (status, _) = ox.sigterm();
    assert!(status.success(), "oxlet exited with {status}");
}

/// For each pod named in `names` (full names, e.g. `x-testnode`): ms from `t0` to its
/// status saying Running (oxlet's startup log line), and that line.
pub(crate) fn startups(log: &str, t0: jiff::Timestamp, names: &[String]) -> Vec<(f64, String)> {
    names
        .iter()
        .filter_map(|n| {
            // tracing's `pod=default/x ` before klog's format, klog's `pod="default/x"`.
            let (bare, quoted) = (format!("pod=default/{n} "), format!("pod=\"default/{n}\""));
            let line = log
                .lines()
                .rev()
                .find(|l| l.contains(STARTUP_LINE) && (l.contains(&bare) || l.contains(&quoted)))?;
            let at = line_time(line)?;
            Some((
                (at.as_nanosecond() - t0.as_nanosecond()) as f64 / 1e6,
                line.to_string(),
            ))
        })
        .collect()
}

pub(crate) fn write_pods(ox: &Oxlet, prefix: &str, range: std::ops::Range<usize>) {
    for i in range {
        let name = format!("{prefix}{i}");
        write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &pod_yaml(&name, RESTING, ""),
        );
    }
}

pub(crate) fn remove_pods(ox: &Oxlet, prefix: &str, range: std::ops::Range<usize>) {
    for i in range {
        std::fs::remove_file(ox.manifests.join(format!("{prefix}{i}.yaml"))).unwrap();
    }
}

/// Waits until `n` pods are Running; returns when each was first seen so (since `t`).
pub(crate) async fn wait_all_running(
    ox: &Oxlet,
    n: usize,
    t: Instant,
) -> HashMap<String, Duration> {
    let mut seen: HashMap<String, Duration> = HashMap::new();
    while seen.len() < n {
        for p in ox.pods().await {
            if is_running(&p) {
                seen.entry(p.metadata.name.clone().unwrap_or_default())
                    .or_insert_with(|| t.elapsed());
            }
        }
        assert!(
            t.elapsed() < WAIT,
            "only {} of {n} pods running\n{}",
            seen.len(),
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(POLL).await;
    }
    seen
}

/// A batch: wall time until the last pod ran, and each pod's time, in ms.
pub(crate) struct Batch {
    pub(crate) wall: f64,
    pub(crate) per_pod: Vec<f64>,
}

/// Writes `n` manifests at once; times each pod from oxlet's clock (its startup log
/// line), or, for a build that does not log it, from when `/pods` first said Running.
pub(crate) async fn batch(ox: &Oxlet, prefix: &str, n: usize) -> Batch {
    let t0 = jiff::Timestamp::now();
    let t = Instant::now();
    write_pods(ox, prefix, 0..n);
    let seen = wait_all_running(ox, n, t).await;
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}-testnode")).collect();
    let logged: Vec<f64> = startups(&ox.log(), t0, &names)
        .into_iter()
        .map(|(ms, _)| ms)
        .collect();
    let per_pod = crate::stats::sorted(if logged.len() == n {
        logged
    } else {
        seen.values().map(|d| ms(*d)).collect()
    });
    Batch {
        wall: per_pod[n - 1],
        per_pod,
    }
}

pub(crate) async fn wait_pod_count(ox: &Oxlet, n: usize) {
    ox.wait_for(&format!("{n} pods on /pods"), WAIT, |p| {
        (p.len() == n).then_some(())
    })
    .await;
}

/// One static pod's start, in ms.
pub(crate) struct Start {
    /// Manifest renamed in → oxlet's startup log line (None: the build logs none).
    pub(crate) logged: Option<f64>,
    /// Manifest renamed in → `/pods` says Running, polled every [`POLL`].
    pub(crate) seen: f64,
    pub(crate) line: Option<String>,
}

/// Starts one static pod, times it, deletes it and waits until containerd is empty.
pub(crate) async fn single_pod(ox: &Oxlet, bed: &Testbed, name: &str) -> Start {
    let t0 = jiff::Timestamp::now();
    let t = Instant::now();
    write_manifest(
        &ox.manifests,
        &format!("{name}.yaml"),
        &pod_yaml(name, RESTING, ""),
    );
    ox.wait_running(name, WAIT).await;
    let seen = ms(t.elapsed());
    let found = startups(&ox.log(), t0, &[format!("{name}-testnode")]).pop();
    std::fs::remove_file(ox.manifests.join(format!("{name}.yaml"))).unwrap();
    wait_pod_count(ox, 0).await;
    // The next pod must not overlap this pod's teardown.
    wait_sandboxes(bed, 0).await;
    Start {
        logged: found.as_ref().map(|(ms, _)| *ms),
        seen,
        line: found.map(|(_, l)| l),
    }
}

/// renameToSeen: the bench's clock against the startup line's own podStartMs.
pub(crate) fn rename_to_seen(s: &Start) -> Option<f64> {
    Some(s.logged? - field(s.line.as_ref()?, "podStartMs")?)
}
