//! Percentiles, `/proc` sampling, oxlet's log lines and the at-rest footprint window.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::agent::Oxlet;

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

pub(crate) fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

pub(crate) fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub(crate) fn dist(v: &[f64]) -> serde_json::Value {
    json!({"p50": pct(v, 0.5), "p90": pct(v, 0.9), "p99": pct(v, 0.99), "n": v.len()})
}

/// A `key=value` number from a log line.
pub(crate) fn field(line: &str, key: &str) -> Option<f64> {
    let start = line.find(&format!("{key}="))? + key.len() + 1;
    let rest = line[start..].trim_start_matches('"');
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The wall-clock time at the start of a log line: klog's header (`I1203
/// 07:51:40.897243`, local time, the year taken as the current one), or tracing's
/// RFC 3339 prefix, which builds before klog's format wrote.
pub(crate) fn line_time(line: &str) -> Option<jiff::Timestamp> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if let Ok(t) = first.parse() {
        return Some(t);
    }
    let date = first
        .get(1..5)
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?;
    let (month, day) = (date[..2].parse::<i8>().ok()?, date[2..].parse::<i8>().ok()?);
    let time: jiff::civil::Time = words.next()?.parse().ok()?;
    let tz = jiff::tz::TimeZone::system();
    let year = jiff::Timestamp::now().to_zoned(tz.clone()).year();
    let civil = jiff::civil::date(year, month, day).to_datetime(time);
    civil.to_zoned(tz).ok().map(|z| z.timestamp())
}

/// (RSS bytes, CPU ticks user+sys) of a process.
pub(crate) fn proc_sample(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (rss_kb * 1024, ticks)
}

/// CPU seconds of a process so far.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    proc_sample(pid).1 as f64 / rustix::param::clock_ticks_per_second() as f64
}

/// One at-rest window.
pub(crate) struct Footprint {
    pub(crate) rss_mib: f64,
    pub(crate) cpu_cores: f64,
    pub(crate) containerd_rss_mib: f64,
    pub(crate) containerd_cpu_cores: f64,
    pub(crate) relist_ms: Vec<f64>,
    pub(crate) cpu_ms_per_relist: f64,
    /// Cores per task name over the window, descending (`/debug/tasks`); None when
    /// the build has no task accounting.
    pub(crate) tasks: Option<Vec<(String, f64)>>,
}

impl Footprint {
    pub(crate) fn json(&self, pods: usize) -> serde_json::Value {
        json!({
            "pods": pods, "oxlet_rss_mib": self.rss_mib, "oxlet_cpu_cores": self.cpu_cores,
            "containerd_rss_mib": self.containerd_rss_mib,
            "containerd_cpu_cores": self.containerd_cpu_cores,
            "relist_ms": dist(&self.relist_ms), "oxlet_cpu_ms_per_relist": self.cpu_ms_per_relist,
            "task_cpu_cores": self.tasks.as_ref().map(|t| t.iter()
                .map(|(n, c)| json!({"name": n, "cores": c})).collect::<Vec<_>>()),
        })
    }
}

/// `/debug/tasks`: cumulative CPU seconds per task name; None if the endpoint is
/// missing (404: a build without `--task-cpu-accounting`, or the flag is off).
async fn task_cpu(ox: &Oxlet) -> Option<Vec<(String, f64)>> {
    let (200, body) = ox.debug_get("/debug/tasks").await? else {
        return None;
    };
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
    Some(
        list.iter()
            .filter_map(|t| Some((t["name"].as_str()?.to_string(), t["cpuSeconds"].as_f64()?)))
            .collect(),
    )
}

/// Cores per name between two `/debug/tasks` snapshots, descending.
fn task_cores(before: &[(String, f64)], after: &[(String, f64)], secs: f64) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .map(|(n, s)| {
            let s0 = before.iter().find(|(m, _)| m == n).map_or(0.0, |(_, s)| *s);
            (n.clone(), (s - s0) / secs)
        })
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// Samples oxlet and containerd for `window`: RSS every second, CPU over the whole
/// window, oxlet's relists from its log, and its per-task CPU when it has that.
pub(crate) async fn footprint(ox: &Oxlet, containerd: u32, window: Duration) -> Footprint {
    let log_before = ox.log().len();
    let tasks0 = task_cpu(ox).await;
    let t0 = cpu_seconds(ox.pid());
    let c0 = cpu_seconds(containerd);
    let mut rss = Vec::new();
    let mut crss = Vec::new();
    let start = Instant::now();
    while start.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1)).await;
        rss.push(proc_sample(ox.pid()).0 as f64);
        crss.push(proc_sample(containerd).0 as f64);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds(ox.pid()) - t0;
    let c_s = cpu_seconds(containerd) - c0;
    let tasks1 = task_cpu(ox).await;
    let log = ox.log();
    let relist_ms: Vec<f64> = log[log_before..]
        .lines()
        .filter(|l| l.contains("PLEG relist"))
        .filter_map(|l| field(l, "tookUs"))
        .map(|us| us / 1000.0)
        .collect();
    let avg_mib = |v: &[f64]| mean(v) / 1024.0 / 1024.0;
    Footprint {
        rss_mib: avg_mib(&rss),
        cpu_cores: cpu_s / secs,
        containerd_rss_mib: avg_mib(&crss),
        containerd_cpu_cores: c_s / secs,
        cpu_ms_per_relist: cpu_s * 1000.0 / relist_ms.len().max(1) as f64,
        relist_ms: sorted(relist_ms),
        tasks: tasks0.zip(tasks1).map(|(a, b)| task_cores(&a, &b, secs)),
    }
}
