//! Peak prediction (koordlet's `pkg/koordlet/prediction`): every training interval
//! the metric cache's last minute becomes one sample per model ([`training`]) in
//! decaying histograms ([`histogram`], [`model`]); models are checkpointed to disk and
//! restored at start ([`checkpoint`]); their percentiles give the prod pods' and the
//! node's reclaimable resources ([`predictor`]), served as JSON ([`view`]) and as
//! gauges ([`metrics`]).

mod checkpoint;
mod histogram;
mod metrics;
mod model;
mod predictor;
mod training;
mod view;

pub(crate) use metrics::{PredictionCollector, PredictionInputs};
pub(crate) use predictor::ResourceAmount;
pub(crate) use view::{Served, pod_inputs};

use crate::locks::Locked as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metriccache::{MetricCache, now_ms};
use model::Models;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

/// koordlet's prediction config (`NewDefaultConfig`), durations in ms.
#[derive(Debug, Clone)]
pub(crate) struct PredictionConfig {
    pub cold_start_ms: i64,
    pub safety_margin_percent: i64,
    pub memory_half_life_ms: i64,
    pub cpu_half_life_ms: i64,
    pub training_interval_ms: i64,
    pub model_expiration_ms: i64,
    pub checkpoint_interval_ms: i64,
    pub checkpoint_max_per_step: usize,
}

impl Default for PredictionConfig {
    fn default() -> PredictionConfig {
        PredictionConfig {
            cold_start_ms: 24 * HOUR,
            safety_margin_percent: 10,
            memory_half_life_ms: 24 * HOUR,
            cpu_half_life_ms: 12 * HOUR,
            training_interval_ms: MINUTE,
            model_expiration_ms: 30 * MINUTE,
            checkpoint_interval_ms: 10 * MINUTE,
            checkpoint_max_per_step: 12,
        }
    }
}

impl PredictionConfig {
    pub(crate) fn predictor(&self) -> predictor::PredictorConfig {
        predictor::PredictorConfig {
            cold_start_ms: self.cold_start_ms,
            safety_margin_percent: self.safety_margin_percent,
        }
    }
}

/// The models, their checkpoint directory and whether a round has run.
#[derive(Debug)]
pub(crate) struct PredictServer {
    cfg: PredictionConfig,
    dir: PathBuf,
    models: Mutex<Models>,
    synced: AtomicBool,
}

impl PredictServer {
    /// Pods and containers with a model (the census).
    pub(crate) fn model_count(&self) -> usize {
        self.models.locked().by_uid.len()
    }

    pub(crate) fn new(cfg: PredictionConfig, dir: PathBuf) -> PredictServer {
        PredictServer {
            cfg,
            dir,
            models: Mutex::new(Models::default()),
            synced: AtomicBool::new(false),
        }
    }

    pub(crate) fn config(&self) -> &PredictionConfig {
        &self.cfg
    }

    pub(crate) fn models(&self) -> MutexGuard<'_, Models> {
        self.models.locked()
    }

    /// True after the first training round.
    pub(crate) fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Relaxed)
    }

    /// Restores every checkpoint that decodes (corrupt files and `.tmp` leftovers are
    /// deleted). Pods' UIDs are checked later, by [`PredictServer::forget_unknown`], once
    /// the pod sources had time to deliver them.
    pub(crate) fn restore(&self, now: i64) -> checkpoint::Restored {
        let (restored, report) = checkpoint::restore(&self.cfg, &self.dir, |_| true, now);
        let mut models = self.models();
        for (uid, m) in restored {
            if models.by_uid.len() < model::MAX_MODELS {
                models.by_uid.insert(uid, m);
            }
        }
        report
    }

    /// Drops the models, and deletes the checkpoints, of UIDs that are neither one of
    /// `pods` nor the node's (koordlet's check of a restored UID); returns them.
    pub(crate) fn forget_unknown(&self, pods: &[Arc<Pod>]) -> Vec<String> {
        let node = model::node_uids();
        let known = |u: &str| {
            node.iter().any(|n| n == u) || pods.iter().any(|p| crate::pod::pod_uid(p) == u)
        };
        let mut models = self.models();
        let gone: Vec<String> = models
            .by_uid
            .keys()
            .filter(|u| !known(u))
            .cloned()
            .collect();
        for uid in &gone {
            models.by_uid.remove(uid);
            info!(uid = %uid, "prediction: deleting the checkpoint of an unknown UID");
            if let Err(e) = checkpoint::remove(&self.dir, uid) {
                warn!(error = %e, "prediction: cannot delete a checkpoint");
            }
        }
        gone
    }

    /// One training round.
    pub(crate) fn train(&self, cache: &MetricCache, pods: &[Arc<Pod>], now: i64) {
        training::train(&self.cfg, &mut self.models(), cache, pods, now);
        self.synced.store(true, Ordering::Relaxed);
    }

    /// Deletes stale models and their checkpoints; returns their UIDs.
    pub(crate) fn gc(&self, now: i64) -> Vec<String> {
        let gone = self.models().gc(self.cfg.model_expiration_ms, now);
        for uid in &gone {
            if let Err(e) = checkpoint::remove(&self.dir, uid) {
                warn!(error = %e, "prediction: cannot delete a stale checkpoint");
            }
        }
        gone
    }

    /// Saves the oldest-checkpointed models, at most `checkpoint_max_per_step`,
    /// stopping at one saved within the checkpoint interval; returns their UIDs.
    pub(crate) fn checkpoint(&self, now: i64) -> Vec<String> {
        let mut models = self.models();
        let mut order: Vec<(i64, String)> = models
            .by_uid
            .iter()
            .map(|(u, m)| (m.last_checkpointed_ms, u.clone()))
            .collect();
        order.sort();
        let mut saved = Vec::new();
        for (last, uid) in order.into_iter().take(self.cfg.checkpoint_max_per_step) {
            if now - last < self.cfg.checkpoint_interval_ms {
                break;
            }
            let Some(m) = models.by_uid.get_mut(&uid) else {
                continue;
            };
            match checkpoint::save(&self.dir, &uid, m, now) {
                Ok(()) => {
                    m.last_checkpointed_ms = now;
                    saved.push(uid);
                }
                Err(e) => warn!(error = %e, "prediction: cannot write a checkpoint"),
            }
        }
        saved
    }

    /// The prediction loop: restores the checkpoints at once (so predictions are served
    /// from the start), waits one interval for the pod sources, forgets the restored UIDs
    /// no pod has, then trains, collects garbage and checkpoints every interval.
    pub(crate) async fn run(
        self: Arc<Self>,
        cache: Arc<MetricCache>,
        pods: Arc<crate::pod::PodManager>,
        interval: Duration,
        cancel: CancellationToken,
    ) {
        let r = self.restore(now_ms());
        info!(dir = %self.dir.display(), restored = r.models.len(), deleted = r.deleted.len(), "prediction: checkpoints restored");
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let gone = self.forget_unknown(&pods.all());
        if !gone.is_empty() {
            info!(
                deleted = gone.len(),
                "prediction: checkpoints of unknown UIDs deleted"
            );
        }
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = now_ms();
            self.train(&cache, &pods.all(), now);
            self.gc(now);
            self.checkpoint(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_go_oldest_first_at_most_12_and_not_within_the_interval() {
        let d = tempfile::tempdir().unwrap();
        let s = PredictServer::new(PredictionConfig::default(), d.path().join("cp"));
        let now = 1_700_000_000_000;
        {
            let mut m = s.models();
            for i in 0..15 {
                m.add(&s.cfg, &format!("u{i:02}"), 1.0, 1e9, now);
            }
        }
        let first = s.checkpoint(now);
        assert_eq!(first.len(), 12);
        // The three never saved go first; then nothing, as the rest are fresh.
        let second = s.checkpoint(now + MINUTE);
        assert_eq!(second, vec!["u12", "u13", "u14"]);
        assert!(s.checkpoint(now + 2 * MINUTE).is_empty());
        assert_eq!(s.checkpoint(now + 10 * MINUTE).len(), 12);
        assert_eq!(std::fs::read_dir(d.path().join("cp")).unwrap().count(), 15);
        // GC removes stale models with their files.
        s.models().by_uid.get_mut("u00").unwrap().last_updated_ms = now - 31 * MINUTE;
        assert_eq!(s.gc(now), vec!["u00"]);
        assert!(!d.path().join("cp/u00").exists());
        assert!(d.path().join("cp/u01").exists());
    }

    #[test]
    fn restored_models_of_unknown_uids_are_forgotten_with_their_files() {
        let d = tempfile::tempdir().unwrap();
        let s = PredictServer::new(PredictionConfig::default(), d.path().join("cp"));
        let now = 1_700_000_000_000;
        {
            let mut m = s.models();
            for uid in ["__node__", "pod-a", "pod-gone"] {
                m.add(&s.cfg, uid, 1.0, 1e9, now);
            }
        }
        assert_eq!(s.checkpoint(now).len(), 3);
        // A restart: everything that decodes is restored at once.
        let again = PredictServer::new(PredictionConfig::default(), d.path().join("cp"));
        assert_eq!(again.restore(now).models.len(), 3);
        let mut pod = Pod::default();
        pod.metadata.uid = Some("pod-a".into());
        assert_eq!(again.forget_unknown(&[Arc::new(pod)]), vec!["pod-gone"]);
        assert!(!d.path().join("cp/pod-gone").exists());
        assert!(d.path().join("cp/pod-a").exists());
        assert!(d.path().join("cp/__node__").exists());
    }
}
