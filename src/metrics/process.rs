//! `process_*` families read from `/proc/self` at scrape time (the prometheus crate's
//! process collector needs its `process` feature and more dependencies; three numbers
//! from two small files do not).

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

/// The process collector: start time, CPU seconds, resident memory (`full`), or the
/// start time alone (the probes registry, as kubelet's).
pub(crate) struct Process {
    full: bool,
    descs: Vec<Desc>,
}

impl Process {
    pub(crate) fn new(full: bool) -> prometheus::Result<Process> {
        let mut descs = vec![desc(START)?];
        if full {
            descs.push(desc(CPU)?);
            descs.push(desc(RSS)?);
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
    let btime = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<f64>()
        .ok()?;
    Some((btime + start / ticks, (utime + stime) / ticks, rss * page))
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
            let mut c = Counter::default();
            c.set_value(cpu);
            let mut m = Metric::default();
            m.set_counter(c);
            out.push(family(CPU.0, CPU.1, MetricType::COUNTER, m));
            out.push(family(RSS.0, RSS.1, MetricType::GAUGE, gauge(rss)));
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
                "process_resident_memory_bytes"
            ]
        );
        let start = fams[0].get_metric()[0].get_gauge().get_value();
        assert!(start > 1.5e9, "{start}");
    }
}
