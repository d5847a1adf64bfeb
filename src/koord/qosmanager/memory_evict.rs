//! Memory eviction by real usage (koordlet's `memoryevict`, the `MemoryEvict`
//! trigger): when the node's last memory usage reaches the threshold, BestEffort
//! pods are evicted, in koordlet's common order, until capacity × (usage% − lower%)
//! is released. Pods evicted in the last 2 minutes count as already released, and
//! after a round that evicted nothing is evicted for 4 seconds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::config::QosConfig;
use super::inputs::{PodUsage, UsageView};
use crate::pod::{is_critical, pod_uid};

/// koordlet's `MemoryEvictCoolTimeSeconds`.
pub(crate) const COOL_DOWN: Duration = Duration::from_secs(4);
/// How long an evicted pod stays in the evicted cache.
pub(crate) const EVICTED_TTL: Duration = Duration::from_secs(120);
/// The annotation that keeps a pod from koordlet's eviction.
pub(crate) const EVICTION_ENABLED: &str = "koordinator.sh/eviction-enabled";

/// Whether the node's memory is over the threshold, and how much to release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trigger {
    pub usage_percent: f64,
    pub release_bytes: f64,
}

/// None under the threshold; else the release target: capacity × (usage% − lower%).
pub(crate) fn trigger(
    cfg: &QosConfig,
    node_memory_bytes: f64,
    capacity_bytes: i64,
) -> Option<Trigger> {
    if capacity_bytes <= 0 {
        return None;
    }
    let cap = capacity_bytes as f64;
    let usage_percent = node_memory_bytes / cap * 100.0;
    if usage_percent < cfg.memory_evict_threshold_percent as f64 {
        return None;
    }
    Some(Trigger {
        usage_percent,
        release_bytes: cap * (usage_percent - cfg.memory_evict_lower_percent as f64) / 100.0,
    })
}

/// The victims in eviction order: BestEffort pods with metrics, not critical, not
/// opted out by `koordinator.sh/eviction-enabled: "false"`, by spec.priority
/// ascending, then memory usage descending.
pub(crate) fn victims(view: &UsageView) -> Vec<&PodUsage> {
    let mut v: Vec<&PodUsage> = view
        .pods
        .iter()
        .filter(|p| p.best_effort && p.has_memory && !is_critical(&p.pod))
        .filter(|p| {
            p.pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(EVICTION_ENABLED))
                .is_none_or(|v| v != "false")
        })
        .collect();
    let prio = |p: &PodUsage| p.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    v.sort_by(|a, b| {
        prio(a)
            .cmp(&prio(b))
            .then(b.memory_bytes.total_cmp(&a.memory_bytes))
    });
    v
}

/// Pods evicted recently (koordlet's evicted-pod cache) and the last round that
/// evicted, for the cool-down.
#[derive(Debug, Default)]
pub(crate) struct EvictState {
    evicted: HashMap<String, (Instant, f64)>,
    last_round: Option<Instant>,
}

impl EvictState {
    /// Whether the cool-down after the last evicting round is still running.
    pub(crate) fn cooling(&self, now: Instant) -> bool {
        self.last_round
            .is_some_and(|t| now.duration_since(t) < COOL_DOWN)
    }

    fn expire(&mut self, now: Instant) {
        self.evicted
            .retain(|_, (t, _)| now.duration_since(*t) < EVICTED_TTL);
    }

    /// Whether the pod was evicted less than 2 minutes ago.
    pub(crate) fn is_evicted(&self, uid: &str) -> bool {
        self.evicted.contains_key(uid)
    }

    /// The pods to evict this round, in order, each with its usage: going down
    /// `victims` until the release (less what recent evictions still count for) is
    /// met, skipping pods already evicted. Records the picked ones and the round.
    pub(crate) fn pick<'a>(
        &mut self,
        victims: &[&'a PodUsage],
        release_bytes: f64,
        now: Instant,
    ) -> Vec<&'a PodUsage> {
        self.expire(now);
        let mut released: f64 = self.evicted.values().map(|(_, b)| b).sum();
        let mut picked = Vec::new();
        for v in victims {
            if released >= release_bytes {
                break;
            }
            let uid = pod_uid(&v.pod);
            if self.is_evicted(uid) {
                continue;
            }
            released += v.memory_bytes;
            self.evicted.insert(uid.to_string(), (now, v.memory_bytes));
            picked.push(*v);
        }
        if !picked.is_empty() {
            self.last_round = Some(now);
        }
        picked
    }
}

/// koordlet-like message on the evicted pod.
pub(crate) fn message(t: &Trigger, cfg: &QosConfig, victim: &PodUsage) -> String {
    format!(
        "evicted by oxlet qos manager: node memory usage {:.1}% is at or above the threshold {}% (release target {} bytes, down to {}%); this pod used {} bytes",
        t.usage_percent,
        cfg.memory_evict_threshold_percent,
        t.release_bytes as i64,
        cfg.memory_evict_lower_percent,
        victim.memory_bytes as i64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use std::sync::Arc;

    fn cfg() -> QosConfig {
        QosConfig {
            memory_evict_threshold_percent: 70,
            memory_evict_lower_percent: 68,
            ..QosConfig::default()
        }
    }

    fn with(mut p: PodUsage, f: impl FnOnce(&mut Pod)) -> PodUsage {
        let mut pod = p.pod.as_ref().clone();
        f(&mut pod);
        p.pod = Arc::new(pod);
        p
    }

    fn prio(n: i32) -> impl FnOnce(&mut Pod) {
        move |p| p.spec.get_or_insert_with(Default::default).priority = Some(n)
    }

    #[test]
    fn trigger_at_the_threshold_releases_down_to_lower() {
        assert_eq!(trigger(&cfg(), 690.0, 1000), None);
        let t = trigger(&cfg(), 750.0, 1000).unwrap();
        assert_eq!(t.usage_percent, 75.0);
        assert!((t.release_bytes - 70.0).abs() < 1e-9);
        assert!(trigger(&cfg(), 700.0, 1000).is_some());
        assert_eq!(trigger(&cfg(), 700.0, 0), None);
    }

    #[test]
    fn victims_are_best_effort_by_priority_then_usage() {
        let view = UsageView {
            node_cpu_cores: 0.0,
            node_memory_bytes: 0.0,
            pods: vec![
                PodUsage::test("small", true, 0.0, 10.0),
                PodUsage::test("big", true, 0.0, 50.0),
                with(PodUsage::test("low-prio", true, 0.0, 1.0), prio(-5)),
                PodUsage::test("burstable", false, 0.0, 500.0),
                with(PodUsage::test("opted-out", true, 0.0, 900.0), |p| {
                    p.metadata.annotations =
                        Some([(EVICTION_ENABLED.to_string(), "false".to_string())].into());
                }),
                with(
                    PodUsage::test("critical", true, 0.0, 900.0),
                    prio(2_000_000_000),
                ),
                with(PodUsage::test("node-critical", true, 0.0, 900.0), |p| {
                    p.spec
                        .get_or_insert_with(Default::default)
                        .priority_class_name = Some("system-node-critical".into());
                }),
                with(PodUsage::test("static", true, 0.0, 900.0), |p| {
                    p.metadata.annotations = Some(
                        [(
                            "kubernetes.io/config.source".to_string(),
                            "file".to_string(),
                        )]
                        .into(),
                    );
                }),
                PodUsage {
                    has_memory: false,
                    ..PodUsage::test("no-metrics", true, 0.0, 0.0)
                },
            ],
        };
        let order: Vec<&str> = victims(&view).iter().map(|p| pod_uid(&p.pod)).collect();
        assert_eq!(order, ["low-prio", "big", "small"]);
    }

    #[test]
    fn pick_stops_at_the_release_and_remembers_for_two_minutes() {
        let a = PodUsage::test("a", true, 0.0, 50.0);
        let b = PodUsage::test("b", true, 0.0, 30.0);
        let c = PodUsage::test("c", true, 0.0, 20.0);
        let list = [&a, &b, &c];
        let mut s = EvictState::default();
        let t0 = Instant::now();
        assert!(!s.cooling(t0));
        let picked: Vec<_> = s
            .pick(&list, 60.0, t0)
            .iter()
            .map(|p| pod_uid(&p.pod))
            .collect();
        assert_eq!(picked, ["a", "b"]);
        assert!(s.cooling(t0 + Duration::from_secs(3)));
        assert!(!s.cooling(t0 + COOL_DOWN));
        // Still counted as released: nothing more for the same target.
        assert!(s.pick(&list, 60.0, t0 + COOL_DOWN).is_empty());
        // A larger target skips the evicted ones.
        let picked: Vec<_> = s
            .pick(&list, 90.0, t0 + COOL_DOWN)
            .iter()
            .map(|p| pod_uid(&p.pod))
            .collect();
        assert_eq!(picked, ["c"]);
        // After 2 minutes the cache forgets them.
        let later = t0 + EVICTED_TTL + COOL_DOWN;
        assert!(s.pick(&[], 0.0, later).is_empty());
        assert!(!s.is_evicted("a"));
    }
}
