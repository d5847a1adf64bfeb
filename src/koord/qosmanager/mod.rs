//! The node QoS manager (koordlet's `qosmanager`): every second it reads the metric
//! cache's last usage and runs the strategies the node SLO config turns on, each in
//! a room of its own. Nothing here stops: a round without fresh data or with a
//! failing cgroup write is logged and the next round tries again.
//!
//! - [`config`]: the NodeSLO `resourceUsedThresholdWithBE` file and the switches.
//! - [`inputs`]: one round's view of node and pod usage from the metric cache.
//! - [`cpu_suppress`]: the BestEffort CFS quota (`cfsQuota` policy).
//! - [`memory_evict`]: evicting BestEffort pods when node memory usage is high.
//! - evictions reach the pod workers through `contracts::Evictor` (the sync loop's
//!   `WorkerEvictor`), which records the event too.
//! - [`metrics`]: koordlet's eviction and suppression metrics.
//!
//! cgroup reconcile puts the QoS cgroups' cpu shares back when they drift (on v1
//! and v2); it is done by the container manager and called from here.

pub(super) mod config;
mod cpu_suppress;
mod inputs;
mod memory_evict;
mod metrics;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cm::{ContainerManager, NodeResources};
use crate::contracts::{Eviction, Evictor};
use crate::koord::metriccache::MetricCache;
use crate::pod::PodManager;
use crate::pod::{pod_ref, pod_uid};
use config::QosConfig;
use memory_evict::EvictState;

/// koordlet's `CPUSuppressIntervalSeconds`, `MemoryEvictIntervalSeconds` and
/// `ReconcileIntervalSeconds`: all 1 s.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// What the QoS manager reads and acts on.
pub(crate) struct QosDeps {
    pub cfg: QosConfig,
    /// Later configurations (this node's NodeSLO in cluster mode), applied at once.
    pub updates: Option<tokio::sync::watch::Receiver<QosConfig>>,
    pub cache: Arc<MetricCache>,
    pub pods: Arc<PodManager>,
    pub cm: Arc<ContainerManager>,
    pub evictor: Arc<dyn Evictor>,
    pub capacity: NodeResources,
    pub allocatable: NodeResources,
    /// For the metrics' `node` label.
    pub node_name: String,
}

/// The manager and the state its strategies keep between rounds.
pub(crate) struct QosManager {
    d: QosDeps,
    evict: EvictState,
}

impl QosManager {
    pub(crate) fn new(d: QosDeps) -> Self {
        QosManager {
            d,
            evict: EvictState::default(),
        }
    }

    /// Runs a round every second until cancelled. With CPU suppress off, any quota
    /// left on the BestEffort cgroup (by an earlier run) is lifted once at start.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        if !self.d.cfg.cpu_suppress_on() {
            self.restore_quota();
        }
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut updates = self.d.updates.take();
        loop {
            let changed = async {
                match updates.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                alive = changed => match (alive, updates.as_ref()) {
                    (true, Some(rx)) => {
                        let cfg = rx.borrow().clone();
                        self.apply(cfg);
                    }
                    _ => updates = None,
                },
                _ = tick.tick() => self.round(crate::koord::metriccache::now_ms(), Instant::now()),
            }
        }
    }

    /// Takes a new configuration from the next round on; says what it turns on and
    /// off, and lifts the BestEffort quota when CPU suppress goes off.
    fn apply(&mut self, cfg: QosConfig) {
        let was = &self.d.cfg;
        info!(
            cpuSuppress = cfg.cpu_suppress_on(),
            wasCpuSuppress = was.cpu_suppress_on(),
            memoryEvict = cfg.memory_evict_on(),
            wasMemoryEvict = was.memory_evict_on(),
            cgroupReconcile = cfg.cgroup_reconcile_on(),
            cpuSuppressThresholdPercent = cfg.cpu_suppress_threshold_percent,
            memoryEvictThresholdPercent = cfg.memory_evict_threshold_percent,
            "QoS manager configuration changed; applied from this round on"
        );
        let suppress_off = was.cpu_suppress_on() && !cfg.cpu_suppress_on();
        self.d.cfg = cfg;
        if suppress_off {
            self.restore_quota();
        }
    }

    /// One round of every enabled strategy.
    pub(crate) fn round(&mut self, now_ms: i64, now: Instant) {
        let cfg = &self.d.cfg;
        if cfg.cgroup_reconcile_on() {
            for (cgroup, had, want) in self.d.cm.reconcile_qos_shares() {
                info!(cgroup = %cgroup, found = had.map_or_else(|| "none".to_string(), |s| s.to_string()), shares = want, "cgroup reconcile: QoS cgroup cpu shares drifted; put back");
            }
        }
        if !cfg.cpu_suppress_on() && !cfg.memory_evict_on() {
            return;
        }
        let pods = self.d.pods.all();
        let view = match inputs::view(&self.d.cache, &pods, now_ms) {
            Ok(v) => v,
            Err(e) => {
                debug!(reason = %e, "qos manager: no usage this round; nothing changed");
                return;
            }
        };
        if self.d.cfg.cpu_suppress_on() {
            self.suppress(&view);
        }
        if self.d.cfg.memory_evict_on() {
            self.memory_evict(&view, now);
        }
    }

    fn suppress(&mut self, view: &inputs::UsageView) {
        if !self.d.cm.cgroups_per_qos() {
            debug!("cpu suppress: no QoS cgroups (--cgroups-per-qos=false); nothing to limit");
            return;
        }
        // The advisor's first reading of a pod has its memory but no CPU rate yet; its
        // CPU would count as the system's, so wait for the next round.
        if let Some(p) = view
            .pods
            .iter()
            .find(|p| !p.best_effort && !p.koord_be && p.has_memory && !p.has_cpu)
        {
            debug!(pod = %pod_ref(&p.pod), podUID = %pod_uid(&p.pod), "cpu suppress: no CPU rate for a running pod yet; waiting a round");
            return;
        }
        let i = cpu_suppress::SuppressInputs::from_usage(
            view,
            self.d.capacity.cpu_milli,
            self.d.allocatable.cpu_milli,
        );
        let suppress = cpu_suppress::suppress_milli(&self.d.cfg, &i);
        let current = match self.d.cm.best_effort_cpu_quota() {
            Ok(q) => q,
            Err(e) => {
                warn!(error = %e, "cpu suppress: cannot read the BestEffort cgroup's quota");
                return;
            }
        };
        let Some(quota) = cpu_suppress::next_quota(suppress, current, self.d.capacity.cpu_milli)
        else {
            debug!(
                suppressMilli = suppress as i64,
                currentQuota = current.unwrap_or(-1),
                "cpu suppress: change too small, quota kept"
            );
            return;
        };
        match self.d.cm.set_best_effort_cpu_quota(quota) {
            Ok(()) => {
                if let Some(m) = metrics::qos() {
                    m.be_suppress_cpu_cores
                        .with_label_values(&[
                            self.d.node_name.as_str(),
                            metrics::SUPPRESS_CFS_QUOTA,
                        ])
                        // koordlet records the quota written, in cores (never below
                        // the 2 ms minimum), not the suppress value, which can be negative.
                        .set(quota as f64 / cpu_suppress::PERIOD_US as f64);
                }
                info!(
                    capacityMilli = i.capacity_milli,
                    thresholdPercent = self.d.cfg.cpu_suppress_threshold_percent,
                    nodeUsedMilli = i.node_used_milli as i64,
                    nonBEPodsUsedMilli = i.non_be_pods_used_milli as i64,
                    systemUsedMilli = i.system_used_milli() as i64,
                    suppressMilli = suppress as i64,
                    oldQuota = current.unwrap_or(-1),
                    quota,
                    "cpu suppress: set the BestEffort cgroup's cfs quota"
                );
            }
            Err(e) => {
                warn!(error = %e, quota, "cpu suppress: cannot write the BestEffort cgroup's quota");
            }
        }
    }

    /// Lifts the BestEffort quota (−1), as koordlet does when suppress is off.
    fn restore_quota(&mut self) {
        if !self.d.cm.cgroups_per_qos() {
            return;
        }
        match self.d.cm.best_effort_cpu_quota() {
            Ok(Some(q)) if q > 0 => match self.d.cm.set_best_effort_cpu_quota(-1) {
                Ok(()) => info!(
                    oldQuota = q,
                    "cpu suppress is off: lifted the BestEffort cgroup's cfs quota"
                ),
                Err(e) => {
                    warn!(error = %e, "cpu suppress is off: cannot lift the BestEffort cgroup's quota");
                }
            },
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "cpu suppress is off: cannot read the BestEffort cgroup's quota");
            }
        }
    }

    fn memory_evict(&mut self, view: &inputs::UsageView, now: Instant) {
        if self.evict.cooling(now) {
            debug!("memory evict: cooling down after the last eviction round");
            return;
        }
        let cfg = &self.d.cfg;
        let capacity = self.d.capacity.memory_bytes;
        let Some(t) = memory_evict::trigger(cfg, view.node_memory_bytes, capacity) else {
            return;
        };
        let victims = memory_evict::victims(view);
        let picked = self.evict.pick(&victims, t.release_bytes, now);
        // Over the threshold with nobody to evict is a steady state: said at -v=4 only.
        if picked.is_empty() {
            debug!(
                nodeUsedBytes = view.node_memory_bytes as i64,
                usagePercent = t.usage_percent,
                thresholdPercent = cfg.memory_evict_threshold_percent,
                candidates = victims.len(),
                "memory evict: over the threshold, no pod left to evict"
            );
            return;
        }
        info!(
            capacityBytes = capacity,
            nodeUsedBytes = view.node_memory_bytes as i64,
            usagePercent = t.usage_percent,
            thresholdPercent = cfg.memory_evict_threshold_percent,
            lowerPercent = cfg.memory_evict_lower_percent,
            releaseBytes = t.release_bytes as i64,
            candidates = victims.len(),
            victims = picked.len(),
            "memory evict: node memory usage is over the threshold"
        );
        for v in picked {
            let message = memory_evict::message(&t, cfg, v);
            info!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), usedBytes = v.memory_bytes as i64, releaseBytes = t.release_bytes as i64, "memory evict: evicting pod");
            if self.d.evictor.evict(v.pod.clone(), Eviction::new(message)) {
                if let Some(m) = metrics::qos() {
                    m.pod_eviction
                        .with_label_values(&[
                            self.d.node_name.as_str(),
                            metrics::REASON_MEMORY_USAGE,
                        ])
                        .inc();
                }
            } else {
                debug!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), "memory evict: pod is not running here any more");
            }
        }
    }
}

#[cfg(test)]
mod tests;
