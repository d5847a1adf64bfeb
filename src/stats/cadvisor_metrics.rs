//! `/metrics/cadvisor`: the container metrics kubelet serves from its embedded
//! cAdvisor, rendered from the metric advisor's latest readings in cAdvisor's names,
//! HELP texts, types and labels (`container`, `id`, `image`, `name`, `namespace`,
//! `pod`, every one present even when empty, as kubelet's label function sets them).
//!
//! Rows are the cgroups the advisor reads: the root (`id="/"`), each pod's cgroup and
//! each running container's. Families are those of kubelet's metric set that these
//! readings hold: CPU usage and CFS throttling, memory usage, working set, RSS and page
//! cache, the memory limit, start time, last seen, and the pressure stall totals
//! (`KubeletPSI`, GA in 1.36) where the kernel keeps PSI. What cAdvisor has beyond them
//! (per-device disk I/O, network, processes, machine facts, system slices, sandbox
//! containers) is listed in `docs/kind.md`.

use std::time::SystemTime;

use super::text_format::{Family, Labels, Sample, render, scrape_error};
use crate::contracts::{CgroupReading, Psi, Snapshot};

/// One cgroup's row: its labels (without `cpu`), reading and start time.
struct Row<'a> {
    labels: Labels,
    reading: &'a CgroupReading,
    started_at: SystemTime,
}

/// The six labels kubelet gives every cAdvisor row, in name order.
fn row_labels(container: &str, id: String, image: &str, name: &str, ns: &str, pod: &str) -> Labels {
    vec![
        ("container", container.to_string()),
        ("id", id),
        ("image", image.to_string()),
        ("name", name.to_string()),
        ("namespace", ns.to_string()),
        ("pod", pod.to_string()),
    ]
}

/// The rows of one snapshot: the root, then each pod and its containers.
fn rows(snap: &Snapshot) -> Vec<Row<'_>> {
    let mut rows = vec![Row {
        labels: row_labels("", "/".into(), "", "", "", ""),
        reading: &snap.node.cgroup,
        started_at: snap.node.started_at,
    }];
    for p in &snap.pods {
        if let (Some(reading), Some(path)) = (&p.cgroup, &p.cgroup_path) {
            rows.push(Row {
                labels: row_labels("", format!("/{path}"), "", "", &p.namespace, &p.name),
                reading,
                started_at: p.started_at,
            });
        }
        for c in &p.containers {
            let id = format!("/{}", c.cgroup_path);
            rows.push(Row {
                labels: row_labels(&c.name, id, &c.image, &c.id, &p.namespace, &p.name),
                reading: &c.cgroup,
                started_at: c.created_at,
            });
        }
    }
    rows
}

/// Whole seconds since the epoch (Go's `Time.Unix`), 0 before it.
fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unix_millis(t: SystemTime) -> Option<i64> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// The families kubelet's cAdvisor collector writes that the readings can fill.
struct CadvisorFamilies {
    cpu: Family,
    cfs_periods: Family,
    cfs_throttled_periods: Family,
    cfs_throttled_seconds: Family,
    mem_cache: Family,
    mem_rss: Family,
    mem_usage: Family,
    mem_working_set: Family,
    spec_mem_limit: Family,
    start_time: Family,
    last_seen: Family,
    /// `[cpu, memory, io]`, each `(stalled: full, waiting: some)`.
    pressure: [(Family, Family); 3],
}

/// cAdvisor's pressure families, `[cpu, memory, io]`, each `(stalled, waiting)`: the
/// stall totals of the `full` and the `some` line.
const PRESSURE: [[(&str, &str); 2]; 3] = [
    [
        (
            "container_pressure_cpu_stalled_seconds_total",
            "Total time duration no tasks in the container could make progress due to CPU congestion.",
        ),
        (
            "container_pressure_cpu_waiting_seconds_total",
            "Total time duration tasks in the container have waited due to CPU congestion.",
        ),
    ],
    [
        (
            "container_pressure_memory_stalled_seconds_total",
            "Total time duration no tasks in the container could make progress due to memory congestion.",
        ),
        (
            "container_pressure_memory_waiting_seconds_total",
            "Total time duration tasks in the container have waited due to memory congestion.",
        ),
    ],
    [
        (
            "container_pressure_io_stalled_seconds_total",
            "Total time duration no tasks in the container could make progress due to IO congestion.",
        ),
        (
            "container_pressure_io_waiting_seconds_total",
            "Total time duration tasks in the container have waited due to IO congestion.",
        ),
    ],
];

/// The `(stalled, waiting)` families of one resource of [`PRESSURE`].
fn pressure_families([stalled, waiting]: [(&'static str, &'static str); 2]) -> (Family, Family) {
    (
        Family::new(stalled.0, "counter", stalled.1),
        Family::new(waiting.0, "counter", waiting.1),
    )
}

impl CadvisorFamilies {
    fn new() -> CadvisorFamilies {
        let counter = |name, help| Family::new(name, "counter", help);
        let gauge = |name, help| Family::new(name, "gauge", help);
        CadvisorFamilies {
            cpu: counter(
                "container_cpu_usage_seconds_total",
                "Cumulative cpu time consumed in seconds.",
            ),
            cfs_periods: counter(
                "container_cpu_cfs_periods_total",
                "Number of elapsed enforcement period intervals.",
            ),
            cfs_throttled_periods: counter(
                "container_cpu_cfs_throttled_periods_total",
                "Number of throttled period intervals.",
            ),
            cfs_throttled_seconds: counter(
                "container_cpu_cfs_throttled_seconds_total",
                "Total time duration the container has been throttled.",
            ),
            mem_cache: gauge(
                "container_memory_cache",
                "Number of bytes of page cache memory.",
            ),
            mem_rss: gauge("container_memory_rss", "Size of RSS in bytes."),
            mem_usage: gauge(
                "container_memory_usage_bytes",
                "Current memory usage in bytes, including all memory regardless of when it was accessed",
            ),
            mem_working_set: gauge(
                "container_memory_working_set_bytes",
                "Current working set in bytes.",
            ),
            spec_mem_limit: gauge(
                "container_spec_memory_limit_bytes",
                "Memory limit for the container.",
            ),
            start_time: gauge(
                "container_start_time_seconds",
                "Start time of the container since unix epoch in seconds.",
            ),
            last_seen: gauge(
                "container_last_seen",
                "Last time a container was seen by the exporter",
            ),
            pressure: PRESSURE.map(pressure_families),
        }
    }

    /// The stall totals of one cgroup, in seconds (the kernel counts microseconds). A
    /// pressure file without a `full` line (the root's cpu) is 0, as cAdvisor writes an
    /// absent total.
    fn add_pressure(&mut self, labels: &Labels, reading: &CgroupReading, ts: Option<i64>) {
        let p = reading.pressure;
        for ((stalled, waiting), psi) in self.pressure.iter_mut().zip([p.cpu, p.memory, p.io]) {
            let Some(Psi { some, full }) = psi else {
                continue;
            };
            let seconds = |us: u64| us as f64 / 1e6;
            let full = full.map_or(0, |f| f.total_us);
            for (family, value) in [(stalled, seconds(full)), (waiting, seconds(some.total_us))] {
                family.samples.push(Sample {
                    labels: labels.clone(),
                    value,
                    time_ms: ts,
                });
            }
        }
    }

    /// One row's samples. Stats carry the reading's time as their timestamp; the spec
    /// metrics (start time, limit) none, as cAdvisor writes them.
    #[allow(
        clippy::cast_precision_loss,
        reason = "metric values are float64 in cAdvisor too"
    )]
    fn add(&mut self, row: Row<'_>, now: SystemTime) {
        let r = row.reading;
        let ts = unix_millis(r.time);
        let at = |labels: &Labels, value: f64| Sample {
            labels: labels.clone(),
            value,
            time_ms: ts,
        };
        if let Some(cpu) = r.cpu.filter(|c| c.usage_core_nanos > 0) {
            let mut labels = row.labels.clone();
            labels.insert(1, ("cpu", "total".into()));
            self.cpu.samples.push(Sample {
                labels,
                value: cpu.usage_core_nanos as f64 / 1e9,
                time_ms: ts,
            });
            // cAdvisor writes these for a cgroup with a CFS quota; a quota shows as
            // elapsed periods.
            if let Some(t) = cpu.throttling.filter(|t| t.periods > 0) {
                let l = &row.labels;
                (self.cfs_periods.samples).push(at(l, t.periods as f64));
                (self.cfs_throttled_periods.samples).push(at(l, t.throttled_periods as f64));
                (self.cfs_throttled_seconds.samples).push(at(l, t.throttled_nanos as f64 / 1e9));
            }
        }
        if let Some(m) = r.memory {
            let l = &row.labels;
            let cache = m.with_cache_bytes.saturating_sub(m.without_cache_bytes);
            self.mem_cache.samples.push(at(l, cache as f64));
            self.mem_rss.samples.push(at(l, m.rss_bytes as f64));
            self.mem_usage.samples.push(at(l, m.usage_bytes as f64));
            (self.mem_working_set.samples).push(at(l, m.working_set_bytes as f64));
            // No limit is written as 0 (cAdvisor's `specMemoryValue`).
            self.spec_mem_limit.samples.push(Sample {
                labels: row.labels.clone(),
                value: m.limit_bytes.unwrap_or(0) as f64,
                time_ms: None,
            });
        }
        self.add_pressure(&row.labels, r, ts);
        self.start_time.samples.push(Sample {
            labels: row.labels.clone(),
            value: unix_seconds(row.started_at) as f64,
            time_ms: None,
        });
        self.last_seen.samples.push(Sample {
            labels: row.labels,
            value: unix_seconds(now) as f64,
            time_ms: unix_millis(now),
        });
    }

    fn into_vec(self) -> Vec<Family> {
        let pressure = self.pressure.into_iter().flat_map(|(s, w)| [s, w]);
        let mut all = vec![
            self.cpu,
            self.cfs_periods,
            self.cfs_throttled_periods,
            self.cfs_throttled_seconds,
            self.mem_cache,
            self.mem_rss,
            self.mem_usage,
            self.mem_working_set,
            self.spec_mem_limit,
            self.start_time,
            self.last_seen,
        ];
        all.extend(pressure);
        all
    }
}

/// The text for `snapshot` at `now`; None (no round read yet) is cAdvisor's failed
/// listing: `container_scrape_error 1` and no container.
pub(crate) fn render_cadvisor_metrics(snapshot: Option<&Snapshot>, now: SystemTime) -> String {
    let mut families = CadvisorFamilies::new();
    if let Some(snap) = snapshot {
        for row in rows(snap) {
            families.add(row, now);
        }
    }
    let mut all = families.into_vec();
    all.push(scrape_error("container_scrape_error", snapshot.is_some()));
    render(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::build;
    use std::time::Duration;

    fn now() -> SystemTime {
        build::tests::at(1_700_000_010) + Duration::from_millis(250)
    }

    #[test]
    fn before_any_reading_only_the_scrape_error_is_set() {
        assert_eq!(
            render_cadvisor_metrics(None, now()),
            "# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE container_scrape_error gauge\ncontainer_scrape_error 1\n"
        );
    }

    #[test]
    fn rows_carry_kubelets_labels_and_cadvisors_names() {
        let text = render_cadvisor_metrics(Some(&build::tests::snapshot()), now());
        let app = r#"{container="app",id="/kubepods/burstable/podu1/c1",image="docker.io/library/app:1",name="c1",namespace="default",pod="web"}"#;
        let pod = r#"{container="",id="/kubepods/burstable/podu1",image="",name="",namespace="default",pod="web"}"#;
        let root = r#"{container="",id="/",image="",name="",namespace="",pod=""}"#;
        for line in [
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.".to_string(),
            "# TYPE container_cpu_usage_seconds_total counter".into(),
            r#"container_cpu_usage_seconds_total{container="app",cpu="total",id="/kubepods/burstable/podu1/c1",image="docker.io/library/app:1",name="c1",namespace="default",pod="web"} 1e-06 1700000003000"#.into(),
            format!("container_memory_working_set_bytes{app} 400 1700000003000"),
            format!("container_memory_working_set_bytes{pod} 900 1700000002000"),
            format!("container_memory_working_set_bytes{root} 1500 1700000001000"),
            format!("container_start_time_seconds{app} 1.690000001e+09"),
            format!("container_start_time_seconds{pod} 1.69e+09"),
            format!("container_last_seen{app} 1.70000001e+09 1700000010250"),
            "container_scrape_error 0".into(),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
        // Families in name order, each once, and no [STABLE] (cAdvisor's are raw).
        let types = text.lines().filter(|l| l.starts_with("# TYPE "));
        let names: Vec<&str> = types.filter_map(|l| l.split(' ').nth(2)).collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        assert_eq!(names.len(), 11, "{names:?}");
        assert!(!text.contains("[STABLE]"));
    }

    #[test]
    fn throttling_is_written_only_for_a_cgroup_with_periods() {
        let mut snap = build::tests::snapshot();
        let text = render_cadvisor_metrics(Some(&snap), now());
        assert!(!text.contains("container_cpu_cfs_periods_total"), "{text}");
        let cpu = snap.pods[0].containers[1].cgroup.cpu.as_mut().unwrap();
        cpu.throttling = Some(crate::contracts::Throttling {
            periods: 40,
            throttled_periods: 3,
            throttled_nanos: 250_000_000,
        });
        let text = render_cadvisor_metrics(Some(&snap), now());
        let side = r#"{container="side",id="/kubepods/burstable/podu1/c2",image="docker.io/library/side:2",name="c2",namespace="default",pod="web"}"#;
        for line in [
            format!("container_cpu_cfs_periods_total{side} 40 1700000004000"),
            format!("container_cpu_cfs_throttled_periods_total{side} 3 1700000004000"),
            format!("container_cpu_cfs_throttled_seconds_total{side} 0.25 1700000004000"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
    }

    /// The stall totals in seconds, for the cgroups whose pressure files were read; a
    /// file without a `full` line is a stalled total of 0.
    #[test]
    fn pressure_is_written_in_seconds_where_the_kernel_keeps_it() {
        let mut snap = build::tests::snapshot();
        let line = |total_us| crate::contracts::PsiLine {
            total_us,
            ..Default::default()
        };
        snap.pods[0].containers[0].cgroup.pressure.memory = Some(Psi {
            some: line(2_500_000),
            full: Some(line(1_000_000)),
        });
        let text = render_cadvisor_metrics(Some(&snap), now());
        let root = r#"{container="",id="/",image="",name="",namespace="",pod=""}"#;
        let app = r#"{container="app",id="/kubepods/burstable/podu1/c1",image="docker.io/library/app:1",name="c1",namespace="default",pod="web"}"#;
        for line in [
            "# HELP container_pressure_memory_stalled_seconds_total Total time duration no tasks in the container could make progress due to memory congestion.".to_string(),
            "# TYPE container_pressure_cpu_waiting_seconds_total counter".into(),
            format!("container_pressure_cpu_waiting_seconds_total{root} 5e-06 1700000001000"),
            format!("container_pressure_cpu_stalled_seconds_total{root} 0 1700000001000"),
            format!("container_pressure_memory_waiting_seconds_total{app} 2.5 1700000003000"),
            format!("container_pressure_memory_stalled_seconds_total{app} 1 1700000003000"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
        // Nothing for a resource whose file was not read.
        assert!(!text.contains(&format!("container_pressure_io_waiting_seconds_total{app}")));
        assert!(!text.contains(&format!(
            "container_pressure_memory_waiting_seconds_total{root}"
        )));
    }

    #[test]
    fn no_limit_is_zero_and_cache_is_the_file_pages() {
        let mut snap = build::tests::snapshot();
        let m = snap.pods[0].containers[0].cgroup.memory.as_mut().unwrap();
        m.limit_bytes = Some(64 << 20);
        m.with_cache_bytes = 700;
        m.without_cache_bytes = 300;
        let text = render_cadvisor_metrics(Some(&snap), now());
        let value = |name: &str, container: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name}{{container=\"{container}\"")))
                .and_then(|l| l.split(' ').nth(1))
                .map(str::to_string)
        };
        assert_eq!(
            value("container_spec_memory_limit_bytes", "app").as_deref(),
            Some("6.7108864e+07")
        );
        assert_eq!(
            value("container_spec_memory_limit_bytes", "side").as_deref(),
            Some("0")
        );
        assert_eq!(
            value("container_memory_cache", "app").as_deref(),
            Some("400")
        );
    }
}
