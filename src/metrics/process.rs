//! `process_*` families read from `/proc/self` at scrape time, the Go client's process
//! collector's set as kubelet serves it (the prometheus crate's process collector needs
//! its `process` feature and more dependencies; a few numbers from small files do not).

use std::collections::HashMap;
use std::io::Read;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, Metric, MetricFamily, MetricType};

/// `/proc/self/stat` and `/proc/stat` are small; reads stop here.
const MAX_PROC_READ: u64 = 64 * 1024;

const START: (&str, &str) = (
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
);
const CPU: (&str, &str) = (
    "process_cpu_seconds_total",
    "Total user and system CPU time spent in seconds.",
);
const RSS: (&str, &str) = (
    "process_resident_memory_bytes",
    "Resident memory size in bytes.",
);

const OPEN_FDS: (&str, &str) = ("process_open_fds", "Number of open file descriptors.");
const MAX_FDS: (&str, &str) = (
    "process_max_fds",
    "Maximum number of open file descriptors.",
);
const VSIZE: (&str, &str) = (
    "process_virtual_memory_bytes",
    "Virtual memory size in bytes.",
);
const VSIZE_MAX: (&str, &str) = (
    "process_virtual_memory_max_bytes",
    "Maximum amount of virtual memory available in bytes.",
);
const NET_RX: (&str, &str) = (
    "process_network_receive_bytes_total",
    "Number of bytes received by the process over the network.",
);
const NET_TX: (&str, &str) = (
    "process_network_transmit_bytes_total",
    "Number of bytes sent by the process over the network.",
);
/// Descriptors counted at most (the count stops there).
const MAX_FDS_COUNTED: usize = 1 << 20;

/// The process collector: start time, CPU seconds, memory, descriptors and network
/// bytes (`full`), or the start time alone (the probes registry, as kubelet's).
pub(crate) struct Process {
    full: bool,
    descs: Vec<Desc>,
}

impl Process {
    pub(crate) fn new(full: bool) -> prometheus::Result<Process> {
        let mut descs = vec![desc(START)?];
        if full {
            for d in [
                CPU, RSS, OPEN_FDS, MAX_FDS, VSIZE, VSIZE_MAX, NET_RX, NET_TX,
            ] {
                descs.push(desc(d)?);
            }
        }
        Ok(Process { full, descs })
    }
}

fn desc((name, help): (&str, &str)) -> prometheus::Result<Desc> {
    Desc::new(name.into(), help.into(), vec![], HashMap::new())
}

fn read_small(path: &str) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_READ)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Fields of `/proc/self/stat` after the command (which may hold spaces and parens).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// (start time in unix seconds, CPU seconds, RSS bytes) from the stat files' text.
pub(crate) fn parse(stat: &str, proc_stat: &str, ticks: f64, page: f64) -> Option<(f64, f64, f64)> {
    let f = stat_fields(stat)?;
    // After the command: state is field 3, so field n is f[n - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<f64>().ok();
    let (utime, stime, start, rss) = (num(14)?, num(15)?, num(22)?, num(24)?);
    let btime = crate::procfs::boot_time_secs(proc_stat)? as f64;
    Some((btime + start / ticks, (utime + stime) / ticks, rss * page))
}

/// A soft limit of `/proc/self/limits` (`Max open files  1024  4096  files`); the Go
/// client's procfs reads `unlimited` as the largest u64.
pub(crate) fn soft_limit(limits: &str, name: &str) -> Option<f64> {
    Some(match crate::procfs::soft_limit(limits, name)? {
        crate::procfs::Limit::Unlimited => u64::MAX as f64,
        crate::procfs::Limit::Max(v) => v as f64,
    })
}

/// `IpExt: … InOctets … OutOctets` of `/proc/self/net/netstat` (the names line, then
/// the values line).
pub(crate) fn ip_octets(netstat: &str) -> Option<(f64, f64)> {
    let mut lines = netstat.lines().filter(|l| l.starts_with("IpExt:"));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let values: Vec<&str> = lines.next()?.split_whitespace().collect();
    let at = |n: &str| -> Option<f64> {
        let i = names.iter().position(|x| *x == n)?;
        values.get(i)?.parse::<f64>().ok()
    };
    Some((at("InOctets")?, at("OutOctets")?))
}

/// Virtual memory size: field 23 of `/proc/self/stat`.
fn vsize(stat: &str) -> Option<f64> {
    stat_fields(stat)?.get(23 - 3)?.parse().ok()
}

fn open_fds() -> Option<f64> {
    let n = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .take(MAX_FDS_COUNTED)
        .count();
    Some(n as f64)
}

fn counter(v: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v);
    let mut m = Metric::default();
    m.set_counter(c);
    m
}

/// The families beyond start time, CPU and RSS: each left out when its file cannot
/// be read, as the Go client leaves out what procfs cannot give.
fn more_families(stat: &str, out: &mut Vec<MetricFamily>) {
    let g = |(name, help): (&str, &str), v: f64| family(name, help, MetricType::GAUGE, gauge(v));
    let limits = read_small("/proc/self/limits").unwrap_or_default();
    if let Some(n) = open_fds() {
        out.push(g(OPEN_FDS, n));
    }
    if let Some(n) = soft_limit(&limits, "Max open files") {
        out.push(g(MAX_FDS, n));
    }
    if let Some(n) = vsize(stat) {
        out.push(g(VSIZE, n));
    }
    if let Some(n) = soft_limit(&limits, "Max address space") {
        out.push(g(VSIZE_MAX, n));
    }
    if let Some((rx, tx)) = read_small("/proc/self/net/netstat")
        .as_deref()
        .and_then(ip_octets)
    {
        out.push(family(NET_RX.0, NET_RX.1, MetricType::COUNTER, counter(rx)));
        out.push(family(NET_TX.0, NET_TX.1, MetricType::COUNTER, counter(tx)));
    }
}

fn family(name: &str, help: &str, t: MetricType, m: Metric) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.into());
    f.set_help(help.into());
    f.set_field_type(t);
    f.set_metric(vec![m]);
    f
}

fn gauge(v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::default();
    m.set_gauge(g);
    m
}

impl Collector for Process {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        let (Some(stat), Some(proc_stat)) =
            (read_small("/proc/self/stat"), read_small("/proc/stat"))
        else {
            return vec![];
        };
        let Some((start, cpu, rss)) = parse(&stat, &proc_stat, ticks, page) else {
            return vec![];
        };
        let mut out = vec![family(START.0, START.1, MetricType::GAUGE, gauge(start))];
        if self.full {
            out.push(family(CPU.0, CPU.1, MetricType::COUNTER, counter(cpu)));
            out.push(family(RSS.0, RSS.1, MetricType::GAUGE, gauge(rss)));
            more_families(&stat, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_command() {
        let stat = "42 (ox let) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1000 12345678 300 18446744073709551615";
        let (start, cpu, rss) = parse(stat, "cpu 1 2\nbtime 1700000000\n", 100.0, 4096.0).unwrap();
        assert_eq!(start, 1_700_000_010.0);
        assert_eq!(cpu, 3.0);
        assert_eq!(rss, 300.0 * 4096.0);
    }

    #[test]
    fn reads_limits_and_netstat() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\nMax address space         unlimited            unlimited            bytes\n";
        assert_eq!(soft_limit(limits, "Max open files"), Some(1024.0));
        assert_eq!(
            soft_limit(limits, "Max address space"),
            Some(u64::MAX as f64)
        );
        let netstat =
            "TcpExt: A B\nTcpExt: 1 2\nIpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 500 700\n";
        assert_eq!(ip_octets(netstat), Some((500.0, 700.0)));
    }

    #[test]
    fn reads_this_process() {
        let fams = Process::new(true).unwrap().collect();
        let names: Vec<&str> = fams
            .iter()
            .map(prometheus::proto::MetricFamily::name)
            .collect();
        assert_eq!(
            names,
            [
                "process_start_time_seconds",
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
                "process_open_fds",
                "process_max_fds",
                "process_virtual_memory_bytes",
                "process_virtual_memory_max_bytes",
                "process_network_receive_bytes_total",
                "process_network_transmit_bytes_total",
            ]
        );
        let value = |name: &str| {
            let f = fams.iter().find(|f| f.name() == name).unwrap();
            let m = &f.get_metric()[0];
            m.get_gauge().get_value().max(m.get_counter().get_value())
        };
        // This test process has at least stdin, stdout, stderr and /proc/self/fd open.
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        let start = fams[0].get_metric()[0].get_gauge().get_value();
        assert!(start > 1.5e9, "{start}");
    }
}
