//! Memory eviction by real usage (koordlet's `memoryevict`, the `BEMemoryEvict`
//! trigger): when the node's last memory usage, in whole percent of capacity, reaches
//! the threshold, pods labelled `koordinator.sh/qosClass: BE` are evicted in
//! koordlet's order until capacity × (usage% − lower%) is released. Pods evicted in
//! the last 2 minutes count as already released, and after a round that evicted
//! nothing is evicted for 4 seconds.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::config::QosConfig;
use super::inputs::{PodUsage, UsageView};
use crate::pod::{is_critical, pod_uid};

/// The feature gate's name, in the eviction reason.
pub(crate) const FEATURE: &str = "BEMemoryEvict";
/// koordlet's `MemoryEvictCoolTimeSeconds`.
pub(crate) const COOL_DOWN: Duration = Duration::from_secs(4);
/// How long an evicted pod stays in the evicted cache.
pub(crate) const EVICTED_TTL: Duration = Duration::from_secs(120);
/// The annotation that keeps a pod from koordlet's eviction.
pub(crate) const EVICTION_ENABLED: &str = "koordinator.sh/eviction-enabled";

/// Whether the node's memory is over the threshold, and how much to release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Trigger {
    /// Whole percent, truncated, as koordlet computes it (`used × 100 / capacity`).
    pub usage_percent: i64,
    pub release_bytes: f64,
}

/// None under the threshold; else the release target: capacity × (usage% − lower%),
/// in koordlet's integer arithmetic.
pub(crate) fn trigger(
    cfg: &QosConfig,
    node_memory_bytes: f64,
    capacity_bytes: i64,
) -> Option<Trigger> {
    if capacity_bytes <= 0 {
        return None;
    }
    let usage_percent = (node_memory_bytes as i64).saturating_mul(100) / capacity_bytes;
    if usage_percent < cfg.memory_evict_threshold_percent {
        return None;
    }
    let release =
        capacity_bytes.saturating_mul(usage_percent - cfg.memory_evict_lower_percent) / 100;
    Some(Trigger {
        usage_percent,
        release_bytes: release as f64,
    })
}

/// The victims in eviction order (koordlet's `getSortedBEPodInfos`): pods labelled
/// BE, not critical, not opted out by `koordinator.sh/eviction-enabled: "false"`; by
/// spec.priority ascending, then memory usage descending with pods without usage
/// last, then name descending. koordlet compares priorities only where both pods
/// have one, which is no total order; a pod without one counts as 0 here, the value
/// the Priority admission plugin gives it (Rust's sort needs a total order).
pub(crate) fn victims(view: &UsageView) -> Vec<&PodUsage> {
    let mut v: Vec<&PodUsage> = view
        .pods
        .iter()
        .filter(|p| p.koord_be && !is_critical(&p.pod))
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
    let used = |p: &PodUsage| {
        if p.has_memory {
            p.memory_bytes as i64
        } else {
            0
        }
    };
    v.sort_by(|a, b| {
        prio(a)
            .cmp(&prio(b))
            .then_with(|| match (used(a), used(b)) {
                (0, 0) => b.pod.metadata.name.cmp(&a.pod.metadata.name),
                (0, _) => std::cmp::Ordering::Greater,
                (_, 0) => std::cmp::Ordering::Less,
                (x, y) => y.cmp(&x),
            })
    });
    v
}

/// Pods evicted recently (koordlet's evicted-pod cache) and the last round that
/// evicted, for the cool-down.
#[derive(Debug)]
pub(crate) struct EvictState {
    evicted: HashMap<String, (Instant, f64)>,
    last_round: Option<Instant>,
    cool_down: Duration,
}

impl Default for EvictState {
    /// Memory eviction's: no round yet, a 4 s cool-down.
    fn default() -> Self {
        EvictState::new(COOL_DOWN, None)
    }
}

impl EvictState {
    /// A cache with `cool_down` after an evicting round; `last_round` starts a
    /// cool-down at once (koordlet's CPU evictor starts cooling when it is made).
    pub(crate) fn new(cool_down: Duration, last_round: Option<Instant>) -> Self {
        EvictState {
            evicted: HashMap::new(),
            last_round,
            cool_down,
        }
    }

    /// Whether the cool-down after the last evicting round is still running.
    pub(crate) fn cooling(&self, now: Instant) -> bool {
        self.last_round
            .is_some_and(|t| now.duration_since(t) < self.cool_down)
    }

    fn expire(&mut self, now: Instant) {
        self.evicted
            .retain(|_, (t, _)| now.duration_since(*t) < EVICTED_TTL);
    }

    /// Starts the cool-down: a round evicted (by another trigger sharing it).
    pub(crate) fn evicted_now(&mut self, now: Instant) {
        self.last_round = Some(now);
    }

    /// Whether the pod was evicted less than 2 minutes ago.
    pub(crate) fn is_evicted(&self, uid: &str) -> bool {
        self.evicted.contains_key(uid)
    }

    /// The pods to evict this round, in order, each counting its `amount`: going
    /// down `victims` until the release (less what recent evictions still count for)
    /// is met, skipping pods already evicted. Records the picked ones and the round.
    pub(crate) fn pick<'a>(
        &mut self,
        victims: &[&'a PodUsage],
        amount: impl Fn(&PodUsage) -> f64,
        release: f64,
        now: Instant,
    ) -> Vec<&'a PodUsage> {
        self.expire(now);
        let mut released: f64 = self.evicted.values().map(|(_, b)| b).sum();
        let mut picked = Vec::new();
        for v in victims {
            if released >= release {
                break;
            }
            let uid = pod_uid(&v.pod);
            if self.is_evicted(uid) {
                continue;
            }
            let a = amount(v);
            released += a;
            self.evicted.insert(uid.to_string(), (now, a));
            picked.push(*v);
        }
        if !picked.is_empty() {
            self.last_round = Some(now);
        }
        picked
    }
}

/// koordlet's reason for an eviction task (`EvictReasonPrefix` + the feature gate).
pub(crate) fn reason(feature: &str) -> String {
    format!("trigger by koordlet feature {feature}")
}

/// koordlet's message on the evicted pod (`KillAndEvictPods`).
pub(crate) fn message(feature: &str, victim: &PodUsage) -> String {
    format!(
        "{}, kill pod: {}",
        reason(feature),
        victim.pod.metadata.name.as_deref().unwrap_or_default()
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
        assert_eq!(t.usage_percent, 75);
        assert!((t.release_bytes - 70.0).abs() < 1e-9);
        assert!(trigger(&cfg(), 700.0, 1000).is_some());
        // Whole percent, truncated as koordlet does: 70.9 % releases 1000 × (70 − 68) %.
        let t = trigger(&cfg(), 709.0, 1000).unwrap();
        assert_eq!((t.usage_percent, t.release_bytes), (70, 20.0));
        assert_eq!(trigger(&cfg(), 699.9, 1000), None);
        assert_eq!(trigger(&cfg(), 700.0, 0), None);
    }

    /// A pod labelled koordinator's BE, with `mem` bytes used.
    fn be(uid: &str, mem: f64) -> PodUsage {
        PodUsage {
            koord_be: true,
            ..PodUsage::test(uid, true, 0.0, mem)
        }
    }

    #[test]
    fn victims_are_labelled_be_by_usage_with_the_unmeasured_last() {
        let view = UsageView {
            host_apps_cpu_cores: (0.0, 0.0),
            node_cpu_cores: 0.0,
            node_memory_bytes: 0.0,
            pods: vec![
                be("small", 10.0),
                be("big", 50.0),
                // Kubernetes' BestEffort without the label is not koordinator's BE.
                PodUsage::test("unlabelled", true, 0.0, 700.0),
                PodUsage::test("burstable", false, 0.0, 500.0),
                with(be("opted-out", 900.0), |p| {
                    p.metadata.annotations =
                        Some([(EVICTION_ENABLED.to_string(), "false".to_string())].into());
                }),
                with(be("critical", 900.0), prio(2_000_000_000)),
                with(be("node-critical", 900.0), |p| {
                    p.spec
                        .get_or_insert_with(Default::default)
                        .priority_class_name = Some("system-node-critical".into());
                }),
                with(be("static", 900.0), |p| {
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
                    ..be("no-metrics-a", 0.0)
                },
                PodUsage {
                    has_memory: false,
                    ..be("no-metrics-b", 0.0)
                },
            ],
        };
        let order: Vec<&str> = victims(&view).iter().map(|p| pod_uid(&p.pod)).collect();
        assert_eq!(order, ["big", "small", "no-metrics-b", "no-metrics-a"]);
        // The lowest priority goes first; none counts as 0.
        let view = UsageView {
            host_apps_cpu_cores: (0.0, 0.0),
            pods: vec![
                with(be("high", 50.0), prio(10)),
                be("none", 60.0),
                with(be("low", 1.0), prio(-5)),
            ],
            ..view
        };
        let order: Vec<&str> = victims(&view).iter().map(|p| pod_uid(&p.pod)).collect();
        assert_eq!(order, ["low", "none", "high"]);
    }

    #[test]
    fn pick_stops_at_the_release_and_remembers_for_two_minutes() {
        let a = PodUsage::test("a", true, 0.0, 50.0);
        let b = PodUsage::test("b", true, 0.0, 30.0);
        let c = PodUsage::test("c", true, 0.0, 20.0);
        let list = [&a, &b, &c];
        let mem = |p: &PodUsage| p.memory_bytes;
        let mut s = EvictState::default();
        let t0 = Instant::now();
        assert!(!s.cooling(t0));
        let picked: Vec<_> = s
            .pick(&list, mem, 60.0, t0)
            .iter()
            .map(|p| pod_uid(&p.pod))
            .collect();
        assert_eq!(picked, ["a", "b"]);
        assert!(s.cooling(t0 + Duration::from_secs(3)));
        assert!(!s.cooling(t0 + COOL_DOWN));
        // Still counted as released: nothing more for the same target.
        assert!(s.pick(&list, mem, 60.0, t0 + COOL_DOWN).is_empty());
        // A larger target skips the evicted ones.
        let picked: Vec<_> = s
            .pick(&list, mem, 90.0, t0 + COOL_DOWN)
            .iter()
            .map(|p| pod_uid(&p.pod))
            .collect();
        assert_eq!(picked, ["c"]);
        // After 2 minutes the cache forgets them.
        let later = t0 + EVICTED_TTL + COOL_DOWN;
        assert!(s.pick(&[], mem, 0.0, later).is_empty());
        assert!(!s.is_evicted("a"));
    }
}
