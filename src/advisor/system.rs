//! The system part (koordlet's `sysresource`): what the node uses beyond its pods,
//! `max(node − Σ pods − Σ host applications, 0)`, for CPU and memory.

use super::{CollectFuture, Collector, Shared};
use crate::metriccache::{MetricKind, now_ms};

/// `max(node − pods, 0)`, or None without a node value.
pub(crate) fn system_usage(node: Option<f64>, pods: Option<f64>) -> Option<f64> {
    Some((node? - pods.unwrap_or(0.0)).max(0.0))
}

pub(crate) struct SystemCollector;

impl Collector for SystemCollector {
    fn name(&self) -> &'static str {
        "sysresource"
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let ts = now_ms();
            // Both inputs come from this round (node and pods run first).
            let (apps_cpu, apps_mem) = shared.host_apps_usage;
            let pods_cpu = shared.pods_cpu_cores.map(|c| c + apps_cpu);
            if let Some(cpu) = system_usage(shared.node_cpu_cores, pods_cpu) {
                shared.push(MetricKind::SysCpuUsage, &[], ts, cpu);
            }
            if let Some(mem) = system_usage(
                shared.node_memory_bytes,
                Some(shared.pods_memory_bytes + apps_mem),
            ) {
                shared.push(MetricKind::SysMemoryUsage, &[], ts, mem);
            }
        })
    }
}
