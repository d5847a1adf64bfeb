//! The `/stats/predictions` JSON: every model's percentiles, the reclaimable
//! resources per pod and for the node, `hasSynced` and the model count.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::PredictServer;
use super::model::PriorityClass;
use super::predictor::{PodInput, Reclaimable, ResourceAmount, reclaimable};

/// The predictor's view of a pod (phase from `phase`, the status manager's).
pub(crate) fn pod_input(pod: &Pod, phase: Option<&str>) -> PodInput {
    let req = crate::cm::pod_requests(pod).unwrap_or_default();
    PodInput {
        uid: crate::pod::pod_uid(pod).to_string(),
        class: PriorityClass::with_default(pod),
        request: ResourceAmount {
            cpu_milli: req.cpu_milli.unwrap_or(0),
            memory_bytes: req.memory_bytes.unwrap_or(0),
        },
        // A pod without a creation time (a static pod from a file) is as old as the
        // agent has seen it; one of unknown age is in its cold start, the safe side.
        created_ms: Some(
            pod.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| crate::metrics::pod_first_seen(pod))
                .map_or_else(crate::metriccache::now_ms, jiff::Timestamp::as_millisecond),
        ),
        terminating: pod.metadata.deletion_timestamp.is_some()
            || matches!(phase, Some("Succeeded" | "Failed")),
    }
}

/// The reclaimable resources of `pods` now.
pub(crate) fn current(
    s: &PredictServer,
    pods: &[PodInput],
    allocatable: ResourceAmount,
) -> Reclaimable {
    reclaimable(
        s.config().predictor(),
        &s.models(),
        pods,
        allocatable,
        crate::metriccache::now_ms(),
    )
}

/// The JSON document.
pub(crate) fn render(
    s: &PredictServer,
    pods: &[(Arc<Pod>, PodInput)],
    allocatable: ResourceAmount,
) -> Value {
    let inputs: Vec<PodInput> = pods.iter().map(|(_, i)| i.clone()).collect();
    let r = current(s, &inputs, allocatable);
    let models = s.models();
    let by_uid: serde_json::Map<String, Value> = models
        .by_uid
        .iter()
        .map(|(u, m)| (u.clone(), json!(m.prediction())))
        .collect();
    let pod_rows: Vec<Value> = pods
        .iter()
        .map(|(p, i)| {
            json!({
                "pod": format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or("")),
                "podUID": i.uid,
                "priorityClass": i.class.name(),
                "reclaimable": r.pods.get(&i.uid),
            })
        })
        .collect();
    json!({
        "hasSynced": s.has_synced(),
        "modelCount": models.by_uid.len(),
        "models": by_uid,
        "pods": pod_rows,
        "node": {
            "allocatable": allocatable,
            "reclaimable": r.node.reclaimable,
            "peak": r.node.peak,
            "podReclaimablePredictor": r.pod_predictor,
            "priorityReclaimablePredictor": r.priority_predictor,
        },
    })
}

/// The agent's pods now, each with what the predictors read of it (its phase from the
/// status manager).
pub(crate) fn pod_inputs(
    pods: &crate::pod::PodManager,
    statuses: &crate::status::StatusManager,
) -> Vec<(Arc<Pod>, PodInput)> {
    pods.all()
        .into_iter()
        .map(|p| {
            let i = input_with_phase(&p, statuses);
            (p, i)
        })
        .collect()
}

/// `pod`'s input, its phase from the status manager.
fn input_with_phase(pod: &Pod, statuses: &crate::status::StatusManager) -> PodInput {
    let phase = statuses.get(crate::pod::pod_uid(pod)).and_then(|s| s.phase);
    pod_input(pod, phase.as_deref())
}

/// What the read-only server needs to serve `/stats/predictions`.
#[derive(Clone)]
pub(crate) struct Served {
    pub server: Arc<PredictServer>,
    /// The node's allocatable at start: what the predictors are capped by in
    /// standalone mode, and until the Node is read.
    pub allocatable: ResourceAmount,
    /// What koordlet reads of this node's Node (cluster mode).
    pub node: Option<crate::koord::slo::NodeView>,
}

impl Served {
    /// The allocatable the predictors are capped by now (koordlet's
    /// `getNodeAllocatable`): the Node's `node.koordinator.sh/raw-allocatable`
    /// annotation, else its `status.allocatable`, else the allocatable at start.
    pub(crate) fn allocatable(&self) -> ResourceAmount {
        let node = self.node.as_ref().and_then(|rx| {
            rx.borrow()
                .as_ref()
                .and_then(crate::koord::slo::NodeInfo::predictor_allocatable)
        });
        node.unwrap_or(self.allocatable)
    }

    /// The document for the pods the agent manages now.
    pub(crate) fn document(
        &self,
        pods: &crate::pod::PodManager,
        statuses: &crate::status::StatusManager,
    ) -> Value {
        render(
            &self.server,
            &pod_inputs(pods, statuses),
            self.allocatable(),
        )
    }

    /// The node's reclaimable resources and peak for the prod classes, as the
    /// NodeMetric reports them (`prodReclaimableMetric`, `prodPeakMetric`); None
    /// before the models have synced (koordlet's predictor errs then).
    pub(crate) fn prod(
        &self,
        pods: &[Arc<Pod>],
        statuses: &crate::status::StatusManager,
    ) -> Option<(ResourceAmount, ResourceAmount)> {
        if !self.server.has_synced() {
            return None;
        }
        let inputs: Vec<PodInput> = (pods.iter())
            .map(|p| input_with_phase(p, statuses))
            .collect();
        let r = current(&self.server, &inputs, self.allocatable());
        Some((r.node.reclaimable, r.node.peak))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::koord::prediction::PredictionConfig;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn the_document_lists_models_pods_and_the_node() {
        let s = Arc::new(PredictServer::new(
            PredictionConfig::default(),
            "/nonexistent".into(),
        ));
        let now = crate::metriccache::now_ms();
        s.models().add(s.config(), "uid-a", 1.0, 1e9, now);
        let pods = crate::pod::PodManager::default();
        let mut p = Pod::default();
        p.metadata.name = Some("a".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid-a".into());
        p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_millisecond(now - 48 * 3_600_000).unwrap(),
        ));
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        [
                            ("cpu".to_string(), Quantity("2".into())),
                            ("memory".to_string(), Quantity("4Gi".into())),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        pods.add_or_update(Arc::new(p));
        let served = Served {
            server: s.clone(),
            allocatable: ResourceAmount {
                cpu_milli: 8000,
                memory_bytes: 16 << 30,
            },
            node: None,
        };
        let statuses = crate::status::StatusManager::default();
        let doc = served.document(&pods, &statuses);
        assert_eq!(doc["hasSynced"], false);
        assert_eq!(doc["modelCount"], 1);
        assert_eq!(doc["models"]["uid-a"]["cpuMilli"]["p95"], 1035);
        assert_eq!(doc["pods"][0]["pod"], "ns/a");
        // Unlabelled and Burstable: koordinator derives prod from its QoS (LS).
        assert_eq!(doc["pods"][0]["priorityClass"], "koord-prod");
        // 2000m − 1035m × 1.1.
        assert_eq!(doc["pods"][0]["reclaimable"]["cpuMilli"], 862);
        assert_eq!(doc["node"]["reclaimable"]["cpuMilli"], 862);
        assert!(doc["node"]["priorityReclaimablePredictor"].is_null());
    }

    #[test]
    fn the_allocatable_is_the_nodes_raw_one_then_its_status_then_the_start() {
        use crate::koord::slo::NodeInfo;
        let server = Arc::new(PredictServer::new(
            PredictionConfig::default(),
            "/nonexistent".into(),
        ));
        let amount = |cpu_milli, memory_bytes| ResourceAmount {
            cpu_milli,
            memory_bytes,
        };
        let (tx, rx) = tokio::sync::watch::channel(None);
        let served = Served {
            server,
            allocatable: amount(8000, 8 << 30),
            node: Some(rx),
        };
        assert_eq!(
            served.allocatable(),
            amount(8000, 8 << 30),
            "no Node read yet"
        );
        let status = NodeInfo {
            allocatable: Some(amount(7000, 7 << 30)),
            ..Default::default()
        };
        tx.send_replace(Some(status.clone()));
        assert_eq!(served.allocatable(), amount(7000, 7 << 30));
        tx.send_replace(Some(NodeInfo {
            raw_allocatable: Some(amount(6000, 0)),
            ..status
        }));
        assert_eq!(served.allocatable(), amount(6000, 0));
        let doc = served.document(
            &crate::pod::PodManager::default(),
            &crate::status::StatusManager::default(),
        );
        assert_eq!(doc["node"]["allocatable"]["cpuMilli"], 6000);
    }

    #[test]
    fn a_pod_without_a_creation_time_is_as_old_as_first_seen_or_cold() {
        let now = crate::metriccache::now_ms();
        let mut p = Pod::default();
        p.metadata.uid = Some("u".into());
        // No creation time and no config.seen: unknown age counts as now (cold start).
        let i = pod_input(&p, None);
        assert!(i.created_ms.is_some_and(|c| (now - c).abs() < 60_000));
        // config.seen two days ago: that is its age.
        let seen = jiff::Timestamp::from_millisecond(now - 48 * 3_600_000).unwrap();
        p.metadata.annotations = Some(
            [(
                crate::pod::CONFIG_SEEN_ANNOTATION.to_string(),
                seen.to_string(),
            )]
            .into(),
        );
        assert_eq!(pod_input(&p, None).created_ms, Some(seen.as_millisecond()));
    }
}
