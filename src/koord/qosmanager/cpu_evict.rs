//! BECPUEvict (koordlet's `cpuevict` plugin, BestEffort satisfaction): when the
//! BestEffort tier uses nearly all the CPU it really has (usage ≥ the usage threshold
//! of its limit) and that limit is a small share of what its pods asked for (limit /
//! request ≤ the lower satisfaction percent), BestEffort pods are evicted until
//! request × (upper% − limit/request) of `kubernetes.io/batch-cpu` requests is
//! released. The tier's usage, request and limit are the advisor's `node_be` series,
//! averaged over the time window and taken "last" over 2 s; the smaller release wins.
//! Under `evictByAllocatable` the limit is the Node's `kubernetes.io/batch-cpu`
//! allocatable instead (koordlet's `getBEMilliAllocatable`), read by the node
//! informer; without one (standalone mode, or no koord-manager) nothing is evicted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::evict::policy_allows;
use super::inputs::{PodUsage, UsageView};
use crate::koordapi::{CpuEvictConfig, CpuEvictPolicy, CpuUsageEvictConfig};
use crate::metriccache::{Aggregation, MetricCache, MetricKind, label};
use crate::pod::is_critical;

/// koordlet's `CPUEvictCoolTimeSeconds`.
pub(crate) const COOL_DOWN: Duration = Duration::from_secs(20);
/// The feature gate's name: the eviction reason and the eviction-policy entry.
pub(crate) const FEATURE: &str = "BECPUEvict";
/// koordlet's `CollectResUsedInterval` (s), the unit of the sample count check.
const COLLECT_INTERVAL_S: i64 = 1;

/// The BestEffort tier's CPU in millicores (`node_be`, `be_resource=cpu`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BeCpu {
    pub usage: f64,
    pub request: f64,
    pub limit: f64,
}

/// The tier's CPU over `[start_ms, end_ms]` by `agg`, and the fewest points any of
/// the three series had (a missing series reads 0 with no points, as in koordlet).
pub(crate) fn be_cpu(
    cache: &MetricCache,
    agg: Aggregation,
    start_ms: i64,
    end_ms: i64,
) -> (BeCpu, usize) {
    let one = |allocation: &str| {
        let r = cache.query(
            MetricKind::NodeBe,
            &[
                (label::BE_RESOURCE, "cpu"),
                (label::BE_ALLOCATION, allocation),
            ],
            start_ms,
            end_ms,
        );
        r.value(agg).map_or((0.0, 0), |v| (v, r.count()))
    };
    let (usage, a) = one("usage");
    let (request, b) = one("request");
    let (limit, c) = one("real-limit");
    (
        BeCpu {
            usage,
            request,
            limit,
        },
        a.min(b).min(c),
    )
}

/// koordlet's `isBECPUUsageHighEnough`: never without a limit; always under one core.
pub(crate) fn usage_high_enough(usage: f64, limit: f64, threshold_percent: i64) -> bool {
    if limit <= 0.0 {
        return false;
    }
    limit < 1000.0 || usage / limit >= threshold_percent as f64 / 100.0
}

/// koordlet's `calculateResourceMilliToReleaseBySatisfaction`: request × (upper −
/// limit/request) when limit/request is at or below `lower`; else 0.
pub(crate) fn release_by_satisfaction(request: f64, limit: f64, (lower, upper): (i64, i64)) -> i64 {
    if request <= 0.0 {
        return 0;
    }
    let rate = limit / request;
    if rate > lower as f64 / 100.0 {
        return 0;
    }
    let gap = upper as f64 / 100.0 - rate;
    if gap <= 0.0 {
        return 0;
    }
    (request * gap) as i64
}

/// Why BECPUEvict does nothing this round (said at -v=4).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Skip {
    /// The satisfaction percents are not set.
    NotConfigured,
    /// `evictByAllocatable`, and the Node has no `batch-cpu` allocatable (koordlet
    /// reads −1, which no usage is high enough against).
    NoAllocatable,
    TooFewSamples {
        count: usize,
        window_s: i64,
    },
    UsageLow(BeCpu),
    Satisfied(BeCpu),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tier = |f: &mut std::fmt::Formatter<'_>, what: &str, b: &BeCpu| {
            write!(
                f,
                "{what} (BestEffort usage {}m, request {}m, limit {}m)",
                b.usage as i64, b.request as i64, b.limit as i64
            )
        };
        match self {
            Skip::NotConfigured => f.write_str(
                "cpuEvictBESatisfactionLowerPercent or cpuEvictBESatisfactionUpperPercent is not set",
            ),
            Skip::NoAllocatable => {
                f.write_str("evictByAllocatable, and the Node has no batch-cpu allocatable")
            }
            Skip::TooFewSamples { count, window_s } => {
                write!(f, "{count} samples in the {window_s}s window, fewer than a third")
            }
            Skip::UsageLow(b) => tier(f, "usage is under the threshold of the limit", b),
            Skip::Satisfied(b) => tier(f, "the limit is above the lower satisfaction", b),
        }
    }
}

/// What the tier looked like and how much to release.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trigger {
    pub avg: BeCpu,
    pub last: BeCpu,
    pub release_milli: i64,
}

/// koordlet's `calculateMilliReleaseByBESatisfaction` at `now_ms`; `be_allocatable`
/// is the Node's batch-cpu allocatable ([`NodeInfo::be_milli_allocatable`]), the
/// tier's limit under `evictByAllocatable`.
///
/// [`NodeInfo::be_milli_allocatable`]: crate::koord::slo::NodeInfo::be_milli_allocatable
pub(crate) fn trigger(
    cfg: &CpuEvictConfig,
    cache: &MetricCache,
    now_ms: i64,
    be_allocatable: Option<f64>,
) -> Result<Trigger, Skip> {
    let satisfaction = cfg.satisfaction.ok_or(Skip::NotConfigured)?;
    let allocatable = match cfg.policy {
        CpuEvictPolicy::EvictByAllocatable => Some(be_allocatable.ok_or(Skip::NoAllocatable)?),
        _ => None,
    };
    // koordlet's "CPU Satisfaction considers the allocatable when
    // policy=evictByAllocatable": the limit read is replaced, the usage is not.
    let by_policy = |mut b: BeCpu| {
        if let Some(a) = allocatable {
            b.limit = a;
        }
        b
    };
    let window_s = cfg.window_seconds.max(COLLECT_INTERVAL_S);
    // koordinator puts no bound on the window: a longer one than the cache keeps
    // averages what it has.
    let start = now_ms.saturating_sub(window_s.saturating_mul(1000));
    let (avg, count) = be_cpu(cache, Aggregation::Avg, start, now_ms);
    let avg = by_policy(avg);
    if (count as i64) * COLLECT_INTERVAL_S < window_s / 3 || count == 0 {
        return Err(Skip::TooFewSamples { count, window_s });
    }
    if !usage_high_enough(avg.usage, avg.limit, cfg.usage_threshold_percent) {
        return Err(Skip::UsageLow(avg));
    }
    let by_avg = release_by_satisfaction(avg.request, avg.limit, satisfaction);
    if by_avg <= 0 {
        return Err(Skip::Satisfied(avg));
    }
    let (last, _) = be_cpu(
        cache,
        Aggregation::Last,
        now_ms - 2 * COLLECT_INTERVAL_S * 1000,
        now_ms,
    );
    let last = by_policy(last);
    if !usage_high_enough(last.usage, last.limit, cfg.usage_threshold_percent) {
        return Err(Skip::UsageLow(last));
    }
    // Requests and limits change seldom: the same now as over the window, no recount.
    if last.request == avg.request && last.limit == avg.limit {
        return Ok(Trigger {
            avg,
            last,
            release_milli: by_avg,
        });
    }
    let by_last = release_by_satisfaction(last.request, last.limit, satisfaction);
    if by_last <= 0 {
        return Err(Skip::Satisfied(last));
    }
    Ok(Trigger {
        avg,
        last,
        release_milli: by_avg.min(by_last),
    })
}

/// The pod's batch CPU request, its containers' and its sidecars', as koordlet sums
/// them (`GetPodBEMilliCPURequest`).
pub(crate) fn batch_request_milli(pod: &Pod) -> i64 {
    crate::koordapi::batch_milli_cpu_request(pod)
}

/// The victims in koordlet's order (`getBEPodEvictInfoAndSort`): pods labelled BE
/// whose eviction policy allows BECPUEvict (never a critical pod in oxlet), by
/// spec.priority ascending, then used/requested batch CPU descending. koordlet
/// compares priorities only where both pods have one; a pod without counts as 0
/// here (a total order), as in memory eviction.
pub(crate) fn victims(view: &UsageView) -> Vec<&PodUsage> {
    let mut v: Vec<(&PodUsage, i32, f64)> = view
        .pods
        .iter()
        .filter(|p| p.koord_be && !is_critical(&p.pod) && policy_allows(&p.pod, FEATURE))
        .map(|p| {
            let prio = p.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            let request = batch_request_milli(&p.pod);
            let used = (p.cpu_cores * 1000.0) as i64;
            let ratio = if request > 0 {
                used as f64 / request as f64
            } else {
                0.0
            };
            (p, prio, ratio)
        })
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.total_cmp(&a.2)));
    v.into_iter().map(|(p, _, _)| p).collect()
}

/// CPUEvict's feature gate name.
pub(crate) const USAGE_FEATURE: &str = "CPUEvict";
/// Pods opt in to CPUEvict with this label set to `"true"` (koordinator's
/// `PodEvictEnabled`).
const EVICTION_ENABLED_LABEL: &str = "koordinator.sh/eviction-enabled";
/// Lower evicts first, before any priority (default 0).
const EVICTION_PRIORITY: &str = "koordinator.sh/eviction-priority";
/// koordinator's sub-priority label, compared after spec.priority.
const PRIORITY_LABEL: &str = "koordinator.sh/priority";

/// CPUEvict's trigger (koordlet's `calculateMilliReleaseByUsedThresholdPercent`):
/// the node's CPU averaged over the window, in whole percent of capacity; at or
/// above the threshold, capacity × (usage% − lower%) millicores are to be released.
/// Returns the usage percent and the release; None under the threshold or without
/// samples.
pub(crate) fn usage_trigger(
    cfg: &CpuUsageEvictConfig,
    window_s: i64,
    cache: &MetricCache,
    now_ms: i64,
    capacity_milli: i64,
) -> Option<(i64, i64)> {
    if capacity_milli <= 0 {
        return None;
    }
    let window_s = window_s.max(COLLECT_INTERVAL_S);
    let used = cache
        .query(
            MetricKind::NodeCpuUsage,
            &[],
            now_ms.saturating_sub(window_s.saturating_mul(1000)),
            now_ms,
        )
        .value(Aggregation::Avg)
        .ok()?;
    let usage = ((used * 1000.0) as i64).saturating_mul(100) / capacity_milli;
    if usage < cfg.threshold_percent {
        return None;
    }
    Some((usage, capacity_milli * (usage - cfg.lower_percent) / 100))
}

/// koordinator's `GetPodPriorityValueWithDefault`: spec.priority unless 0 or unset,
/// else its priority class's default (prod 9500, mid 7500, batch 5500, free 3500).
pub(crate) fn priority_with_default(pod: &Pod) -> i32 {
    if let Some(p) = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .filter(|p| *p != 0)
    {
        return p;
    }
    use crate::koordapi::PriorityClass;
    match PriorityClass::with_default(pod) {
        PriorityClass::Prod => 9500,
        PriorityClass::Mid => 7500,
        PriorityClass::Batch => 5500,
        PriorityClass::Free => 3500,
        PriorityClass::None => 0,
    }
}

/// Eviction priority, priority, priority label, −used: ascending is koordlet's order.
type SortKey = (i32, i32, i64, i64);

/// CPUEvict's victims in koordlet's order (`getPodEvictInfoAndSortByPriority`):
/// pods labelled `koordinator.sh/eviction-enabled: "true"`, allowed by their eviction
/// policy, with a priority at most the threshold and a CPU reading (never a
/// critical pod in oxlet); by `koordinator.sh/eviction-priority`, priority, the
/// `koordinator.sh/priority` label (all ascending), then CPU used descending.
pub(crate) fn victims_by_used(view: &UsageView, priority_threshold: i32) -> Vec<&PodUsage> {
    let label = |p: &Pod, k: &str| p.metadata.labels.as_ref().and_then(|l| l.get(k).cloned());
    let mut v: Vec<(&PodUsage, SortKey)> = view
        .pods
        .iter()
        .filter(|p| p.has_cpu && !is_critical(&p.pod) && policy_allows(&p.pod, USAGE_FEATURE))
        .filter(|p| label(&p.pod, EVICTION_ENABLED_LABEL).as_deref() == Some("true"))
        .filter_map(|p| {
            let prio = priority_with_default(&p.pod);
            (prio <= priority_threshold).then_some((p, prio))
        })
        .map(|(p, prio)| {
            let eviction_prio = super::inputs::annotation(&p.pod, EVICTION_PRIORITY)
                .and_then(|v| v.parse::<i32>().ok())
                .unwrap_or(0);
            let sub = label(&p.pod, PRIORITY_LABEL)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(i64::from(prio));
            let used = (p.cpu_cores * 1000.0) as i64;
            (p, (eviction_prio, prio, sub, -used))
        })
        .collect();
    v.sort_by_key(|(_, k)| *k);
    v.into_iter().map(|(p, _)| p).collect()
}

/// Tests fill the tier's three series at `ts` (ms), as the advisor's BestEffort
/// collector does every second.
#[cfg(test)]
pub(crate) fn fill_be_tier(cache: &MetricCache, ts: i64, usage: f64, request: f64, limit: f64) {
    let s = |a, v| {
        crate::metriccache::Sample::new(
            MetricKind::NodeBe,
            &[(label::BE_RESOURCE, "cpu"), (label::BE_ALLOCATION, a)],
            ts,
            v,
        )
        .unwrap()
    };
    cache.append([
        s("usage", usage),
        s("request", request),
        s("real-limit", limit),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::sync::Arc;

    fn cfg() -> CpuEvictConfig {
        CpuEvictConfig {
            satisfaction: Some((40, 60)),
            window_seconds: 6,
            ..CpuEvictConfig::default()
        }
    }

    #[test]
    fn usage_and_satisfaction_rules_are_koordlets() {
        assert!(!usage_high_enough(5000.0, 0.0, 90));
        assert!(
            usage_high_enough(0.0, 800.0, 90),
            "under one core always counts"
        );
        assert!(usage_high_enough(1800.0, 2000.0, 90));
        assert!(!usage_high_enough(1790.0, 2000.0, 90));
        // limit 2000 of 10000 asked: 20 % ≤ 40 %; release 10000 × (60 − 20) %, in
        // koordlet's float arithmetic (0.6 − 0.2 = 0.3999…), truncated: 3999.
        assert_eq!(release_by_satisfaction(10_000.0, 2000.0, (40, 60)), 3999);
        assert_eq!(release_by_satisfaction(10_000.0, 4000.0, (40, 60)), 1999);
        assert_eq!(
            release_by_satisfaction(10_000.0, 4100.0, (40, 60)),
            0,
            "satisfied enough"
        );
        assert_eq!(release_by_satisfaction(0.0, 100.0, (40, 60)), 0);
        assert_eq!(
            release_by_satisfaction(10_000.0, 4000.0, (40, 40)),
            0,
            "no gap to upper"
        );
    }

    #[test]
    fn the_window_needs_a_third_of_its_samples_and_the_smaller_release_wins() {
        let cache = MetricCache::default();
        let now = 100_000;
        assert_eq!(
            trigger(&CpuEvictConfig::default(), &cache, now, None),
            Err(Skip::NotConfigured)
        );
        // One sample in a 6 s window: fewer than 6/3.
        fill_be_tier(&cache, now - 500, 1900.0, 10_000.0, 2000.0);
        assert_eq!(
            trigger(&cfg(), &cache, now, None),
            Err(Skip::TooFewSamples {
                count: 1,
                window_s: 6
            })
        );
        fill_be_tier(&cache, now - 3000, 1900.0, 10_000.0, 2000.0);
        let t = trigger(&cfg(), &cache, now, None).unwrap();
        assert_eq!(t.release_milli, 3999);
        // The limit grew just now to 3000: last gives 10000 × (60 − 30) % = 3000, less.
        fill_be_tier(&cache, now - 100, 2900.0, 10_000.0, 3000.0);
        let t = trigger(&cfg(), &cache, now, None).unwrap();
        assert_eq!(t.release_milli, 3000);
        // Last usage fell under 90 % of the limit: nothing.
        fill_be_tier(&cache, now, 1000.0, 10_000.0, 3000.0);
        assert!(matches!(
            trigger(&cfg(), &cache, now, None),
            Err(Skip::UsageLow(_))
        ));
        // evictByAllocatable without a batch-cpu allocatable: nothing.
        let alloc = CpuEvictConfig {
            policy: CpuEvictPolicy::EvictByAllocatable,
            ..cfg()
        };
        assert_eq!(trigger(&alloc, &cache, now, None), Err(Skip::NoAllocatable));
    }

    #[test]
    fn a_satisfied_tier_or_low_usage_evicts_nothing() {
        let cache = MetricCache::default();
        let now = 50_000;
        for ts in [now - 4000, now - 2000, now] {
            // Limit 5000 of 10000 asked: 50 % > 40 %.
            fill_be_tier(&cache, ts, 5000.0, 10_000.0, 5000.0);
        }
        assert!(matches!(
            trigger(&cfg(), &cache, now, None),
            Err(Skip::Satisfied(_))
        ));
        let cache = MetricCache::default();
        for ts in [now - 4000, now - 2000, now] {
            fill_be_tier(&cache, ts, 1000.0, 10_000.0, 2000.0);
        }
        assert!(matches!(
            trigger(&cfg(), &cache, now, None),
            Err(Skip::UsageLow(_))
        ));
    }

    #[test]
    fn evict_by_allocatable_measures_the_tier_against_the_batch_allocatable() {
        let cache = MetricCache::default();
        let now = 60_000;
        for ts in [now - 4000, now - 2000, now] {
            // The tier uses 38 % of its real limit (5000m), but 95 % of the Node's
            // batch-cpu allocatable, 2000m.
            fill_be_tier(&cache, ts, 1900.0, 10_000.0, 5000.0);
        }
        let alloc = CpuEvictConfig {
            policy: CpuEvictPolicy::EvictByAllocatable,
            ..cfg()
        };
        assert!(matches!(
            trigger(&cfg(), &cache, now, Some(2000.0)),
            Err(Skip::UsageLow(_))
        ));
        let t = trigger(&alloc, &cache, now, Some(2000.0)).unwrap();
        // 10000 × (60 − 20) %, in Go's float arithmetic: 3999.
        assert_eq!(t.release_milli, 3999);
        assert_eq!((t.avg.limit, t.last.limit), (2000.0, 2000.0));
        // A larger allocatable satisfies the tier; a zeroed one (read as 1m) makes
        // any usage high enough and the gap the whole upper percent.
        assert!(matches!(
            trigger(&alloc, &cache, now, Some(4500.0)),
            Err(Skip::UsageLow(_))
        ));
        let t = trigger(&alloc, &cache, now, Some(1.0)).unwrap();
        assert_eq!(t.release_milli, 5999);
    }

    fn pod(uid: &str, batch_milli: &str, prio: Option<i32>, cpu: f64) -> PodUsage {
        let mut p = PodUsage::test(uid, true, cpu, 0.0);
        p.koord_be = true;
        let mut pod = p.pod.as_ref().clone();
        let mut spec = k8s_openapi::api::core::v1::PodSpec {
            priority: prio,
            ..Default::default()
        };
        spec.containers.push(k8s_openapi::api::core::v1::Container {
            name: "c".into(),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some(
                    [(
                        crate::koordapi::BATCH_CPU.to_string(),
                        Quantity(batch_milli.into()),
                    )]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
        pod.spec = Some(spec);
        p.pod = Arc::new(pod);
        p
    }

    #[test]
    fn cpu_evict_by_usage_fires_at_the_threshold_and_orders_opted_in_pods() {
        let cache = MetricCache::default();
        let cfg = CpuUsageEvictConfig {
            threshold_percent: 80,
            lower_percent: 78,
            priority_threshold: 5999,
        };
        let node = |ts, cores| {
            crate::metriccache::Sample::new(MetricKind::NodeCpuUsage, &[], ts, cores).unwrap()
        };
        cache.append([node(9_000, 1.5), node(10_000, 1.7)]);
        // 1.6 cores of 2 = 80 %: release 2000 × (80 − 78) % = 40m.
        assert_eq!(usage_trigger(&cfg, 2, &cache, 10_000, 2000), Some((80, 40)));
        // Over the last second only: 1.7 → 85 %.
        assert_eq!(
            usage_trigger(&cfg, 1, &cache, 10_500, 2000),
            Some((85, 140))
        );
        assert_eq!(
            usage_trigger(&cfg, 2, &cache, 30_000, 2000),
            None,
            "no samples"
        );
        let low = CpuUsageEvictConfig {
            threshold_percent: 90,
            ..cfg
        };
        assert_eq!(usage_trigger(&low, 2, &cache, 10_000, 2000), None);

        let with = |uid: &str, cpu: f64, f: &dyn Fn(&mut Pod)| {
            let mut p = PodUsage::test(uid, false, cpu, 0.0);
            let mut pod = p.pod.as_ref().clone();
            pod.metadata.labels =
                Some([(EVICTION_ENABLED_LABEL.to_string(), "true".to_string())].into());
            pod.spec = Some(Default::default());
            f(&mut pod);
            p.pod = Arc::new(pod);
            p
        };
        let prio = |n: i32| move |p: &mut Pod| p.spec.as_mut().unwrap().priority = Some(n);
        let view = UsageView {
            host_apps_cpu_cores: (0.0, 0.0),
            node_cpu_cores: 0.0,
            node_memory_bytes: 0.0,
            pods: vec![
                with("busy", 0.9, &prio(5000)),
                with("idle", 0.1, &prio(5000)),
                with("first", 0.0, &|p: &mut Pod| {
                    p.spec.as_mut().unwrap().priority = Some(5900);
                    p.metadata.annotations =
                        Some([(EVICTION_PRIORITY.to_string(), "-1".to_string())].into());
                }),
                with("prod", 2.0, &prio(9000)),
                // Not opted in.
                with("quiet", 2.0, &|p: &mut Pod| p.metadata.labels = None),
                // No CPU reading yet.
                PodUsage {
                    has_cpu: false,
                    ..with("new", 2.0, &prio(1))
                },
            ],
        };
        let order: Vec<&str> = victims_by_used(&view, 5999)
            .iter()
            .map(|p| crate::pod::pod_uid(&p.pod))
            .collect();
        assert_eq!(order, ["first", "busy", "idle"]);
        // Without spec.priority, the class's default: a BestEffort pod is batch, 5500.
        assert_eq!(priority_with_default(&view.pods[4].pod), 5500);
    }

    #[test]
    fn victims_by_priority_then_usage_over_request() {
        let mut hungry = pod("hungry", "1000", None, 0.9);
        let idle = pod("idle", "1000", None, 0.1);
        let low = pod("low", "1000", Some(-10), 0.0);
        let mut barred = pod("barred", "1000", None, 2.0);
        let mut unlabelled = pod("unlabelled", "1000", None, 2.0);
        unlabelled.koord_be = false;
        let mut b = barred.pod.as_ref().clone();
        b.metadata.annotations = Some(
            [(
                "koordinator.sh/eviction-policy".to_string(),
                r#"["BEMemoryEvict"]"#.to_string(),
            )]
            .into(),
        );
        barred.pod = Arc::new(b);
        // A sidecar's batch CPU counts too.
        let mut h = hungry.pod.as_ref().clone();
        let spec = h.spec.as_mut().unwrap();
        let mut sidecar = spec.containers[0].clone();
        sidecar.restart_policy = Some("Always".into());
        spec.init_containers = Some(vec![sidecar]);
        hungry.pod = Arc::new(h);
        assert_eq!(batch_request_milli(&hungry.pod), 2000);
        let view = UsageView {
            host_apps_cpu_cores: (0.0, 0.0),
            node_cpu_cores: 0.0,
            node_memory_bytes: 0.0,
            pods: vec![idle, hungry, barred, low, unlabelled],
        };
        let order: Vec<&str> = victims(&view)
            .iter()
            .map(|p| crate::pod::pod_uid(&p.pod))
            .collect();
        // low first (priority); then 0.9/2 = 0.45 before 0.1/1.
        assert_eq!(order, ["low", "hungry", "idle"]);
    }
}
