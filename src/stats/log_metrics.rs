//! kubelet's `kubelet_container_log_filesystem_used_bytes{uid,namespace,pod,container}`
//! (its `logMetricsCollector`): each container's log directory usage, read from the
//! volume stats at scrape time so a scrape never carries a gone pod.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

use super::volumes::VolumeUsage;

/// kubelet's label order.
const LABELS: [&str; 4] = ["uid", "namespace", "pod", "container"];

/// The collector; register it into the kubelet registry.
pub(crate) struct LogMetrics {
    usage: Arc<VolumeUsage>,
    gauge: GaugeVec,
}

impl LogMetrics {
    pub(crate) fn new(usage: Arc<VolumeUsage>) -> prometheus::Result<LogMetrics> {
        let opts = Opts::new(
            "container_log_filesystem_used_bytes",
            "[ALPHA] Bytes used by the container's logs on the filesystem.",
        )
        .subsystem("kubelet");
        Ok(LogMetrics {
            usage,
            gauge: GaugeVec::new(opts, &LABELS)?,
        })
    }
}

impl Collector for LogMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.gauge.reset();
        for (uid, pod) in self.usage.all() {
            for (container, u) in &pod.container_logs {
                self.gauge
                    .with_label_values(&[uid.as_str(), &pod.namespace, &pod.name, container])
                    .set(u.bytes as f64);
            }
        }
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::volumes::{PodUsage, Usage};

    #[test]
    fn one_series_per_container_log_and_gone_pods_vanish() {
        let usage = Arc::new(VolumeUsage::default());
        let logs = |bytes| Usage {
            bytes,
            inodes: 1,
            partial: false,
        };
        usage.set(
            "u1",
            PodUsage {
                namespace: "ns".into(),
                name: "p".into(),
                container_logs: vec![("a".into(), logs(4096)), ("b".into(), logs(8192))],
                ..PodUsage::default()
            },
        );
        let reg = prometheus::Registry::new();
        reg.register(Box::new(LogMetrics::new(usage.clone()).unwrap()))
            .unwrap();
        let render = || {
            let mut text = String::new();
            prometheus::TextEncoder::new()
                .encode_utf8(&reg.gather(), &mut text)
                .unwrap();
            text
        };
        let text = render();
        assert!(text.contains("# HELP kubelet_container_log_filesystem_used_bytes [ALPHA] Bytes used by the container's logs on the filesystem.\n"), "{text}");
        assert!(
            text.contains("# TYPE kubelet_container_log_filesystem_used_bytes gauge\n"),
            "{text}"
        );
        assert!(text.contains("kubelet_container_log_filesystem_used_bytes{container=\"a\",namespace=\"ns\",pod=\"p\",uid=\"u1\"} 4096\n"), "{text}");
        assert!(text.contains("kubelet_container_log_filesystem_used_bytes{container=\"b\",namespace=\"ns\",pod=\"p\",uid=\"u1\"} 8192\n"), "{text}");
        // The pod is gone from the volume stats: its series go with it.
        usage.refresh(
            &[],
            &crate::stats::volumes::Dirs {
                pods: "/nonexistent".into(),
                pod_logs: "/nonexistent".into(),
            },
        );
        let text = render();
        assert!(!text.contains("uid=\"u1\""), "{text}");
    }
}
