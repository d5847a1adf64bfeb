//! `/metrics/cadvisor`: the container metrics kubelet serves from its embedded
//! cAdvisor, rendered from the metric advisor's latest readings in cAdvisor's names,
//! HELP texts, types and labels (`container`, `id`, `image`, `name`, `namespace`,
//! `pod`, every one present even when empty, as kubelet's label function sets them).
//!
//! Rows are the cgroups the advisor reads: the root (`id="/"`), each pod's cgroup and
//! each running container's. Families here are those of kubelet's metric set that the
//! readings hold: CPU usage and CFS throttling, memory usage, working set, RSS and page
//! cache, the memory limit, start time, last seen, and the pressure stall totals
//! (`KubeletPSI`, GA in 1.36) where the kernel keeps PSI. A scrape adds what it reads
//! for itself (`cadvisor_scraped`: block I/O, network, processes, the CPU spec, the
//! machine). What cAdvisor has beyond them is listed in `docs/kind.md`.

use std::time::SystemTime;

use super::cadvisor_scraped::{ScrapedFamilies, machine_families};
use super::cgroup_extras::ExtrasCache;
use super::cgroup_extras::{Extras, RowKind};
use super::machine::{Machine, MachineReader};
use super::text_format::{Family, Labels, Sample, render, scrape_error};
use crate::contracts::{CgroupReading, Psi, Snapshot};

/// One cgroup's row: its labels (without `cpu`), reading and start time, its cgroup
/// below the mount and where its network counters come from.
struct Row<'a> {
    labels: Labels,
    reading: &'a CgroupReading,
    started_at: SystemTime,
    cgroup: &'a str,
    kind: RowKind,
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
        cgroup: "",
        kind: RowKind::Root,
    }];
    for p in &snap.pods {
        if let (Some(reading), Some(path)) = (&p.cgroup, &p.cgroup_path) {
            rows.push(Row {
                labels: row_labels("", format!("/{path}"), "", "", &p.namespace, &p.name),
                reading,
                started_at: p.started_at,
                cgroup: path,
                kind: RowKind::Pod,
            });
        }
        for c in &p.containers {
            let id = format!("/{}", c.cgroup_path);
            rows.push(Row {
                labels: row_labels(&c.name, id, &c.image, &c.id, &p.namespace, &p.name),
                reading: &c.cgroup,
                started_at: c.created_at,
                cgroup: &c.cgroup_path,
                kind: RowKind::Container,
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

pub(super) fn unix_millis(t: SystemTime) -> Option<i64> {
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

/// What one scrape reads beyond the snapshot: each row's cgroup files (by its cgroup
/// below the mount) and the machine (None: it could not be read).
pub(crate) struct ScrapeReads<'a> {
    pub extras: &'a mut dyn FnMut(&str, RowKind) -> Extras,
    pub machine: Option<&'a Machine>,
}

/// The text for `snapshot` at `now`; None (no round read yet) is cAdvisor's failed
/// listing: `container_scrape_error 1` and no container.
pub(crate) fn render_cadvisor_metrics(
    snapshot: Option<&Snapshot>,
    now: SystemTime,
    reads: ScrapeReads<'_>,
) -> String {
    let mut families = CadvisorFamilies::new();
    let mut scraped = ScrapedFamilies::new();
    if let Some(snap) = snapshot {
        for row in rows(snap) {
            let ts = unix_millis(row.reading.time);
            scraped.add_reading(&row.labels, row.reading, ts);
            let extras = (reads.extras)(row.cgroup, row.kind);
            let read_at = unix_millis(extras.time.unwrap_or(now));
            scraped.add_extras(&row.labels, &extras, read_at);
            families.add(row, now);
        }
    }
    let mut all = families.into_vec();
    all.extend(scraped.into_vec());
    all.extend(machine_families(reads.machine));
    all.push(scrape_error("container_scrape_error", snapshot.is_some()));
    render(all)
}

/// One scrape of this host: the snapshot, each row's cgroup files (kept for a
/// housekeeping interval) and the machine. Blocking: call it off the async runtime.
pub(crate) fn scrape_cadvisor_metrics(
    snapshot: Option<&Snapshot>,
    cgroups: &ExtrasCache,
    machine: &MachineReader,
) -> String {
    let now = SystemTime::now();
    let m = machine.get(now);
    cgroups.serve(now, |extras| {
        let reads = ScrapeReads {
            extras,
            machine: Some(&m),
        };
        render_cadvisor_metrics(snapshot, now, reads)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::build;
    use std::time::Duration;

    fn now() -> SystemTime {
        build::tests::at(1_700_000_010) + Duration::from_millis(250)
    }

    /// The text with no cgroup files and no machine read.
    fn rendered(snap: Option<&Snapshot>) -> String {
        let reads = ScrapeReads {
            extras: &mut |_, _| Extras::default(),
            machine: None,
        };
        render_cadvisor_metrics(snap, now(), reads)
    }

    #[test]
    fn before_any_reading_only_the_scrape_error_is_set() {
        assert_eq!(
            rendered(None),
            "# HELP container_scrape_error 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE container_scrape_error gauge\ncontainer_scrape_error 1\n\
             # HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.\n\
             # TYPE machine_scrape_error gauge\nmachine_scrape_error 1\n"
        );
    }

    #[test]
    fn rows_carry_kubelets_labels_and_cadvisors_names() {
        let text = rendered(Some(&build::tests::snapshot()));
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
        assert_eq!(names.len(), 14, "{names:?}");
        assert!(!text.contains("[STABLE]"));
    }

    #[test]
    fn throttling_is_written_only_for_a_cgroup_with_periods() {
        let mut snap = build::tests::snapshot();
        let text = rendered(Some(&snap));
        assert!(!text.contains("container_cpu_cfs_periods_total"), "{text}");
        let cpu = snap.pods[0].containers[1].cgroup.cpu.as_mut().unwrap();
        cpu.throttling = Some(crate::contracts::Throttling {
            periods: 40,
            throttled_periods: 3,
            throttled_nanos: 250_000_000,
        });
        let text = rendered(Some(&snap));
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
        let text = rendered(Some(&snap));
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
        let text = rendered(Some(&snap));
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

    /// Each row's scrape-time files and the machine, in cAdvisor's names and labels:
    /// per-device I/O, the pod's interfaces, processes and the CPU spec.
    #[test]
    fn scrape_time_files_and_the_machine_become_cadvisors_families() {
        use super::super::cgroup_extras::{CpuSpec, DeviceIo, Interface, Processes};
        let snap = build::tests::snapshot();
        let mut extras = |rel: &str, kind: RowKind| {
            let mut x = Extras::default();
            if rel == "kubepods/burstable/podu1/c1" {
                x.io.push(DeviceIo {
                    major: 8,
                    minor: 0,
                    device: "/dev/sda".into(),
                    bytes: vec![("Read".into(), 4096), ("Write".into(), 8192)],
                    ios: vec![("Read".into(), 1), ("Write".into(), 2)],
                });
                x.processes = Some(Processes {
                    count: 2,
                    fds: 9,
                    sockets: 1,
                    threads: 3,
                    threads_max: 0,
                });
                x.cpu = Some(CpuSpec {
                    shares: 102,
                    period: 100_000,
                    quota: Some(50_000),
                });
                x.max_open_files = Some(1024);
            }
            if kind == RowKind::Pod {
                x.network.push(Interface {
                    name: "eth0".into(),
                    rx: [10, 2, 0, 1],
                    tx: [20, 3, 0, 0],
                });
            }
            x
        };
        let machine = Machine {
            time: now(),
            machine_id: "m1".into(),
            system_uuid: "u1".into(),
            boot_id: "b1".into(),
            cpus: 4,
            physical_cores: 2,
            sockets: 1,
            memory_bytes: 1 << 30,
            swap_bytes: 0,
        };
        let reads = ScrapeReads {
            extras: &mut extras,
            machine: Some(&machine),
        };
        let text = render_cadvisor_metrics(Some(&snap), now(), reads);
        let app = r#"container="app",id="/kubepods/burstable/podu1/c1",image="docker.io/library/app:1",name="c1",namespace="default",pod="web""#;
        let app_on = |extra: &str| {
            format!(
                r#"container="app",{extra}id="/kubepods/burstable/podu1/c1",image="docker.io/library/app:1",name="c1",namespace="default",pod="web""#
            )
        };
        let sda = app_on(r#"device="/dev/sda","#);
        let app_then = |extra: &str| format!("{app},{extra}");
        let pod_eth0 = r#"container="",id="/kubepods/burstable/podu1",image="",interface="eth0",name="",namespace="default",pod="web""#;
        let ids = r#"boot_id="b1",machine_id="m1",system_uuid="u1""#;
        for line in [
            "# TYPE container_fs_writes_bytes_total counter".to_string(),
            format!("container_fs_writes_bytes_total{{{sda}}} 8192 1700000010250"),
            format!("container_fs_reads_total{{{sda}}} 1 1700000010250"),
            format!(
                "container_blkio_device_usage_total{{{}}} 4096 1700000010250",
                app_on(r#"device="/dev/sda","#).replace(
                    r#"image="docker.io/library/app:1","#,
                    r#"image="docker.io/library/app:1",major="8",minor="0","#
                ).replace(r#"namespace="default","#, r#"namespace="default",operation="Read","#)
            ),
            format!("container_network_receive_bytes_total{{{pod_eth0}}} 10 1700000010250"),
            format!("container_network_transmit_packets_total{{{pod_eth0}}} 3 1700000010250"),
            format!("container_file_descriptors{{{app}}} 9 1700000010250"),
            format!("container_threads_max{{{app}}} 0 1700000010250"),
            format!("container_spec_cpu_quota{{{app}}} 50000"),
            format!("container_spec_cpu_shares{{{app}}} 102"),
            format!(
                "container_ulimits_soft{{{}}} 1024 1700000010250",
                app_then(r#"ulimit="max_open_files""#)
            ),
            format!("container_cpu_load_average_10s{{{app}}} 0 1700000003000"),
            format!(
                "container_memory_failures_total{{{}}} 7 1700000003000",
                app_on(r#"failure_type="pgfault","#).replace(
                    r#"pod="web""#,
                    r#"pod="web",scope="hierarchy""#
                )
            ),
            format!("machine_cpu_cores{{{ids}}} 4 1700000010250"),
            r#"machine_nvm_capacity{boot_id="b1",machine_id="m1",mode="app_direct_mode",system_uuid="u1"} 0 1700000010250"#.to_string(),
            "machine_scrape_error 0".into(),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
        // No network on a container row: it shares its pod's namespace.
        assert!(!text.contains(&format!("container_network_receive_bytes_total{{{app}")));
    }
}
