//! The CPU evictor's round (koordlet's `cpuEvict`): BECPUEvict, then CPUEvict, each
//! evicting through [`QosManager::kill`]; one cool-down of 20 s after a round that
//! evicted, and from the start, as koordlet's one `lastEvictTime`.

use std::time::Instant;

use tracing::{debug, info};

use super::{QosManager, cpu_evict, inputs};
use crate::pod::{pod_ref, pod_uid};

impl QosManager {
    /// One round of the CPU evictor's enabled triggers.
    pub(super) fn cpu_evict(&mut self, view: &inputs::UsageView, now_ms: i64, now: Instant) {
        if self.cpu_evict.cooling(now) {
            debug!("cpu evict: cooling down after the last eviction round");
            return;
        }
        if self.d.cfg.cpu_evict_on() {
            self.be_cpu_evict(view, now_ms, now);
        }
        if self.d.cfg.cpu_usage_evict_on() {
            self.cpu_usage_evict(view, now_ms, now);
        }
    }

    /// BECPUEvict: see [`cpu_evict`].
    fn be_cpu_evict(&mut self, view: &inputs::UsageView, now_ms: i64, now: Instant) {
        let cfg = self.d.cfg.cpu_evict;
        let be_allocatable = self.node().and_then(|n| n.be_milli_allocatable());
        let t = match cpu_evict::trigger(&cfg, &self.d.cache, now_ms, be_allocatable) {
            Ok(t) => t,
            Err(skip) => {
                debug!(reason = %skip, "cpu evict: BestEffort CPU satisfaction is fine; nothing to evict");
                return;
            }
        };
        let victims = cpu_evict::victims(view);
        let picked = self.cpu_evict.pick(
            &victims,
            |p| cpu_evict::batch_request_milli(&p.pod) as f64,
            t.release_milli as f64,
            now,
        );
        if picked.is_empty() {
            debug!(
                releaseMilli = t.release_milli,
                candidates = victims.len(),
                "cpu evict: satisfaction is low, no pod left to evict"
            );
            return;
        }
        let (lower, upper) = cfg.satisfaction.unwrap_or_default();
        info!(
            beUsageMilli = t.avg.usage as i64,
            beRequestMilli = t.avg.request as i64,
            beLimitMilli = t.avg.limit as i64,
            lastLimitMilli = t.last.limit as i64,
            usageThresholdPercent = cfg.usage_threshold_percent,
            satisfactionLowerPercent = lower,
            satisfactionUpperPercent = upper,
            windowSeconds = cfg.window_seconds,
            releaseMilli = t.release_milli,
            victims = picked.len(),
            evictByAllocatable = cfg.policy == crate::koordapi::CpuEvictPolicy::EvictByAllocatable,
            "cpu evict: BestEffort pods use nearly all their CPU limit (the real limit, or the Node's batch-cpu allocatable under evictByAllocatable) and it is below the satisfaction lower percent of their requests"
        );
        for v in picked {
            let cause = format!(
                "BestEffort CPU limit {}m is below {lower}% of the {}m requested",
                t.avg.limit as i64, t.avg.request as i64
            );
            let (request, used) = (
                cpu_evict::batch_request_milli(&v.pod),
                (v.cpu_cores * 1000.0) as i64,
            );
            info!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), batchCpuRequestMilli = request, usedMilli = used, cause,
                "cpu evict: evicting BestEffort pod (requests {request}m, uses {used}m) to release {}m", t.release_milli as i64);
            self.kill(v, cpu_evict::FEATURE);
        }
    }

    /// CPUEvict: pods up to a priority, by the node's CPU usage.
    fn cpu_usage_evict(&mut self, view: &inputs::UsageView, now_ms: i64, now: Instant) {
        let Some(cfg) = self.d.cfg.cpu_usage_evict else {
            debug!(
                "cpu evict by usage: cpuEvictThresholdPercent or evictEnabledPriorityThreshold is not set"
            );
            return;
        };
        let window = self.d.cfg.cpu_evict.window_seconds;
        let capacity = self.d.capacity.cpu_milli;
        let Some((usage, release)) =
            cpu_evict::usage_trigger(&cfg, window, &self.d.cache, now_ms, capacity)
        else {
            return;
        };
        let victims = cpu_evict::victims_by_used(view, cfg.priority_threshold);
        let picked =
            self.cpu_usage_evict
                .pick(&victims, |p| p.cpu_cores * 1000.0, release as f64, now);
        if picked.is_empty() {
            debug!(
                usagePercent = usage,
                releaseMilli = release,
                candidates = victims.len(),
                "cpu evict by usage: over the threshold, no pod left to evict"
            );
            return;
        }
        self.cpu_evict.evicted_now(now);
        info!(
            capacityMilli = capacity,
            usagePercent = usage,
            thresholdPercent = cfg.threshold_percent,
            lowerPercent = cfg.lower_percent,
            windowSeconds = window,
            priorityThreshold = cfg.priority_threshold,
            releaseMilli = release,
            victims = picked.len(),
            "cpu evict by usage: node CPU usage is over the threshold"
        );
        for v in picked {
            let cause = format!(
                "node CPU usage {usage:.0}% >= threshold {}%",
                cfg.threshold_percent
            );
            let used = (v.cpu_cores * 1000.0) as i64;
            info!(pod = %pod_ref(&v.pod), podUID = %pod_uid(&v.pod), usedMilli = used, cause,
                "cpu evict by usage: evicting pod (uses {used}m, priority up to {}) to release {release}m", cfg.priority_threshold);
            self.kill(v, cpu_evict::USAGE_FEATURE);
        }
    }
}
