//! `/metrics/resource`: kubelet's resource metrics collector, rendered as Prometheus
//! text 0.0.4 from the CPU-and-memory summary, byte for byte as kubelet writes it
//! (families sorted, `[STABLE]` in HELP, Go's float formatting, ms timestamps, no
//! timestamp on `container_start_time_seconds`). metrics-server reads this.

use super::summary::{
    ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats, Summary,
};
use super::text_format::{Family, Labels, Sample, render, scrape_error};

/// The text for `summary`; None means the stats could not be read, which kubelet
/// reports as `resource_scrape_error 1` and nothing else.
pub(crate) fn render_resource_metrics(summary: Option<&Summary>) -> String {
    let mut families = ResourceFamilies::new(summary.is_some());
    if let Some(s) = summary {
        families.collect_node(&s.node);
        for p in &s.pods {
            families.collect_pod(p);
        }
    }
    render(families.into_vec())
}

/// The families kubelet's resource metrics collector describes, filled from one summary.
struct ResourceFamilies {
    node_cpu: Family,
    node_mem: Family,
    ctr_cpu: Family,
    ctr_mem: Family,
    ctr_start: Family,
    pod_cpu: Family,
    pod_mem: Family,
    scrape: Family,
}

impl ResourceFamilies {
    /// Every family empty but `resource_scrape_error`, which says whether the
    /// summary could be read (`scraped`).
    fn new(scraped: bool) -> ResourceFamilies {
        let scrape = scrape_error("resource_scrape_error", scraped);
        ResourceFamilies {
            node_cpu: Family::new(
                "node_cpu_usage_seconds_total",
                "counter",
                "Cumulative cpu time consumed by the node in core-seconds",
            ),
            node_mem: Family::new(
                "node_memory_working_set_bytes",
                "gauge",
                "Current working set of the node in bytes",
            ),
            ctr_cpu: Family::new(
                "container_cpu_usage_seconds_total",
                "counter",
                "Cumulative cpu time consumed by the container in core-seconds",
            ),
            ctr_mem: Family::new(
                "container_memory_working_set_bytes",
                "gauge",
                "Current working set of the container in bytes",
            ),
            ctr_start: Family::new(
                "container_start_time_seconds",
                "gauge",
                "Start time of the container since unix epoch in seconds",
            ),
            pod_cpu: Family::new(
                "pod_cpu_usage_seconds_total",
                "counter",
                "Cumulative cpu time consumed by the pod in core-seconds",
            ),
            pod_mem: Family::new(
                "pod_memory_working_set_bytes",
                "gauge",
                "Current working set of the pod in bytes",
            ),
            scrape,
        }
    }

    /// The node's cpu and memory samples (kubelet's `collectNodeCPUMetrics`,
    /// `collectNodeMemoryMetrics`).
    fn collect_node(&mut self, node: &NodeStats) {
        self.node_cpu
            .samples
            .extend(cpu_sample(node.cpu.as_ref(), Vec::new));
        self.node_mem
            .samples
            .extend(memory_sample(node.memory.as_ref(), Vec::new));
    }

    /// A pod's containers' samples, then the pod's own cpu and memory.
    fn collect_pod(&mut self, p: &PodStats) {
        let (pod, ns) = (&p.pod_ref.name, &p.pod_ref.namespace);
        for c in p.containers.iter().flatten() {
            self.collect_container(c, &p.pod_ref);
        }
        let pod_labels = || vec![("namespace", ns.clone()), ("pod", pod.clone())];
        self.pod_cpu
            .samples
            .extend(cpu_sample(p.cpu.as_ref(), pod_labels));
        self.pod_mem
            .samples
            .extend(memory_sample(p.memory.as_ref(), pod_labels));
    }

    /// One container's cpu, memory and start time samples.
    fn collect_container(&mut self, c: &ContainerStats, pod_ref: &PodReference) {
        let (pod, ns) = (&pod_ref.name, &pod_ref.namespace);
        let labels = || {
            vec![
                ("container", c.name.clone()),
                ("namespace", ns.clone()),
                ("pod", pod.clone()),
            ]
        };
        self.ctr_cpu
            .samples
            .extend(cpu_sample(c.cpu.as_ref(), labels));
        self.ctr_mem
            .samples
            .extend(memory_sample(c.memory.as_ref(), labels));
        if let Some(secs) = c.start_time.unix_seconds_f64().filter(|s| *s >= 1.0) {
            self.ctr_start.samples.push(Sample {
                labels: labels(),
                value: secs,
                time_ms: None,
            });
        }
    }

    /// Every family, each marked stable as kubelet's collector declares them.
    fn into_vec(self) -> Vec<Family> {
        [
            self.node_cpu,
            self.node_mem,
            self.ctr_cpu,
            self.ctr_mem,
            self.ctr_start,
            self.pod_cpu,
            self.pod_mem,
            self.scrape,
        ]
        .into_iter()
        .map(Family::stable)
        .collect()
    }
}

/// Cumulative cpu usage in core-seconds at the stats' time, when the stats have it.
#[allow(
    clippy::cast_precision_loss,
    reason = "metric values are float64 in kubelet too"
)]
fn cpu_sample(cpu: Option<&CpuStats>, labels: impl FnOnce() -> Labels) -> Option<Sample> {
    let cpu = cpu?;
    let ns = cpu.usage_core_nano_seconds?;
    Some(Sample {
        labels: labels(),
        value: ns as f64 / 1e9,
        time_ms: cpu.time.unix_millis(),
    })
}

/// The memory working set in bytes at the stats' time, when the stats have it.
#[allow(
    clippy::cast_precision_loss,
    reason = "metric values are float64 in kubelet too"
)]
fn memory_sample(memory: Option<&MemoryStats>, labels: impl FnOnce() -> Labels) -> Option<Sample> {
    let m = memory?;
    let ws = m.working_set_bytes?;
    Some(Sample {
        labels: labels(),
        value: ws as f64,
        time_ms: m.time.unix_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::build;
    use crate::stats::text_format::{escape, go_float};
    use crate::stats::volumes::VolumeUsage;

    #[test]
    fn floats_are_formatted_as_go_does() {
        for (v, want) in [
            (0.0, "0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (12.34, "12.34"),
            (999_999.0, "999999"),
            (1_000_000.0, "1e+06"),
            (123_456_789.0, "1.23456789e+08"),
            (2.5e7, "2.5e+07"),
            (1.6999e9, "1.6999e+09"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000_012_5, "1.25e-05"),
            (-0.5, "-0.5"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
            (0.1 + 0.2, "0.30000000000000004"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(go_float(v), want, "{v}");
        }
    }

    #[test]
    fn before_any_reading_only_the_scrape_error_is_set() {
        assert_eq!(
            render_resource_metrics(None),
            "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE resource_scrape_error gauge\nresource_scrape_error 1\n"
        );
    }

    /// metrics-server's reading (§5): a name followed by `{` or the end, the three
    /// labels found by searching the raw label text, the value and the ms timestamp.
    fn scrape(text: &str, name: &str, container: Option<&str>) -> Option<(f64, Option<i64>)> {
        text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, values) = if let Some(r) = rest.strip_prefix('{') {
                r.split_once("} ")?
            } else {
                ("", rest.strip_prefix(' ')?)
            };
            if let Some(c) = container {
                let find = |k: &str| {
                    labels
                        .split(&format!("{k}=\"")[..])
                        .nth(1)?
                        .split('"')
                        .next()
                };
                if find("container")? != c
                    || find("pod")? != "web"
                    || find("namespace")? != "default"
                {
                    return None;
                }
            }
            let mut parts = values.split(' ');
            let v: f64 = parts.next()?.parse().ok()?;
            Some((v, parts.next().map(|t| t.parse().unwrap())))
        })
    }

    #[test]
    fn metrics_server_reads_back_the_numbers() {
        let summary =
            build::build_summary(&build::tests::snapshot(), &VolumeUsage::default(), true);
        let text = render_resource_metrics(Some(&summary));
        assert_eq!(
            scrape(&text, "node_cpu_usage_seconds_total", None),
            Some((8.0, Some(1_700_000_001_000)))
        );
        assert_eq!(
            scrape(&text, "node_memory_working_set_bytes", None),
            Some((1500.0, Some(1_700_000_001_000)))
        );
        assert_eq!(
            scrape(&text, "container_cpu_usage_seconds_total", Some("app")),
            Some((1e-6, Some(1_700_000_003_000)))
        );
        assert_eq!(
            scrape(&text, "container_memory_working_set_bytes", Some("side")),
            Some((500.0, Some(1_700_000_004_000)))
        );
        assert_eq!(
            scrape(&text, "container_start_time_seconds", Some("app")),
            Some((1_690_000_001.0, None))
        );
        assert_eq!(
            scrape(&text, "resource_scrape_error", None),
            Some((0.0, None))
        );
        assert!(text.contains("\npod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 900 1700000002000\n"), "{text}");
        assert!(text.contains("# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds\n# TYPE container_cpu_usage_seconds_total counter\n"));
        assert!(!text.contains("scrape_error 0\nscrape_error") && !text.contains("\nscrape_error"));
        // Families in name order.
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 8);
    }

    #[test]
    fn timestamps_keep_milliseconds_and_start_times_their_fraction() {
        let mut snap = build::tests::snapshot();
        snap.node.cgroup.time =
            build::tests::at(1_700_000_001) + std::time::Duration::from_millis(123);
        snap.pods[0].containers[0].created_at =
            build::tests::at(1_690_000_001) + std::time::Duration::from_millis(500);
        let text = render_resource_metrics(Some(&build::build_summary(
            &snap,
            &VolumeUsage::default(),
            true,
        )));
        assert_eq!(
            scrape(&text, "node_cpu_usage_seconds_total", None),
            Some((8.0, Some(1_700_000_001_123)))
        );
        assert_eq!(
            scrape(&text, "container_start_time_seconds", Some("app")),
            Some((1_690_000_001.5, None))
        );
        assert!(text.contains("} 1.6900000015e+09\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
    }
}
