//! The node QoS manager (koordlet's `qosmanager`): every second it reads the metric
//! cache's last usage and runs the strategies the node SLO config turns on, each in
//! a room of its own. Nothing here stops: a round without fresh data or with a
//! failing cgroup write is logged and the next round tries again.
//!
//! - its configuration, from `--node-slo-file` or a NodeSLO, is `crate::koordapi`'s
//!   `QosConfig`, which the runtime hooks and the NodeSLO watch share.
//! - [`inputs`]: one round's view of node and pod usage from the metric cache.
//! - [`cpu_suppress`]: what BestEffort may use, and the CFS quota (`cfsQuota` policy);
//!   [`cpuset_suppress`]: the CPUs it gets (`cpuset` policy); `suppress_apply`: both
//!   written to the cgroups, the other policy's mechanism put back.
//! - [`memory_evict`]: evicting BestEffort pods when node memory usage is high.
//! - [`cpu_evict`]: evicting BestEffort pods when their CPU satisfaction is low
//!   (koordlet's BECPUEvict).
//! - evictions reach the pod workers through `contracts::Evictor` (the sync loop's
//!   `WorkerEvictor`), which records the event too.
//! - [`metrics`]: koordlet's eviction and suppression metrics.
//!
//! cgroup reconcile puts the QoS cgroups' cpu shares back when they drift (on v1
//! and v2; done by the container manager and called from here), and writes
//! koordlet's memory QoS ([`memory_qos`]: `memory.min`, `memory.low`, `memory.high`
//! at QoS, pod and container level, where the kernel has the files).

mod cpu_evict;
mod cpu_evict_apply;
mod cpu_suppress;
mod cpuset_suppress;
mod evict;
mod inputs;
mod memory_evict;
mod memory_qos;
mod memory_qos_apply;
mod metrics;
mod suppress_apply;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::cm::{ContainerManager, NodeResources};
use crate::contracts::{Eviction, Evictor};
use crate::koordapi::QosConfig;
use crate::metriccache::MetricCache;
use crate::pod::PodManager;
use crate::pod::{pod_ref, pod_uid};
use evict::EvictState;

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
    /// The running pods with their pod and container cgroups (memory QoS).
    pub lister: Box<dyn crate::advisor::TargetLister>,
    pub capacity: NodeResources,
    pub allocatable: NodeResources,
    /// What koordlet reads of this node's Node (cluster mode; None standalone): the
    /// batch-cpu allocatable of `evictByAllocatable`, the reservation annotation.
    pub node: Option<crate::koord::slo::NodeView>,
    /// For the metrics' `node` label.
    pub node_name: String,
}

/// The manager and the state its strategies keep between rounds.
pub(crate) struct QosManager {
    d: QosDeps,
    evict: EvictState,
    /// BECPUEvict's evicted pods, and the CPU evictor's cool-down (20 s, shared
    /// with CPUEvict, as koordlet's one `lastEvictTime`).
    cpu_evict: EvictState,
    /// CPUEvict's evicted pods (their used CPU counts as released).
    cpu_usage_evict: EvictState,
    /// The kernel's online CPU list (a test points it elsewhere).
    online_cpus: std::path::PathBuf,
    /// Lasting conditions already said once (no cpuset controller, too few CPUs,
    /// no memory QoS files).
    said: std::collections::HashSet<&'static str>,
}

impl QosManager {
    pub(crate) fn new(d: QosDeps) -> Self {
        QosManager {
            d,
            evict: EvictState::new(memory_evict::COOL_DOWN, None),
            // koordlet's CPU evictor starts its cool-down when it is made.
            cpu_evict: EvictState::new(cpu_evict::COOL_DOWN, Some(Instant::now())),
            cpu_usage_evict: EvictState::new(Duration::ZERO, None),
            online_cpus: suppress_apply::ONLINE_CPUS.into(),
            said: std::collections::HashSet::new(),
        }
    }

    /// Runs a round every second until cancelled. With CPU suppress off, any quota
    /// or narrowed cpuset left on the BestEffort cgroups (by an earlier run) is put
    /// back once at start.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        if !self.d.cfg.cpu_suppress_on() {
            self.restore_quota("cpu suppress is off");
            self.recover_cpuset("cpu suppress is off");
        }
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut updates = self.d.updates.take();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                cfg = crate::koordapi::next_update(&mut updates) => self.apply(cfg),
                _ = tick.tick() => self.round(crate::metriccache::now_ms(), Instant::now()),
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
            cpuEvict = cfg.cpu_evict_on(),
            wasCpuEvict = was.cpu_evict_on(),
            cpuUsageEvict = cfg.cpu_usage_evict_on(),
            cgroupReconcile = cfg.cgroup_reconcile_on(),
            cpuSuppressPolicy = cfg.cpu_suppress_policy.name(),
            cpuSuppressThresholdPercent = cfg.cpu_suppress_threshold_percent,
            memoryEvictThresholdPercent = cfg.memory_evict.map_or(-1, |m| m.threshold_percent),
            "QoS manager configuration changed; applied from this round on"
        );
        let suppress_off = was.cpu_suppress_on() && !cfg.cpu_suppress_on();
        self.d.cfg = cfg;
        if suppress_off {
            self.restore_quota("cpu suppress went off");
            self.recover_cpuset("cpu suppress went off");
        }
    }

    /// One round of every enabled strategy.
    pub(crate) fn round(&mut self, now_ms: i64, now: Instant) {
        if self.d.cfg.cgroup_reconcile_on() {
            for (cgroup, had, want) in self.d.cm.reconcile_qos_shares() {
                info!(cgroup = %cgroup, found = had.map_or_else(|| "none".to_string(), |s| s.to_string()), shares = want, "cgroup reconcile: QoS cgroup cpu shares drifted; put back");
            }
            self.reconcile_memory_qos();
        }
        let cfg = &self.d.cfg;
        if !cfg.cpu_suppress_on()
            && !cfg.memory_evict_on()
            && !cfg.cpu_evict_on()
            && !cfg.cpu_usage_evict_on()
        {
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
        if self.d.cfg.cpu_evict_on() || self.d.cfg.cpu_usage_evict_on() {
            self.cpu_evict(&view, now_ms, now);
        }
    }

    fn memory_evict(&mut self, view: &inputs::UsageView, now: Instant) {
        if self.evict.cooling(now) {
            debug!("memory evict: cooling down after the last eviction round");
            return;
        }
        let Some(cfg) = self.d.cfg.memory_evict else {
            return;
        };
        let capacity = self.d.capacity.memory_bytes;
        let Some(t) = memory_evict::trigger(cfg, view.node_memory_bytes, capacity) else {
            return;
        };
        let victims = memory_evict::victims(view);
        let picked = self
            .evict
            .pick(&victims, |p| p.memory_bytes, t.release_bytes, now);
        // Over the threshold with nobody to evict is a steady state: said at -v=4 only.
        if picked.is_empty() {
            debug!(
                nodeUsedBytes = view.node_memory_bytes as i64,
                usagePercent = t.usage_percent,
                thresholdPercent = cfg.threshold_percent,
                candidates = victims.len(),
                "memory evict: over the threshold, no pod left to evict"
            );
            return;
        }
        info!(
            capacityBytes = capacity,
            nodeUsedBytes = view.node_memory_bytes as i64,
            usagePercent = t.usage_percent,
            thresholdPercent = cfg.threshold_percent,
            lowerPercent = cfg.lower_percent,
            releaseBytes = t.release_bytes as i64,
            candidates = victims.len(),
            victims = picked.len(),
            "memory evict: node memory usage is over the threshold"
        );
        for v in picked {
            let cause = format!(
                "node memory usage {:.0}% >= threshold {}%",
                t.usage_percent, cfg.threshold_percent
            );
            info!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), usedBytes = v.memory_bytes as i64, releaseBytes = t.release_bytes as i64, cause,
                "memory evict: evicting BestEffort pod using {}Mi, to release {}Mi down to {}%",
                v.memory_bytes as i64 >> 20, t.release_bytes as i64 >> 20, cfg.lower_percent);
            self.kill(v, memory_evict::FEATURE);
        }
    }

    /// What koordlet reads of the Node now; None in standalone mode and until read.
    fn node(&self) -> Option<crate::koord::slo::NodeInfo> {
        self.d.node.as_ref().and_then(|rx| rx.borrow().clone())
    }

    /// Evicts `v` as koordlet's `KillAndEvictPods` does: its containers stopped at
    /// once (grace 0), koordlet's message, and `koordlet_pod_eviction{reason="evicted"}`.
    fn kill(&self, v: &inputs::PodUsage, feature: &str) {
        let eviction = Eviction {
            grace_seconds: Some(0),
            ..Eviction::new(evict::message(feature, v))
        };
        if self.d.evictor.evict(v.pod.clone(), eviction) {
            if let Some(m) = metrics::qos() {
                m.pod_eviction
                    .with_label_values(&[self.d.node_name.as_str(), metrics::REASON_EVICTED])
                    .inc();
            }
        } else {
            debug!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), feature, "qos manager: pod to evict is not running here any more");
        }
    }
}

#[cfg(test)]
mod tests;
