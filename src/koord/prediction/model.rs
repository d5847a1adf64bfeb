//! The model set: one CPU and one memory histogram per UID (a pod, the node, the
//! system, a priority class), what the predictions are read from, and its GC.

use std::collections::BTreeMap;

use serde::Serialize;

use super::PredictionConfig;
use super::histogram::{Buckets, DecayingHistogram};
pub(crate) use crate::koordapi::PriorityClass;

pub(crate) const NODE_UID: &str = "__node__";
pub(crate) const SYS_UID: &str = "__node-sys__";
/// The most models kept (pods are bounded by max-pods; this bounds a misbehaving source).
pub(crate) const MAX_MODELS: usize = 1024;

/// Every UID that is not a pod's.
pub(crate) fn node_uids() -> Vec<String> {
    let mut v = vec![NODE_UID.to_string(), SYS_UID.to_string()];
    v.extend(PriorityClass::ALL.iter().map(|c| c.uid()));
    v
}

/// One UID's histograms.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub cpu: DecayingHistogram,
    pub memory: DecayingHistogram,
    pub last_updated_ms: i64,
    /// 0 before the first checkpoint.
    pub last_checkpointed_ms: i64,
}

impl Model {
    pub(crate) fn new(cfg: &PredictionConfig, now_ms: i64) -> Model {
        Model {
            cpu: DecayingHistogram::new(Buckets::cpu(), cfg.cpu_half_life_ms),
            memory: DecayingHistogram::new(Buckets::memory(), cfg.memory_half_life_ms),
            last_updated_ms: now_ms,
            last_checkpointed_ms: 0,
        }
    }

    /// One training sample: `cpu` in cores, `memory` in bytes.
    pub(crate) fn add(&mut self, cpu: f64, memory: f64, now_ms: i64) {
        self.cpu.add_sample(cpu, 1.0, now_ms);
        self.memory.add_sample(memory, 1.0, now_ms);
        self.last_updated_ms = now_ms;
    }

    /// koordlet's GetPrediction: p60/p90/p95/p98/max.
    pub(crate) fn prediction(&self) -> Prediction {
        let cpu = |p| (self.cpu.percentile(p) * 1000.0) as i64;
        let mem = |p| self.memory.percentile(p) as i64;
        Prediction {
            cpu_milli: Percentiles::of(cpu),
            memory_bytes: Percentiles::of(mem),
        }
    }
}

/// Percentiles of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Percentiles {
    pub p60: i64,
    pub p90: i64,
    pub p95: i64,
    pub p98: i64,
    pub max: i64,
}

impl Percentiles {
    fn of(f: impl Fn(f64) -> i64) -> Percentiles {
        Percentiles {
            p60: f(0.6),
            p90: f(0.9),
            p95: f(0.95),
            p98: f(0.98),
            max: f(1.0),
        }
    }
}

/// A model's prediction: CPU in milli-cores (truncated), memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Prediction {
    pub cpu_milli: Percentiles,
    pub memory_bytes: Percentiles,
}

/// The models by UID.
#[derive(Debug, Default)]
pub(crate) struct Models {
    pub by_uid: BTreeMap<String, Model>,
}

impl Models {
    /// Adds one sample to `uid`'s model, creating it (unless the set is full).
    pub(crate) fn add(
        &mut self,
        cfg: &PredictionConfig,
        uid: &str,
        cpu: f64,
        memory: f64,
        now_ms: i64,
    ) {
        if !self.by_uid.contains_key(uid) {
            if self.by_uid.len() >= MAX_MODELS {
                return;
            }
            self.by_uid.insert(uid.to_string(), Model::new(cfg, now_ms));
        }
        if let Some(m) = self.by_uid.get_mut(uid) {
            m.add(cpu, memory, now_ms);
        }
    }

    /// Removes the models not updated for the expiration; returns their UIDs (whose
    /// checkpoints the caller deletes).
    pub(crate) fn gc(&mut self, expiration_ms: i64, now_ms: i64) -> Vec<String> {
        let stale: Vec<String> = self
            .by_uid
            .iter()
            .filter(|(_, m)| now_ms - m.last_updated_ms > expiration_ms)
            .map(|(u, _)| u.clone())
            .collect();
        for u in &stale {
            self.by_uid.remove(u);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_removes_models_not_updated_for_the_expiration() {
        let cfg = PredictionConfig::default();
        let mut m = Models::default();
        m.add(&cfg, "old", 1.0, 1e9, 0);
        m.add(&cfg, "new", 1.0, 1e9, 20 * 60_000);
        let gone = m.gc(cfg.model_expiration_ms, 31 * 60_000);
        assert_eq!(gone, vec!["old".to_string()]);
        assert!(m.by_uid.contains_key("new"));
    }

    #[test]
    fn the_set_is_bounded() {
        let cfg = PredictionConfig::default();
        let mut m = Models::default();
        for i in 0..MAX_MODELS + 5 {
            m.add(&cfg, &format!("u{i}"), 1.0, 1.0, 0);
        }
        assert_eq!(m.by_uid.len(), MAX_MODELS);
    }
}
