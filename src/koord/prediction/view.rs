//! The `/stats/predictions` JSON: every model's percentiles, the reclaimable
//! resources per pod and for the node, `hasSynced` and the model count.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::PredictServer;
use super::model::PriorityClass;
use super::predictor::{Amount, PodInput, Reclaimable, reclaimable};

/// The predictor's view of a pod (phase from `phase`, the status manager's).
pub(crate) fn pod_input(pod: &Pod, phase: Option<&str>) -> PodInput {
    let req = crate::cm::resources::pod_requests(pod).unwrap_or_default();
    PodInput {
        uid: crate::pod::pod_uid(pod).to_string(),
        class: PriorityClass::of_pod(pod),
        request: Amount {
            cpu_milli: req.cpu_milli.unwrap_or(0),
            memory_bytes: req.memory_bytes.unwrap_or(0),
        },
        created_ms: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        terminating: pod.metadata.deletion_timestamp.is_some()
            || matches!(phase, Some("Succeeded" | "Failed")),
    }
}

/// The reclaimable resources of `pods` now.
pub(crate) fn current(s: &PredictServer, pods: &[PodInput], allocatable: Amount) -> Reclaimable {
    reclaimable(
        s.config().predictor(),
        &s.models(),
        pods,
        allocatable,
        crate::koord::metriccache::now_ms(),
    )
}

/// The JSON document.
pub(crate) fn render(
    s: &PredictServer,
    pods: &[(Arc<Pod>, PodInput)],
    allocatable: Amount,
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

/// What the read-only server needs to serve `/stats/predictions`.
#[derive(Clone)]
pub(crate) struct Served {
    pub server: Arc<PredictServer>,
    pub allocatable: Amount,
}

impl Served {
    /// The document for the pods the agent manages now.
    pub(crate) fn document(
        &self,
        pods: &crate::syncloop::pod_manager::PodManager,
        statuses: &crate::status::StatusManager,
    ) -> Value {
        let rows: Vec<(Arc<Pod>, PodInput)> = pods
            .all()
            .into_iter()
            .map(|p| {
                let phase = statuses.get(crate::pod::pod_uid(&p)).and_then(|s| s.phase);
                let i = pod_input(&p, phase.as_deref());
                (p, i)
            })
            .collect();
        render(&self.server, &rows, self.allocatable)
    }
}
