//! Per-container CPI (koordlet's `performance` collector: `perf_event_open` in cgroup
//! mode on every CPU, cycles and instructions, a minute apart). It needs the CPU's
//! hardware counters. The maintained `perf-event2` crate wraps `perf_event_open` with
//! a safe API, cgroup mode included, so oxlet would need no `unsafe` code of its own;
//! but the machines oxlet is built and tested on are VMs without a PMU, where
//! nothing could check what it counts, so the collector is not built yet. It says
//! why once, naming what this node has.

use std::path::Path;
use std::time::Duration;

use super::{CollectFuture, Collector, Shared};

/// Where the kernel lists the CPU's hardware counters when it has them.
const PMU: &str = "/sys/bus/event_source/devices/cpu";

pub(crate) struct PerfCollector;

impl Collector for PerfCollector {
    fn name(&self) -> &'static str {
        "cpi"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn disabled_reason(&self) -> Option<String> {
        Some(if Path::new(PMU).exists() {
            "CPI collection is not built yet (it would use perf-event2's cgroup counters)".into()
        } else {
            format!("this node has no hardware performance counters ({PMU} is absent)")
        })
    }

    fn collect<'a>(&'a mut self, _shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async {})
    }
}
