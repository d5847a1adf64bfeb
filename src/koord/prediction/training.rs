//! One training round (koordlet's `training`): the p90 of the last interval's usage
//! per pod, per priority class, for the node and for the system, one sample each.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::debug;

use super::PredictionConfig;
use super::model::{Models, NODE_UID, PriorityClass, SYS_UID};
use crate::metriccache::{Aggregation, MetricCache, MetricKind, label};

/// The p90 of `kind` over `[start, end]` for `labels`, if the window has points.
fn p90(
    cache: &MetricCache,
    kind: MetricKind,
    labels: &[(&str, &str)],
    start: i64,
    end: i64,
) -> Option<f64> {
    cache
        .query(kind, labels, start, end)
        .value(Aggregation::P90)
        .ok()
}

/// Trains `models` from the cache's last `cfg.training_interval_ms` before `now_ms`.
pub(crate) fn train(
    cfg: &PredictionConfig,
    models: &mut Models,
    cache: &MetricCache,
    pods: &[Arc<Pod>],
    now_ms: i64,
) {
    let start = now_ms - cfg.training_interval_ms;
    let mut class_sum = [(0.0f64, 0.0f64); 5];
    let (mut all_cpu, mut all_mem) = (0.0, 0.0);
    for pod in pods {
        let uid = crate::pod::pod_uid(pod);
        if super::checkpoint::model_name(uid).is_err() || uid.starts_with("__") {
            let pod_name = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            debug!(pod = %pod_name, podUID = %uid, "prediction: the pod UID is not a usable model name, skipped");
            continue;
        }
        let labels = [(label::POD_UID, uid)];
        let cpu = p90(cache, MetricKind::PodCpuUsage, &labels, start, now_ms);
        let mem = p90(cache, MetricKind::PodMemoryUsage, &labels, start, now_ms);
        let (Some(cpu), Some(mem)) = (cpu, mem) else {
            continue;
        };
        models.add(cfg, uid, cpu, mem, now_ms);
        let class = PriorityClass::with_default(pod);
        let i = PriorityClass::ALL
            .iter()
            .position(|c| *c == class)
            .unwrap_or(4);
        class_sum[i].0 += cpu;
        class_sum[i].1 += mem;
        all_cpu += cpu;
        all_mem += mem;
    }
    let node_cpu = p90(cache, MetricKind::NodeCpuUsage, &[], start, now_ms);
    let node_mem = p90(cache, MetricKind::NodeMemoryUsage, &[], start, now_ms);
    if let (Some(c), Some(m)) = (node_cpu, node_mem) {
        models.add(cfg, NODE_UID, c, m, now_ms);
        models.add(
            cfg,
            SYS_UID,
            (c - all_cpu).max(0.0),
            (m - all_mem).max(0.0),
            now_ms,
        );
    }
    for (class, (c, m)) in PriorityClass::ALL.iter().zip(class_sum) {
        models.add(cfg, &class.uid(), c, m, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::koord::prediction::model::Percentiles;
    use crate::metriccache::Sample;
    use k8s_openapi::api::core::v1::PodSpec;

    const NOW: i64 = 1_700_000_000_000;
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

    fn pod(uid: &str, priority: i32) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.spec = Some(PodSpec {
            priority: Some(priority),
            ..Default::default()
        });
        Arc::new(p)
    }

    /// Ten points per series over the last minute: 9 × `v` and one 10 × `v` spike
    /// (so p90, nearest-rank, is `v`).
    fn fill(cache: &MetricCache, kind: MetricKind, labels: &[(&str, &str)], v: f64) {
        let samples = (0..10).map(|i| {
            let x = if i == 9 { v * 10.0 } else { v };
            Sample::new(kind, labels, NOW - 55_000 + i * 5_000, x).unwrap()
        });
        assert_eq!(cache.append(samples), 10);
    }

    fn cpu_of(m: &Models, uid: &str) -> Percentiles {
        m.by_uid[uid].prediction().cpu_milli
    }

    #[test]
    fn a_round_feeds_pods_classes_node_and_system() {
        let cache = MetricCache::default();
        // d has no priority class of its own: a BestEffort pod is koordinator's BE,
        // so its class is batch (not the empty class).
        for (uid, cores) in [("a", 1.0), ("b", 0.5), ("d", 0.25)] {
            fill(
                &cache,
                MetricKind::PodCpuUsage,
                &[(label::POD_UID, uid)],
                cores,
            );
            fill(
                &cache,
                MetricKind::PodMemoryUsage,
                &[(label::POD_UID, uid)],
                GIB,
            );
        }
        fill(&cache, MetricKind::NodeCpuUsage, &[], 2.0);
        fill(&cache, MetricKind::NodeMemoryUsage, &[], 4.0 * GIB);
        // c has no samples: no model, nothing in its class.
        let pods = [
            pod("a", 9100),
            pod("b", 5500),
            pod("c", 9100),
            pod("d", 0),
            pod("../x", 9100),
        ];
        let cfg = PredictionConfig::default();
        let mut m = Models::default();
        train(&cfg, &mut m, &cache, &pods, NOW);
        let edge = |v: f64| {
            let b = super::super::histogram::Buckets::cpu();
            (b.start(b.find(v) + 1) * 1000.0) as i64
        };
        assert_eq!(cpu_of(&m, "a").p90, edge(1.0));
        assert_eq!(cpu_of(&m, "b").max, edge(0.5));
        assert!(!m.by_uid.contains_key("c"));
        assert!(!m.by_uid.contains_key("../x"));
        assert_eq!(cpu_of(&m, "__node__").p95, edge(2.0));
        assert_eq!(cpu_of(&m, "__node-koord-prod__").p95, edge(1.0));
        assert_eq!(cpu_of(&m, "__node-koord-batch__").p95, edge(0.75));
        // Empty classes get a zero sample: bucket 0, whose upper edge is 25m.
        assert_eq!(cpu_of(&m, "__node-koord-mid__").p95, 25);
        assert_eq!(cpu_of(&m, "__node-__").p95, 25);
        // System: 2 − 1.75 cores, 4 − 3 GiB.
        assert_eq!(cpu_of(&m, "__node-sys__").p95, edge(0.25));
        let mem = m.by_uid["__node-sys__"].prediction().memory_bytes.p98;
        let b = super::super::histogram::Buckets::memory();
        assert_eq!(mem, b.start(b.find(GIB) + 1) as i64);
        assert_eq!(m.by_uid.len(), 3 + 2 + 5);
    }

    #[test]
    fn samples_older_than_the_interval_are_not_used() {
        let cache = MetricCache::default();
        let old = (0..5)
            .map(|i| Sample::new(MetricKind::NodeCpuUsage, &[], NOW - 120_000 + i, 8.0).unwrap());
        cache.append(old);
        fill(&cache, MetricKind::NodeMemoryUsage, &[], GIB);
        let mut m = Models::default();
        train(&PredictionConfig::default(), &mut m, &cache, &[], NOW);
        assert!(!m.by_uid.contains_key("__node__"));
    }
}
