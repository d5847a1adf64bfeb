//! Memory eviction by real usage (koordlet's `memoryevict`, the `BEMemoryEvict`
//! trigger): when the node's last memory usage, in whole percent of capacity, reaches
//! the threshold, pods labelled `koordinator.sh/qosClass: BE` are evicted in
//! koordlet's order until capacity × (usage% − lower%) is released (the shared
//! round, with what pods evicted earlier and still here count for, is `evict.rs`).

use std::time::Duration;

use super::evict::policy_allows;
use super::inputs::{PodUsage, UsageView};
use crate::koordapi::MemoryEvictConfig;
use crate::pod::is_critical;

/// The feature gate's name, in the eviction reason.
pub(crate) const FEATURE: &str = "BEMemoryEvict";
/// koordlet's `MemoryEvictCoolTimeSeconds`.
pub(crate) const COOL_DOWN: Duration = Duration::from_secs(4);

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
    cfg: MemoryEvictConfig,
    node_memory_bytes: f64,
    capacity_bytes: i64,
) -> Option<Trigger> {
    if capacity_bytes <= 0 {
        return None;
    }
    let usage_percent = (node_memory_bytes as i64).saturating_mul(100) / capacity_bytes;
    if usage_percent < cfg.threshold_percent {
        return None;
    }
    let release = capacity_bytes.saturating_mul(usage_percent - cfg.lower_percent) / 100;
    Some(Trigger {
        usage_percent,
        release_bytes: release as f64,
    })
}

/// The victims in eviction order (koordlet's `getSortedBEPodInfos`): pods labelled
/// BE whose `koordinator.sh/eviction-policy` allows BEMemoryEvict (and never a
/// critical pod in oxlet: its evictor is kubelet's, which spares them); by
/// spec.priority ascending, then memory usage descending with pods without usage
/// last, then name descending. koordlet compares priorities only where both pods
/// have one, which is no total order; a pod without one counts as 0 here, the value
/// the Priority admission plugin gives it (Rust's sort needs a total order).
pub(crate) fn victims(view: &UsageView) -> Vec<&PodUsage> {
    let mut v: Vec<&PodUsage> = view
        .pods
        .iter()
        .filter(|p| p.koord_be && !is_critical(&p.pod) && policy_allows(&p.pod, FEATURE))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::pod_uid;
    use k8s_openapi::api::core::v1::Pod;
    use std::sync::Arc;

    fn cfg() -> MemoryEvictConfig {
        MemoryEvictConfig {
            threshold_percent: 70,
            lower_percent: 68,
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
        assert_eq!(trigger(cfg(), 690.0, 1000), None);
        let t = trigger(cfg(), 750.0, 1000).unwrap();
        assert_eq!(t.usage_percent, 75);
        assert!((t.release_bytes - 70.0).abs() < 1e-9);
        assert!(trigger(cfg(), 700.0, 1000).is_some());
        // Whole percent, truncated as koordlet does: 70.9 % releases 1000 × (70 − 68) %.
        let t = trigger(cfg(), 709.0, 1000).unwrap();
        assert_eq!((t.usage_percent, t.release_bytes), (70, 20.0));
        assert_eq!(trigger(cfg(), 699.9, 1000), None);
        assert_eq!(trigger(cfg(), 700.0, 0), None);
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
                // Its eviction policy lists another feature only.
                with(be("opted-out", 900.0), |p| {
                    p.metadata.annotations = Some(
                        [(
                            "koordinator.sh/eviction-policy".to_string(),
                            r#"["BECPUEvict"]"#.to_string(),
                        )]
                        .into(),
                    );
                }),
                // koordlet's memory eviction knows no opt-out label or annotation.
                with(be("eviction-enabled-false", 5.0), |p| {
                    p.metadata.annotations = Some(
                        [(
                            "koordinator.sh/eviction-enabled".to_string(),
                            "false".to_string(),
                        )]
                        .into(),
                    );
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
        assert_eq!(
            order,
            [
                "big",
                "small",
                "eviction-enabled-false",
                "no-metrics-b",
                "no-metrics-a"
            ]
        );
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
}
