//! The `/metrics/cadvisor` families a scrape reads for itself (see `cgroup_extras`):
//! block I/O per device, network per interface, processes and descriptors, the CPU
//! spec; with the page-fault counters and the load average of the advisor's readings,
//! and the machine collector's `machine_*` families. Names, HELP texts, types and
//! extra labels are cAdvisor's, for the metric set kubelet asks it for.

use super::cgroup_extras::Extras;
use super::machine::Machine;
use super::text_format::{Family, Labels, Sample};
use crate::contracts::CgroupReading;

/// The network families, receive then transmit, each bytes, packets, errors, dropped.
const NETWORK: [[(&str, &str); 4]; 2] = [
    [
        (
            "container_network_receive_bytes_total",
            "Cumulative count of bytes received",
        ),
        (
            "container_network_receive_packets_total",
            "Cumulative count of packets received",
        ),
        (
            "container_network_receive_errors_total",
            "Cumulative count of errors encountered while receiving",
        ),
        (
            "container_network_receive_packets_dropped_total",
            "Cumulative count of packets dropped while receiving",
        ),
    ],
    [
        (
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
        ),
        (
            "container_network_transmit_packets_total",
            "Cumulative count of packets transmitted",
        ),
        (
            "container_network_transmit_errors_total",
            "Cumulative count of errors encountered while transmitting",
        ),
        (
            "container_network_transmit_packets_dropped_total",
            "Cumulative count of packets dropped while transmitting",
        ),
    ],
];

/// The scrape-time container families.
pub(super) struct ScrapedFamilies {
    /// Bytes read, bytes written, reads, writes (per `device`).
    fs: [Family; 4],
    blkio: Family,
    /// `[receive, transmit]` × bytes, packets, errors, dropped (per `interface`).
    network: [[Family; 4]; 2],
    /// Processes, descriptors, sockets, threads, thread limit.
    processes: [Family; 5],
    /// CPU period, quota, shares.
    spec_cpu: [Family; 3],
    ulimits: Family,
    memory_failures: Family,
    load: Family,
}

fn with(labels: &Labels, extra: &[(&'static str, String)]) -> Labels {
    let mut l = labels.clone();
    l.extend(extra.iter().cloned());
    l.sort_by(|a, b| a.0.cmp(b.0));
    l
}

impl ScrapedFamilies {
    pub(super) fn new() -> ScrapedFamilies {
        let counter = |name, help| Family::new(name, "counter", help);
        let gauge = |name, help| Family::new(name, "gauge", help);
        ScrapedFamilies {
            fs: [
                counter(
                    "container_fs_reads_bytes_total",
                    "Cumulative count of bytes read",
                ),
                counter(
                    "container_fs_writes_bytes_total",
                    "Cumulative count of bytes written",
                ),
                counter(
                    "container_fs_reads_total",
                    "Cumulative count of reads completed",
                ),
                counter(
                    "container_fs_writes_total",
                    "Cumulative count of writes completed",
                ),
            ],
            blkio: counter(
                "container_blkio_device_usage_total",
                "Blkio Device bytes usage",
            ),
            network: NETWORK.map(|side| side.map(|(n, h)| counter(n, h))),
            processes: [
                gauge(
                    "container_processes",
                    "Number of processes running inside the container.",
                ),
                gauge(
                    "container_file_descriptors",
                    "Number of open file descriptors for the container.",
                ),
                gauge(
                    "container_sockets",
                    "Number of open sockets for the container.",
                ),
                gauge(
                    "container_threads",
                    "Number of threads running inside the container",
                ),
                gauge(
                    "container_threads_max",
                    "Maximum number of threads allowed inside the container, infinity if value is zero",
                ),
            ],
            spec_cpu: [
                gauge("container_spec_cpu_period", "CPU period of the container."),
                gauge("container_spec_cpu_quota", "CPU quota of the container."),
                gauge("container_spec_cpu_shares", "CPU share of the container."),
            ],
            ulimits: gauge(
                "container_ulimits_soft",
                "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice",
            ),
            memory_failures: counter(
                "container_memory_failures_total",
                "Cumulative count of memory allocation failures.",
            ),
            load: gauge(
                "container_cpu_load_average_10s",
                "Value of container cpu load average over the last 10 seconds.",
            ),
        }
    }

    /// One row's samples from its scrape-time files; stats carry `ts`, the spec none.
    #[allow(
        clippy::cast_precision_loss,
        reason = "metric values are float64 in cAdvisor too"
    )]
    pub(super) fn add_extras(&mut self, labels: &Labels, x: &Extras, ts: Option<i64>) {
        let at = |labels: Labels, value: u64| Sample {
            labels,
            value: value as f64,
            time_ms: ts,
        };
        for d in &x.io {
            let dev = with(labels, &[("device", d.device.clone())]);
            let values = [
                d.bytes("Read"),
                d.bytes("Write"),
                d.ios("Read"),
                d.ios("Write"),
            ];
            for (family, v) in self.fs.iter_mut().zip(values) {
                family.samples.push(at(dev.clone(), v.unwrap_or(0)));
            }
            for (op, v) in &d.bytes {
                let extra = [
                    ("device", d.device.clone()),
                    ("major", d.major.to_string()),
                    ("minor", d.minor.to_string()),
                    ("operation", op.clone()),
                ];
                self.blkio.samples.push(at(with(labels, &extra), *v));
            }
        }
        for i in &x.network {
            let l = with(labels, &[("interface", i.name.clone())]);
            for (side, values) in self.network.iter_mut().zip([i.rx, i.tx]) {
                for (family, v) in side.iter_mut().zip(values) {
                    family.samples.push(at(l.clone(), v));
                }
            }
        }
        if let Some(p) = x.processes {
            let values = [p.count, p.fds, p.sockets, p.threads, p.threads_max];
            for (family, v) in self.processes.iter_mut().zip(values) {
                family.samples.push(at(labels.clone(), v));
            }
        }
        if let Some(n) = x.max_open_files {
            self.ulimits.samples.push(Sample {
                labels: with(labels, &[("ulimit", "max_open_files".to_string())]),
                value: n as f64,
                time_ms: ts,
            });
        }
        if let Some(c) = x.cpu {
            let spec = |value: u64| Sample {
                labels: labels.clone(),
                value: value as f64,
                time_ms: None,
            };
            self.spec_cpu[0].samples.push(spec(c.period));
            if let Some(q) = c.quota {
                self.spec_cpu[1].samples.push(spec(q));
            }
            self.spec_cpu[2].samples.push(spec(c.shares));
        }
    }

    /// One row's samples from the advisor's reading: the page faults (cAdvisor writes
    /// the same counters for both scopes), and the load average, which kubelet's
    /// cAdvisor writes as 0 for every cgroup with CPU stats: kubelet never turns on
    /// its load reader (`--enable_load_reader`).
    #[allow(
        clippy::cast_precision_loss,
        reason = "metric values are float64 in cAdvisor too"
    )]
    pub(super) fn add_reading(&mut self, labels: &Labels, r: &CgroupReading, ts: Option<i64>) {
        if let Some(m) = r.memory {
            for (kind, v) in [
                ("pgfault", m.page_faults),
                ("pgmajfault", m.major_page_faults),
            ] {
                for scope in ["container", "hierarchy"] {
                    let extra = [
                        ("failure_type", kind.to_string()),
                        ("scope", scope.to_string()),
                    ];
                    self.memory_failures.samples.push(Sample {
                        labels: with(labels, &extra),
                        value: v as f64,
                        time_ms: ts,
                    });
                }
            }
        }
        if r.cpu.is_some() {
            self.load.samples.push(Sample {
                labels: labels.clone(),
                value: 0.0,
                time_ms: ts,
            });
        }
    }

    pub(super) fn into_vec(self) -> Vec<Family> {
        let mut all: Vec<Family> = Vec::new();
        all.extend(self.fs);
        all.push(self.blkio);
        all.extend(self.network.into_iter().flatten());
        all.extend(self.processes);
        all.extend(self.spec_cpu);
        all.push(self.ulimits);
        all.push(self.memory_failures);
        all.push(self.load);
        all
    }
}

/// The machine collector's families, labelled by the machine's ids, with the time the
/// machine was read. The NVM gauges are 0: kubelet's cAdvisor is built without the
/// NVM library, so it writes 0 whatever the machine has.
#[allow(
    clippy::cast_precision_loss,
    reason = "metric values are float64 in cAdvisor too"
)]
pub(super) fn machine_families(m: Option<&Machine>) -> Vec<Family> {
    let mut error = Family::new(
        "machine_scrape_error",
        "gauge",
        "1 if there was an error while getting machine metrics, 0 otherwise.",
    );
    error.samples.push(Sample {
        labels: Vec::new(),
        value: if m.is_some() { 0.0 } else { 1.0 },
        time_ms: None,
    });
    let Some(m) = m else { return vec![error] };
    let ts = super::cadvisor_metrics::unix_millis(m.time);
    let ids: Labels = vec![
        ("boot_id", m.boot_id.clone()),
        ("machine_id", m.machine_id.clone()),
        ("system_uuid", m.system_uuid.clone()),
    ];
    let gauge = |name, help, value: u64| {
        let mut f = Family::new(name, "gauge", help);
        f.samples.push(Sample {
            labels: ids.clone(),
            value: value as f64,
            time_ms: ts,
        });
        f
    };
    let mut nvm = Family::new(
        "machine_nvm_capacity",
        "gauge",
        "NVM capacity value labeled by NVM mode (memory mode or app direct mode).",
    );
    for mode in ["memory_mode", "app_direct_mode"] {
        nvm.samples.push(Sample {
            labels: with(&ids, &[("mode", mode.to_string())]),
            value: 0.0,
            time_ms: ts,
        });
    }
    vec![
        error,
        gauge(
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            m.physical_cores,
        ),
        gauge("machine_cpu_cores", "Number of logical CPU cores.", m.cpus),
        gauge("machine_cpu_sockets", "Number of CPU sockets.", m.sockets),
        gauge(
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            m.memory_bytes,
        ),
        gauge(
            "machine_swap_bytes",
            "Amount of swap memory available on the machine.",
            m.swap_bytes,
        ),
        nvm,
        gauge("machine_nvm_avg_power_budget_watts", "NVM power budget.", 0),
    ]
}
