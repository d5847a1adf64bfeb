//! koordlet's `beresource` collector: every second, the BestEffort tier's CPU as three
//! `node_be` samples in millicores, which BECPUEvict weighs against each other:
//! - `usage`: the BestEffort QoS cgroup's CPU time since the last round;
//! - `request`: the batch CPU requests (`kubernetes.io/batch-cpu`) of the pods labelled
//!   `koordinator.sh/qosClass: BE`;
//! - `real-limit`: what the cgroup may use now, its cpuset's CPUs, or its CFS quota
//!   when CPU suppress set a smaller one.
//!
//! It also sets `koordlet_be_suppress_be_used_cpu_cores`, as koordlet does here.

use std::sync::LazyLock;
use std::time::SystemTime;

use prometheus::{GaugeVec, Opts};
use tracing::{debug, warn};

use super::{CollectFuture, Collector, Shared};
use crate::cm::{CgroupFs as _, CgroupTree, QosFile, StatReader, parse_cpu_list};
use crate::metriccache::{MetricKind, label, unix_ms};

/// koordlet's `koordlet_be_suppress_be_used_cpu_cores{node}`.
static BE_USED_CPU: LazyLock<Option<GaugeVec>> = LazyLock::new(|| {
    let g = GaugeVec::new(
        Opts::new(
            "be_suppress_be_used_cpu_cores",
            "Number of cpu cores used by BE.",
        )
        .subsystem("koordlet"),
        &["node"],
    )
    .ok()?;
    if let Err(e) = crate::metrics::register(Box::new(g.clone())) {
        warn!(error = %e, "cannot register koordlet_be_suppress_be_used_cpu_cores");
    }
    Some(g)
});

pub(crate) struct BeCollector {
    tree: CgroupTree,
    reader: StatReader,
    /// The BestEffort QoS cgroup; None without per-QoS cgroups.
    path: Option<String>,
    node_name: String,
    /// The last CPU time read (ns) and when.
    prev: Option<(SystemTime, u64)>,
}

/// koordlet's usage: whole milliseconds of CPU over whole milliseconds of time, in
/// millicores (it divides first, to keep the precision an f64 of ns would lose).
pub(crate) fn usage_milli(prev: (SystemTime, u64), now: (SystemTime, u64)) -> Option<i64> {
    let elapsed_ms = now.0.duration_since(prev.0).ok()?.as_millis();
    let used_ms = now.1.checked_sub(prev.1)? / 1_000_000;
    (elapsed_ms > 0).then(|| (used_ms as f64 / elapsed_ms as f64 * 1000.0) as i64)
}

/// koordlet's `getBECPURealMilliLimit`: the cpuset's CPUs, or the CFS quota when it
/// is set and smaller.
pub(crate) fn real_limit_milli(cpus: usize, quota_us: Option<i64>, period_us: Option<u64>) -> i64 {
    let by_cpuset = cpus as i64 * 1000;
    match (quota_us, period_us) {
        (Some(q), Some(p)) if q >= 0 && p > 0 => by_cpuset.min(q * 1000 / p as i64),
        _ => by_cpuset,
    }
}

impl BeCollector {
    pub(crate) fn new(tree: CgroupTree, path: Option<String>, node_name: String) -> Self {
        BeCollector {
            reader: StatReader::new(tree.clone()),
            tree,
            path,
            node_name,
            prev: None,
        }
    }

    /// The tier's CPU time in ns and when it was read.
    fn cpu_time(&mut self, path: &str) -> Option<(SystemTime, u64)> {
        match self.reader.stats(path, false) {
            Ok(r) => Some((r.time, r.cpu?.usage_core_nanos)),
            Err(e) => {
                debug!(cgroup = path, error = %e, "metric advisor: the BestEffort cgroup's CPU not read");
                None
            }
        }
    }

    fn real_limit(&self, path: &str, shared: &Shared) -> i64 {
        // The QoS manager's reader of the same file (v2: the effective CPUs).
        let cpus = match self.tree.read_qos_file(path, QosFile::CpusetCpus) {
            Ok(Some(text)) => parse_cpu_list(&text)
                .map(|c| c.len())
                .map_err(|e| e.to_string()),
            Ok(None) => Err("no cpuset.cpus here".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let cpus = cpus.unwrap_or_else(|e| {
            debug!(cgroup = path, error = %e, "metric advisor: the BestEffort cpuset not read; counting the node's CPUs");
            shared
                .topology
                .as_ref()
                .map_or(0, |t| t.0.total_info.number_cpus)
        });
        let res = self.tree.resources(path).unwrap_or_default();
        real_limit_milli(cpus, res.cpu_quota, res.cpu_period)
    }
}

impl Collector for BeCollector {
    fn name(&self) -> &'static str {
        "beresource"
    }

    fn disabled_reason(&self) -> Option<String> {
        self.path
            .is_none()
            .then(|| "pods have no QoS cgroups (--cgroups-per-qos=false)".to_string())
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let Some(path) = self.path.clone() else {
                return;
            };
            let Some(now) = self.cpu_time(&path) else {
                return;
            };
            // koordlet records 0 on its first round, when there is no delta yet.
            let usage = self.prev.and_then(|p| usage_milli(p, now)).unwrap_or(0);
            self.prev = Some(now);
            let request: i64 = shared
                .targets
                .iter()
                .filter_map(|t| t.be_batch_cpu_milli)
                .sum();
            let limit = self.real_limit(&path, shared);
            let ts = unix_ms(now.0);
            for (allocation, value) in [
                ("real-limit", limit),
                ("request", request),
                ("usage", usage),
            ] {
                let labels = [
                    (label::BE_RESOURCE, "cpu"),
                    (label::BE_ALLOCATION, allocation),
                ];
                shared.push(MetricKind::NodeBe, &labels, ts, value as f64);
            }
            if let Some(g) = BE_USED_CPU.as_ref() {
                g.with_label_values(&[self.node_name.as_str()])
                    .set(usage as f64 / 1000.0);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn usage_and_limit_as_koordlet_counts_them() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        // 1.5 s of CPU over 1 s: 1500 millicores.
        assert_eq!(
            usage_milli((t0, 0), (t0 + Duration::from_secs(1), 1_500_000_000)),
            Some(1500)
        );
        // A counter that went back (a recreated cgroup) or no time: nothing.
        assert_eq!(usage_milli((t0, 5), (t0 + Duration::from_secs(1), 1)), None);
        assert_eq!(usage_milli((t0, 0), (t0, 9)), None);
        // 4 CPUs, no quota: 4000; a 1.5-core quota wins; a quota above the cpuset not.
        assert_eq!(real_limit_milli(4, Some(-1), Some(100_000)), 4000);
        assert_eq!(real_limit_milli(4, Some(150_000), Some(100_000)), 1500);
        assert_eq!(real_limit_milli(2, Some(900_000), Some(100_000)), 2000);
        assert_eq!(real_limit_milli(2, None, None), 2000);
    }
}
