//! koordlet's QoS manager metrics, with its names: `koordlet_pod_eviction{node,reason}`
//! (evictions it launched) and `koordlet_be_suppress_cpu_cores{node,type}` (the CPU
//! left to BestEffort pods). Registered once into the kubelet registry, so `/metrics`
//! serves them beside kubelet's families.

use std::sync::LazyLock;

use prometheus::{CounterVec, GaugeVec, Opts};
use tracing::warn;

/// koordlet's reason label for every eviction its QoS manager launches
/// (`EvictedStr`, which `KillAndEvictPods` passes to the metric).
pub(crate) const REASON_EVICTED: &str = "evicted";
/// The suppress type label for the `cfsQuota` policy (the quota in cores).
pub(crate) const SUPPRESS_CFS_QUOTA: &str = "cfsQuota";
/// The suppress type label for the `cpuset` policy (the CPUs given).
pub(crate) const SUPPRESS_CPUSET: &str = "cpuset";

pub(crate) struct QosMetrics {
    pub pod_eviction: CounterVec,
    pub be_suppress_cpu_cores: GaugeVec,
}

impl QosMetrics {
    fn new() -> prometheus::Result<QosMetrics> {
        Ok(QosMetrics {
            pod_eviction: CounterVec::new(
                Opts::new("pod_eviction", "Number of eviction launched by koordlet")
                    .subsystem("koordlet"),
                &["node", "reason"],
            )?,
            be_suppress_cpu_cores: GaugeVec::new(
                Opts::new(
                    "be_suppress_cpu_cores",
                    "Number of cores suppress by koordlet",
                )
                .subsystem("koordlet"),
                &["node", "type"],
            )?,
        })
    }
}

static METRICS: LazyLock<Option<QosMetrics>> = LazyLock::new(|| {
    let m = QosMetrics::new().ok()?;
    for c in [
        Box::new(m.pod_eviction.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(m.be_suppress_cpu_cores.clone()),
    ] {
        if let Err(e) = crate::metrics::register(c) {
            warn!(error = %e, "cannot register the QoS manager's metrics");
        }
    }
    Some(m)
});

/// The metrics, registered on first use (None only if the families cannot be built).
pub(crate) fn qos() -> Option<&'static QosMetrics> {
    METRICS.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn koordlets_names_and_labels() {
        let m = QosMetrics::new().unwrap();
        m.pod_eviction
            .with_label_values(&["n1", REASON_EVICTED])
            .inc();
        m.be_suppress_cpu_cores
            .with_label_values(&["n1", SUPPRESS_CFS_QUOTA])
            .set(1.5);
        m.be_suppress_cpu_cores
            .with_label_values(&["n1", SUPPRESS_CPUSET])
            .set(2.0);
        let r = prometheus::Registry::new();
        r.register(Box::new(m.pod_eviction.clone())).unwrap();
        r.register(Box::new(m.be_suppress_cpu_cores.clone()))
            .unwrap();
        let mut buf = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut buf)
            .unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("koordlet_pod_eviction{node=\"n1\",reason=\"evicted\"} 1"));
        assert!(text.contains("koordlet_be_suppress_cpu_cores{node=\"n1\",type=\"cfsQuota\"} 1.5"));
        assert!(text.contains("koordlet_be_suppress_cpu_cores{node=\"n1\",type=\"cpuset\"} 2"));
    }
}
