//! The `/metrics/probes` registry: kubelet's prober counters and durations per
//! container, plus `process_start_time_seconds`, in a registry of their own.

use std::time::Duration;

use prometheus::{CounterVec, HistogramOpts, HistogramVec, Opts, Registry};

use super::buckets;

/// The probe families.
pub(crate) struct Probes {
    pub registry: Registry,
    pub total: CounterVec,
    pub duration: HistogramVec,
}

/// One probe's identity in the series (kubelet's labels).
#[derive(Debug, Clone)]
pub(crate) struct ProbeSeries {
    /// `Liveness`, `Readiness` or `Startup` (capitalised, as kubelet's `probeType.String()`).
    pub probe_type: &'static str,
    pub container: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
}

/// One probe attempt's outcome as the metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeOutcome {
    Successful,
    Failed,
    Unknown,
}

impl ProbeOutcome {
    fn label(self) -> &'static str {
        match self {
            ProbeOutcome::Successful => "successful",
            ProbeOutcome::Failed => "failed",
            ProbeOutcome::Unknown => "unknown",
        }
    }
}

const RESULTS: [ProbeOutcome; 3] = [
    ProbeOutcome::Successful,
    ProbeOutcome::Failed,
    ProbeOutcome::Unknown,
];

impl Probes {
    pub(crate) fn new() -> prometheus::Result<Probes> {
        let registry = Registry::new();
        let total = CounterVec::new(
            Opts::new(
                "prober_probe_total",
                "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
            ),
            &[
                "probe_type",
                "result",
                "container",
                "pod",
                "namespace",
                "pod_uid",
            ],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "prober_probe_duration_seconds",
                "[ALPHA] Duration in seconds for a probe response.",
            )
            .buckets(buckets::DEF.to_vec()),
            &["probe_type", "container", "pod", "namespace"],
        )?;
        registry.register(Box::new(total.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(super::process::Process::new(false)?))?;
        Ok(Probes {
            registry,
            total,
            duration,
        })
    }

    /// One attempt: every outcome counts; a failure records no duration (kubelet's
    /// worker only observes the duration for success and unknown).
    pub(crate) fn record(&self, s: &ProbeSeries, outcome: ProbeOutcome, took: Duration) {
        self.total
            .with_label_values(&[
                s.probe_type,
                outcome.label(),
                &s.container,
                &s.pod,
                &s.namespace,
                &s.pod_uid,
            ])
            .inc();
        if outcome != ProbeOutcome::Failed {
            self.duration
                .with_label_values(&[s.probe_type, &s.container, &s.pod, &s.namespace])
                .observe(took.as_secs_f64());
        }
    }

    /// A stopped worker deletes its series, so a gone container leaves nothing behind.
    pub(crate) fn forget(&self, s: &ProbeSeries) {
        for r in RESULTS {
            let _ = self.total.remove_label_values(&[
                s.probe_type,
                r.label(),
                &s.container,
                &s.pod,
                &s.namespace,
                &s.pod_uid,
            ]);
        }
        let _ =
            self.duration
                .remove_label_values(&[s.probe_type, &s.container, &s.pod, &s.namespace]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> ProbeSeries {
        ProbeSeries {
            probe_type: "Readiness",
            container: "c".into(),
            pod: "p".into(),
            namespace: "ns".into(),
            pod_uid: "u".into(),
        }
    }

    #[test]
    fn failures_count_without_duration_and_stop_forgets() {
        let p = Probes::new().unwrap();
        let s = series();
        p.record(&s, ProbeOutcome::Successful, Duration::from_millis(5));
        p.record(&s, ProbeOutcome::Failed, Duration::from_millis(5));
        p.record(&s, ProbeOutcome::Failed, Duration::from_millis(5));
        let count = |r: &str| {
            p.total
                .with_label_values(&["Readiness", r, "c", "p", "ns", "u"])
                .get()
        };
        assert_eq!((count("successful"), count("failed")), (1.0, 2.0));
        let h = p
            .duration
            .with_label_values(&["Readiness", "c", "p", "ns"])
            .get_sample_count();
        assert_eq!(h, 1, "only the success records a duration");
        p.forget(&s);
        let names: Vec<String> = p
            .registry
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(names, vec!["process_start_time_seconds".to_string()]);
    }
}
