//! cgroup reconcile's memory QoS (koordlet's `cgreconcile`, its `memory.min`,
//! `memory.low` and `memory.high`): from each pod's koordinator QoS class (the
//! `resourceQOSStrategy` percents of its class, under its own `koordinator.sh/memoryQOS`
//! annotation) and its memory requests and limits,
//! at three levels: the QoS cgroups (the sums of their pods' values; `kubepods`, the
//! Guaranteed level, holds every pod's), the pod cgroups, and the running containers'
//! cgroups (the only level with `memory.high`). Pods labelled BE count their
//! `kubernetes.io/batch-memory` instead. The files are cgroup v2's (or an Anolis v1
//! kernel's); where the kernel has none, nothing is written.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::QosClass;
use crate::koordapi::{KoordQos, koord_qos_with_default};
use crate::koordapi::{MemoryQosClasses, MemoryQosPercents};

/// koordlet's `system.PageSize`: `memory.high` is rounded down to it.
pub(crate) const PAGE_SIZE: i64 = 4096;
/// `memory.high` without a limit: the kernel's `max` (koordlet writes MaxInt64).
pub(crate) const MAX: i64 = i64::MAX;
const BATCH_MEMORY: &str = "kubernetes.io/batch-memory";

/// The values for one cgroup; `high` only at container level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryValues {
    pub min: i64,
    pub low: i64,
    pub high: Option<i64>,
}

/// A pod's own memory QoS (koordinator's `PodMemoryQOSConfig`, JSON).
const POD_MEMORY_QOS: &str = "koordinator.sh/memoryQOS";

/// The pod's percents: its class's (`GetPodResourceQoSByQoSClass`: LSE uses LSR's),
/// then its own annotation's (`mergePodResourceQoSForMemoryQoS`).
pub(crate) fn percents(cfg: &MemoryQosClasses, pod: &Pod) -> MemoryQosPercents {
    let class = match koord_qos_with_default(pod) {
        KoordQos::Lse | KoordQos::Lsr => cfg.lsr,
        KoordQos::Ls => cfg.ls,
        KoordQos::Be => cfg.be,
        KoordQos::System => cfg.system,
        KoordQos::None => MemoryQosPercents::default(),
    };
    pod_override(pod, class)
}

/// The annotation over `class`: policy `none` turns memory QoS off for the pod,
/// `auto` starts from koordinator's recommended values (all three 0), `default` (or
/// none given) from the class's; then each percent the pod sets (0 to 100) wins. A
/// value that is not such JSON leaves the class's, as koordlet ignores it.
fn pod_override(pod: &Pod, class: MemoryQosPercents) -> MemoryQosPercents {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct PodCfg {
        #[serde(default)]
        policy: String,
        min_limit_percent: Option<i64>,
        low_limit_percent: Option<i64>,
        throttling_percent: Option<i64>,
    }
    let Some(text) = super::inputs::annotation(pod, POD_MEMORY_QOS) else {
        return class;
    };
    let Ok(c) = serde_json::from_str::<PodCfg>(text) else {
        return class;
    };
    let mut p = match c.policy.as_str() {
        "none" => return MemoryQosPercents::default(),
        "auto" => MemoryQosPercents::default(),
        _ => class,
    };
    let percent = |v: Option<i64>| v.filter(|v| (0..=100).contains(v));
    p.min = percent(c.min_limit_percent).unwrap_or(p.min);
    p.low = percent(c.low_limit_percent).unwrap_or(p.low);
    p.throttling = percent(c.throttling_percent).unwrap_or(p.throttling);
    p
}

fn amount(c: &Container, which: &str, name: &str) -> i64 {
    crate::cm::container_resource(c, which, name)
        .and_then(|q| crate::quantity::bytes(q).ok())
        .unwrap_or(0)
}

fn is_be(pod: &Pod) -> bool {
    KoordQos::of_label(pod) == Some(KoordQos::Be)
}

/// The pod's memory request: Kubernetes' pod request, or for a BE-labelled pod the
/// sum of its containers' positive `batch-memory` requests.
pub(crate) fn pod_request(pod: &Pod) -> i64 {
    if is_be(pod) {
        pod.spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| amount(c, "requests", BATCH_MEMORY).max(0))
            .sum()
    } else {
        crate::cm::pod_requests(pod)
            .ok()
            .and_then(|r| r.memory_bytes)
            .unwrap_or(0)
    }
}

/// Pod level: request × min% and × low%, low raised to min where set below it.
pub(crate) fn pod_values(pod: &Pod, p: MemoryQosPercents) -> MemoryValues {
    let req = pod_request(pod);
    let min = req.saturating_mul(p.min) / 100;
    let mut low = req.saturating_mul(p.low) / 100;
    if low > 0 && low < min {
        low = min;
    }
    MemoryValues {
        min,
        low,
        high: None,
    }
}

/// Container level: min and low from its request (0 without one); high =
/// request + (limit − request) × throttling%, the limit being the node's allocatable
/// memory when the container has none, rounded down to a page; `max` at 0 %.
pub(crate) fn container_values(
    pod: &Pod,
    c: &Container,
    p: MemoryQosPercents,
    allocatable_bytes: i64,
) -> MemoryValues {
    let (req, limit) = if is_be(pod) {
        (
            amount(c, "requests", BATCH_MEMORY),
            amount(c, "limits", BATCH_MEMORY),
        )
    } else {
        (
            amount(c, "requests", "memory"),
            amount(c, "limits", "memory"),
        )
    };
    let req = req.max(0);
    let min = req.saturating_mul(p.min) / 100;
    let mut low = req.saturating_mul(p.low) / 100;
    let mut high = if p.throttling == 0 {
        MAX
    } else {
        let limit = if limit > 0 { limit } else { allocatable_bytes };
        let h = req.saturating_add((limit - req).saturating_mul(p.throttling) / 100);
        h / PAGE_SIZE * PAGE_SIZE
    };
    if low > 0 && low < min {
        low = min;
    }
    if high > 0 && high < min {
        high = min;
    }
    MemoryValues {
        min,
        low,
        high: Some(high),
    }
}

/// QoS level (`updateCgroupSummaryForQoS`, `completeCgroupSummaryForQoS`): each of
/// Guaranteed, Burstable and BestEffort sums its pods' request × min% and × low%;
/// Guaranteed's cgroup is `kubepods`, the parent of the others, so it gets all three.
pub(crate) fn qos_values(cfg: &MemoryQosClasses, pods: &[&Pod]) -> [(QosClass, MemoryValues); 3] {
    let mut sums = [
        (QosClass::Guaranteed, MemoryValues::default()),
        (QosClass::Burstable, MemoryValues::default()),
        (QosClass::BestEffort, MemoryValues::default()),
    ];
    for pod in pods {
        let p = percents(cfg, pod);
        let req = pod_request(pod);
        let class = QosClass::of(pod);
        if let Some((_, v)) = sums.iter_mut().find(|(c, _)| *c == class) {
            v.min = v.min.saturating_add(req.saturating_mul(p.min) / 100);
            v.low = v.low.saturating_add(req.saturating_mul(p.low) / 100);
        }
    }
    let (min, low) = sums.iter().fold((0i64, 0i64), |(m, l), (_, v)| {
        (m.saturating_add(v.min), l.saturating_add(v.low))
    });
    sums[0].1 = MemoryValues {
        min,
        low,
        high: None,
    };
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn res(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        })
    }

    fn pod(label: Option<&str>, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.labels =
            label.map(|l| [("koordinator.sh/qosClass".to_string(), l.to_string())].into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: res(requests),
                    limits: res(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    const MI: i64 = 1 << 20;

    fn cfg() -> MemoryQosClasses {
        MemoryQosClasses {
            ls: MemoryQosPercents {
                min: 40,
                low: 60,
                throttling: 80,
            },
            be: MemoryQosPercents {
                min: 0,
                low: 50,
                throttling: 0,
            },
            lsr: MemoryQosPercents {
                min: 100,
                low: 0,
                throttling: 50,
            },
            ..Default::default()
        }
    }

    #[test]
    fn container_and_pod_values_follow_koordlets_formulas() {
        // Burstable, LS by default: 100Mi asked of 200Mi.
        let ls = pod(None, &[("memory", "100Mi")], &[("memory", "200Mi")]);
        let c = &ls.spec.as_ref().unwrap().containers[0];
        let v = container_values(&ls, c, percents(&cfg(), &ls), 1 << 30);
        assert_eq!(v.min, 40 * MI);
        assert_eq!(v.low, 60 * MI);
        // 100Mi + 100Mi × 80 % = 180Mi (page aligned already).
        assert_eq!(v.high, Some(180 * MI));
        assert_eq!(
            pod_values(&ls, percents(&cfg(), &ls)),
            MemoryValues {
                min: 40 * MI,
                low: 60 * MI,
                high: None
            }
        );
        // No limit: the node's allocatable is the ceiling; rounded down to a page.
        let open = pod(None, &[("memory", "100Mi")], &[]);
        let c = &open.spec.as_ref().unwrap().containers[0];
        let v = container_values(&open, c, percents(&cfg(), &open), 1_000_000_000);
        let want = (100 * MI + (1_000_000_000 - 100 * MI) * 80 / 100) / PAGE_SIZE * PAGE_SIZE;
        assert_eq!(v.high, Some(want));
        assert_eq!(want % PAGE_SIZE, 0);
    }

    #[test]
    fn be_pods_count_batch_memory_and_a_zero_throttling_is_max() {
        let be = pod(
            Some("BE"),
            &[("kubernetes.io/batch-memory", "64Mi")],
            &[("kubernetes.io/batch-memory", "128Mi")],
        );
        assert_eq!(pod_request(&be), 64 * MI);
        let c = &be.spec.as_ref().unwrap().containers[0];
        let v = container_values(&be, c, percents(&cfg(), &be), 1 << 30);
        assert_eq!(
            v,
            MemoryValues {
                min: 0,
                low: 32 * MI,
                high: Some(MAX)
            }
        );
        // Guaranteed is LSR by default: min 100 %, low 0 stays 0 (only a set low is raised).
        let g = pod(
            None,
            &[("memory", "64Mi"), ("cpu", "1")],
            &[("memory", "64Mi"), ("cpu", "1")],
        );
        assert_eq!(
            pod_values(&g, percents(&cfg(), &g)),
            MemoryValues {
                min: 64 * MI,
                low: 0,
                high: None
            }
        );
        // A low below min is raised to min.
        let odd = MemoryQosPercents {
            min: 50,
            low: 10,
            throttling: 0,
        };
        assert_eq!(pod_values(&g, odd).low, 32 * MI);
        // High never under min.
        let c = &g.spec.as_ref().unwrap().containers[0];
        let tight = MemoryQosPercents {
            min: 100,
            low: 0,
            throttling: 1,
        };
        assert_eq!(container_values(&g, c, tight, 1 << 30).high, Some(64 * MI));
    }

    #[test]
    fn a_pods_own_memory_qos_overrides_its_class() {
        let annotated = |text: &str| {
            let mut p = pod(None, &[("memory", "100Mi")], &[]);
            p.metadata.annotations = Some([(POD_MEMORY_QOS.to_string(), text.to_string())].into());
            p
        };
        let ls = cfg().ls;
        assert_eq!(
            percents(&cfg(), &annotated(r#"{"policy": "none"}"#)),
            MemoryQosPercents::default()
        );
        assert_eq!(
            percents(&cfg(), &annotated(r#"{"minLimitPercent": 100}"#)),
            MemoryQosPercents { min: 100, ..ls }
        );
        assert_eq!(
            percents(
                &cfg(),
                &annotated(r#"{"policy": "auto", "lowLimitPercent": 10}"#)
            ),
            MemoryQosPercents {
                min: 0,
                low: 10,
                throttling: 0
            }
        );
        // Not JSON, or out of range: the class's.
        assert_eq!(percents(&cfg(), &annotated("{")), ls);
        assert_eq!(
            percents(&cfg(), &annotated(r#"{"minLimitPercent": 900}"#)),
            ls
        );
        // The QoS level sums the pod's own values.
        let p = annotated(r#"{"minLimitPercent": 100}"#);
        assert_eq!(qos_values(&cfg(), &[&p])[1].1.min, 100 * MI);
    }

    #[test]
    fn qos_levels_sum_their_pods_and_kubepods_sums_all() {
        let ls = pod(None, &[("memory", "100Mi")], &[]);
        let be = pod(Some("BE"), &[("kubernetes.io/batch-memory", "64Mi")], &[]);
        let g = pod(
            None,
            &[("memory", "64Mi"), ("cpu", "1")],
            &[("memory", "64Mi"), ("cpu", "1")],
        );
        let v = qos_values(&cfg(), &[&ls, &be, &g]);
        assert_eq!(
            v[1],
            (
                QosClass::Burstable,
                MemoryValues {
                    min: 40 * MI,
                    low: 60 * MI,
                    high: None
                }
            )
        );
        assert_eq!(
            v[2],
            (
                QosClass::BestEffort,
                MemoryValues {
                    min: 0,
                    low: 32 * MI,
                    high: None
                }
            )
        );
        assert_eq!(
            v[0],
            (
                QosClass::Guaranteed,
                MemoryValues {
                    min: 104 * MI,
                    low: 92 * MI,
                    high: None
                }
            )
        );
    }
}
