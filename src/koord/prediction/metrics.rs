//! The prediction gauges, with koordlet's metric name
//! (`koordlet_node_predicted_resource_reclaimable{node,predictor,resource,unit}`, one
//! per sub-predictor and `minPredictor` for the node's answer) and, as an oxlet
//! addition in the same shape, the predicted peak. Values are computed at scrape
//! time from the models, so a scrape is never stale.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, Opts};

use super::PredictServer;
use super::predictor::{Estimate, PodInput, ResourceAmount};

/// Reads the pods and allocatable at scrape time.
pub(crate) type PredictionInputs = Arc<dyn Fn() -> (Vec<PodInput>, ResourceAmount) + Send + Sync>;

/// The collector; register it into the agent's registry.
pub(crate) struct PredictionCollector {
    server: Arc<PredictServer>,
    node: String,
    inputs: PredictionInputs,
    reclaimable: GaugeVec,
    peak: GaugeVec,
}

const LABELS: [&str; 4] = ["node", "predictor", "resource", "unit"];

impl PredictionCollector {
    pub(crate) fn new(
        server: Arc<PredictServer>,
        node: String,
        inputs: PredictionInputs,
    ) -> prometheus::Result<Self> {
        let opts = |name: &str, help: &str| Opts::new(name, help).subsystem("koordlet");
        Ok(PredictionCollector {
            server,
            node,
            inputs,
            reclaimable: GaugeVec::new(
                opts(
                    "node_predicted_resource_reclaimable",
                    "the node reclaimable resources predicted by koordinator",
                ),
                &LABELS,
            )?,
            peak: GaugeVec::new(
                opts(
                    "node_predicted_resource_peak",
                    "the node resource peak predicted by the prod reclaimable predictor",
                ),
                &LABELS,
            )?,
        })
    }

    fn set(&self, g: &GaugeVec, predictor: &str, a: ResourceAmount) {
        g.with_label_values(&[&self.node, predictor, "cpu", "core"])
            .set(a.cpu_milli as f64 / 1000.0);
        g.with_label_values(&[&self.node, predictor, "memory", "byte"])
            .set(a.memory_bytes as f64);
    }
}

impl Collector for PredictionCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut d = self.reclaimable.desc();
        d.extend(self.peak.desc());
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.reclaimable.reset();
        self.peak.reset();
        if self.server.has_synced() {
            let (pods, alloc) = (self.inputs)();
            let r = super::view::current(&self.server, &pods, alloc);
            let mut rows: Vec<(&str, Estimate)> =
                vec![("podReclaimablePredictor", r.pod_predictor)];
            if let Some(p) = r.priority_predictor {
                rows.push(("priorityReclaimablePredictor", p));
            }
            rows.push(("minPredictor", r.node));
            for (name, e) in rows {
                self.set(&self.reclaimable, name, e.reclaimable);
                self.set(&self.peak, name, e.peak);
            }
        }
        let mut out = self.reclaimable.collect();
        out.extend(self.peak.collect());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::koord::prediction::PredictionConfig;
    use crate::koord::prediction::model::PriorityClass;

    #[test]
    fn gauges_carry_koordlets_name_and_labels() {
        let s = Arc::new(PredictServer::new(
            PredictionConfig::default(),
            std::path::PathBuf::from("/nonexistent"),
        ));
        let inputs: PredictionInputs = Arc::new(|| {
            let pod = PodInput {
                uid: "a".into(),
                class: PriorityClass::Prod,
                request: ResourceAmount {
                    cpu_milli: 2000,
                    memory_bytes: 1 << 32,
                },
                created_ms: Some(0),
                terminating: false,
            };
            (
                vec![pod],
                ResourceAmount {
                    cpu_milli: 8000,
                    memory_bytes: 1 << 34,
                },
            )
        });
        let c = PredictionCollector::new(s.clone(), "node-1".into(), inputs).unwrap();
        let reg = prometheus::Registry::new();
        reg.register(Box::new(c)).unwrap();
        // Before the first round nothing is exported.
        assert!(reg.gather().iter().all(|f| f.get_metric().is_empty()));
        let cache = crate::metriccache::MetricCache::default();
        let now = crate::metriccache::now_ms();
        let pu = [(crate::metriccache::label::POD_UID, "a")];
        use crate::metriccache::{MetricKind, Sample};
        cache.append([
            Sample::new(MetricKind::PodCpuUsage, &pu, now - 1000, 1.0).unwrap(),
            Sample::new(MetricKind::PodMemoryUsage, &pu, now - 1000, 1e9).unwrap(),
        ]);
        s.train(&cache, &[], now);
        s.models().add(s.config(), "a", 1.0, 1e9, now);
        let mut text = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&reg.gather(), &mut text)
            .unwrap();
        // a's peak is 1138m, 2000 − 1138 = 862m reclaimable.
        assert!(
            text.contains(r#"koordlet_node_predicted_resource_reclaimable{node="node-1",predictor="podReclaimablePredictor",resource="cpu",unit="core"} 0.862"#),
            "{text}"
        );
        assert!(text.contains(r#"koordlet_node_predicted_resource_peak{node="node-1",predictor="minPredictor",resource="cpu",unit="core"}"#), "{text}");
        assert!(
            text.contains(r#"predictor="minPredictor",resource="memory",unit="byte""#),
            "{text}"
        );
    }
}
