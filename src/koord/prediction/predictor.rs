//! koordlet's `ProdReclaimablePredictor`: how much of the prod (and none) pods'
//! requests their predicted peaks leave unused, the minimum of a per-pod estimate and
//! a per-priority-class one, with a safety margin on every peak.

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{Models, PriorityClass, SYS_UID};

/// CPU in milli-cores, memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Amount {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

impl Amount {
    fn add(&mut self, o: Amount) {
        self.cpu_milli += o.cpu_milli;
        self.memory_bytes += o.memory_bytes;
    }
    fn sub_floor(self, o: Amount) -> Amount {
        Amount {
            cpu_milli: (self.cpu_milli - o.cpu_milli).max(0),
            memory_bytes: (self.memory_bytes - o.memory_bytes).max(0),
        }
    }
    fn min(self, o: Amount) -> Amount {
        Amount {
            cpu_milli: self.cpu_milli.min(o.cpu_milli),
            memory_bytes: self.memory_bytes.min(o.memory_bytes),
        }
    }
    fn max(self, o: Amount) -> Amount {
        Amount {
            cpu_milli: self.cpu_milli.max(o.cpu_milli),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }
}

/// What the predictor needs of a pod.
#[derive(Debug, Clone)]
pub(crate) struct PodInput {
    pub uid: String,
    pub class: PriorityClass,
    pub request: Amount,
    /// metadata.creationTimestamp, Unix ms.
    pub created_ms: Option<i64>,
    /// Deleting, or in a terminal phase.
    pub terminating: bool,
}

/// The predictor's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PredictorConfig {
    pub cold_start_ms: i64,
    pub safety_margin_percent: i64,
}

/// One sub-predictor's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Estimate {
    pub reclaimable: Amount,
    pub peak: Amount,
}

/// The whole answer: the node's (the minimum of both) and per pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Reclaimable {
    pub node: Estimate,
    pub pod_predictor: Estimate,
    /// `None` when a class or system model is missing (before the first round).
    pub priority_predictor: Option<Estimate>,
    /// Per pod UID: request − peak, when positive.
    pub pods: BTreeMap<String, Amount>,
}

fn with_margin(v: i64, margin: i64) -> i64 {
    v.saturating_mul(100 + margin) / 100
}

/// p95 CPU and p98 memory of `uid` with the margin, or `None` without a model.
fn peak_of(models: &Models, uid: &str, margin: i64) -> Option<Amount> {
    let p = models.by_uid.get(uid)?.prediction();
    Some(Amount {
        cpu_milli: with_margin(p.cpu_milli.p95, margin),
        memory_bytes: with_margin(p.memory_bytes.p98, margin),
    })
}

/// Runs both predictors over `pods` against `allocatable`.
pub(crate) fn reclaimable(
    cfg: PredictorConfig,
    models: &Models,
    pods: &[PodInput],
    allocatable: Amount,
    now_ms: i64,
) -> Reclaimable {
    let m = cfg.safety_margin_percent;
    let mut out = Reclaimable::default();
    let (mut unreclaimable, mut unpredicted, mut sum) =
        (Amount::default(), Amount::default(), Amount::default());
    // The priority predictor sees the pods the pod predictor accepted (koordlet's
    // minPredictor stops at a sub-predictor's error).
    let mut live_requests = Amount::default();
    for pod in pods.iter().filter(|p| p.class.is_reclaimable()) {
        if pod
            .created_ms
            .is_some_and(|c| now_ms - c <= cfg.cold_start_ms)
        {
            unpredicted.add(pod.request);
            if !pod.terminating {
                live_requests.add(pod.request);
            }
            continue;
        }
        if pod.terminating {
            continue;
        }
        let Some(peak) = peak_of(models, &pod.uid, m) else {
            unpredicted.add(pod.request);
            continue;
        };
        live_requests.add(pod.request);
        unreclaimable.add(peak);
        let r = pod.request.sub_floor(peak);
        sum.add(r);
        out.pods.insert(pod.uid.clone(), r);
    }
    out.pod_predictor = Estimate {
        reclaimable: allocatable.sub_floor(unreclaimable).min(sum),
        peak: {
            let mut p = unreclaimable;
            p.add(unpredicted);
            p
        },
    };
    let mut prio = peak_of(models, SYS_UID, 0);
    for c in PriorityClass::ALL.iter().filter(|c| c.is_reclaimable()) {
        prio = prio.zip(peak_of(models, &c.uid(), 0)).map(|(mut a, b)| {
            a.add(b);
            a
        });
    }
    out.priority_predictor = prio.map(|p| {
        let un = Amount {
            cpu_milli: with_margin(p.cpu_milli, m),
            memory_bytes: with_margin(p.memory_bytes, m),
        };
        Estimate {
            reclaimable: allocatable.sub_floor(un).min(live_requests.sub_floor(un)),
            peak: un,
        }
    });
    out.node = match out.priority_predictor {
        Some(p) => Estimate {
            reclaimable: out.pod_predictor.reclaimable.min(p.reclaimable),
            peak: out.pod_predictor.peak.max(p.peak),
        },
        None => out.pod_predictor,
    };
    out
}
