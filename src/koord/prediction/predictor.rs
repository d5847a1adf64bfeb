//! koordlet's `ProdReclaimablePredictor`: how much of the prod (and none) pods'
//! requests their predicted peaks leave unused, the minimum of a per-pod estimate and
//! a per-priority-class one, with a safety margin on every peak.

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{Models, PriorityClass, SYS_UID};

/// CPU in milli-cores, memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResourceAmount {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

impl ResourceAmount {
    fn add(&mut self, o: ResourceAmount) {
        self.cpu_milli += o.cpu_milli;
        self.memory_bytes += o.memory_bytes;
    }
    fn sub_floor(self, o: ResourceAmount) -> ResourceAmount {
        ResourceAmount {
            cpu_milli: (self.cpu_milli - o.cpu_milli).max(0),
            memory_bytes: (self.memory_bytes - o.memory_bytes).max(0),
        }
    }
    fn min(self, o: ResourceAmount) -> ResourceAmount {
        ResourceAmount {
            cpu_milli: self.cpu_milli.min(o.cpu_milli),
            memory_bytes: self.memory_bytes.min(o.memory_bytes),
        }
    }
    fn max(self, o: ResourceAmount) -> ResourceAmount {
        ResourceAmount {
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
    pub request: ResourceAmount,
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
    pub reclaimable: ResourceAmount,
    pub peak: ResourceAmount,
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
    pub pods: BTreeMap<String, ResourceAmount>,
}

fn with_margin(v: i64, margin: i64) -> i64 {
    v.saturating_mul(100 + margin) / 100
}

/// p95 CPU and p98 memory of `uid` with the margin, or `None` without a model.
fn peak_of(models: &Models, uid: &str, margin: i64) -> Option<ResourceAmount> {
    let p = models.by_uid.get(uid)?.prediction();
    Some(ResourceAmount {
        cpu_milli: with_margin(p.cpu_milli.p95, margin),
        memory_bytes: with_margin(p.memory_bytes.p98, margin),
    })
}

/// Runs both predictors over `pods` against `allocatable`.
pub(crate) fn reclaimable(
    cfg: PredictorConfig,
    models: &Models,
    pods: &[PodInput],
    allocatable: ResourceAmount,
    now_ms: i64,
) -> Reclaimable {
    let m = cfg.safety_margin_percent;
    let mut out = Reclaimable::default();
    let (mut unreclaimable, mut unpredicted, mut sum) = (
        ResourceAmount::default(),
        ResourceAmount::default(),
        ResourceAmount::default(),
    );
    // The priority predictor sees the pods the pod predictor accepted (koordlet's
    // minPredictor stops at a sub-predictor's error).
    let mut live_requests = ResourceAmount::default();
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
        let un = ResourceAmount {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::koord::prediction::PredictionConfig;
    use crate::koord::prediction::histogram::Buckets;

    const NOW: i64 = 1_700_006_400_000;
    const HOUR: i64 = 3_600_000;
    const GIB: i64 = 1 << 30;

    fn cfg() -> PredictorConfig {
        PredictionConfig::default().predictor()
    }

    fn models(rows: &[(&str, f64, f64)]) -> Models {
        let c = PredictionConfig::default();
        let mut m = Models::default();
        for (uid, cpu, mem) in rows {
            m.add(&c, uid, *cpu, *mem, NOW);
        }
        m
    }

    fn pod(
        uid: &str,
        class: PriorityClass,
        cpu: i64,
        mem: i64,
        age_h: i64,
        terminating: bool,
    ) -> PodInput {
        PodInput {
            uid: uid.into(),
            class,
            request: ResourceAmount {
                cpu_milli: cpu,
                memory_bytes: mem,
            },
            created_ms: Some(NOW - age_h * HOUR),
            terminating,
        }
    }

    /// The memory percentile's value for samples of `v` bytes.
    fn mem_edge(v: f64) -> i64 {
        let b = Buckets::memory();
        b.start(b.find(v) + 1) as i64
    }

    #[test]
    fn known_answers_for_both_predictors_and_their_minimum() {
        let g = GIB as f64;
        let m = models(&[
            ("a", 1.0, g),
            ("c", 3.0, g),
            ("__node-sys__", 0.5, g),
            ("__node-koord-prod__", 1.0, g),
            ("__node-__", 0.0, 0.0),
        ]);
        // p95 of 1 core is bucket 22's upper edge, 1035m; of 0.5 core 539m; of 0, 25m.
        assert_eq!(m.by_uid["a"].prediction().cpu_milli.p95, 1035);
        assert_eq!(m.by_uid["__node-sys__"].prediction().cpu_milli.p95, 539);
        assert_eq!(m.by_uid["__node-__"].prediction().cpu_milli.p95, 25);
        let pods = [
            pod("a", PriorityClass::Prod, 2000, 4 * GIB, 48, false),
            pod("b", PriorityClass::Prod, 1000, GIB, 1, false), // cold start
            pod("c", PriorityClass::Batch, 4000, GIB, 48, false), // not reclaimable
            pod("d", PriorityClass::None, 1000, GIB, 48, true), // terminating
            pod("e", PriorityClass::Prod, 500, GIB, 48, false), // no model
        ];
        let alloc = ResourceAmount {
            cpu_milli: 8000,
            memory_bytes: 16 * GIB,
        };
        let r = reclaimable(cfg(), &m, &pods, alloc, NOW);
        let mem_peak_a = mem_edge(g) * 110 / 100;
        // Pod predictor: a's peak 1035 × 1.1 = 1138m; b and e unpredicted.
        assert_eq!(r.pods.len(), 1);
        assert_eq!(
            r.pods["a"],
            ResourceAmount {
                cpu_milli: 862,
                memory_bytes: 4 * GIB - mem_peak_a
            }
        );
        assert_eq!(r.pod_predictor.reclaimable, r.pods["a"]);
        assert_eq!(
            r.pod_predictor.peak,
            ResourceAmount {
                cpu_milli: 1138 + 1000 + 500,
                memory_bytes: mem_peak_a + 2 * GIB
            }
        );
        // Priority predictor: (539 + 1035 + 25) × 1.1 = 1758m against a's and b's
        // requests (e failed its prediction and never reaches it).
        let p = r.priority_predictor.unwrap();
        let mem_un = (mem_edge(g) * 2 + mem_edge(0.0)) * 110 / 100;
        assert_eq!(
            p.peak,
            ResourceAmount {
                cpu_milli: 1758,
                memory_bytes: mem_un
            }
        );
        assert_eq!(
            p.reclaimable,
            ResourceAmount {
                cpu_milli: 3000 - 1758,
                memory_bytes: 5 * GIB - mem_un
            }
        );
        // The node: element-wise min of the results, max of the peaks.
        assert_eq!(r.node.reclaimable.cpu_milli, 862);
        assert_eq!(
            r.node.reclaimable.memory_bytes,
            (4 * GIB - mem_peak_a).min(5 * GIB - mem_un)
        );
        assert_eq!(r.node.peak.cpu_milli, 2638);
    }

    #[test]
    fn allocatable_caps_the_result_and_missing_class_models_leave_the_pod_predictor() {
        let m = models(&[("a", 1.0, 1e9)]);
        let pods = [pod("a", PriorityClass::None, 2000, 4 * GIB, 48, false)];
        let alloc = ResourceAmount {
            cpu_milli: 1500,
            memory_bytes: GIB,
        };
        let r = reclaimable(cfg(), &m, &pods, alloc, NOW);
        assert!(r.priority_predictor.is_none());
        // 1500 − 1138 = 362 < 862; memory: allocatable 1 GiB is below the peak, so 0.
        assert_eq!(
            r.node.reclaimable,
            ResourceAmount {
                cpu_milli: 362,
                memory_bytes: 0
            }
        );
        assert_eq!(r.node, r.pod_predictor);
    }
}
