//! Per-container CPI (koordlet's performance collector: `perf_event_open` in cgroup
//! mode, cycles and instructions). oxlet forbids `unsafe` code and the call has no
//! safe wrapper in its dependencies, so the collector is always off; it says so once.

use std::time::Duration;

use super::{CollectFuture, Collector, Shared};

pub(crate) struct PerfCollector;

impl Collector for PerfCollector {
    fn name(&self) -> &'static str {
        "cpi"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn disabled_reason(&self) -> Option<String> {
        Some(
            "perf counters need perf_event_open, which needs unsafe code that oxlet forbids".into(),
        )
    }

    fn collect<'a>(&'a mut self, _shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async {})
    }
}
