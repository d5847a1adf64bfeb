//! One round's view of the node: the "last" usage of the node and of each pod over
//! the last 2 s from the metric cache (koordlet's `collectResUsedIntervalSeconds` × 2),
//! with what the strategies need to know of each pod. Stale or missing node data
//! gives no view: that round changes nothing.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::cm::QosClass;
use crate::koordapi::KoordQos;
use crate::metriccache::{Aggregation, MetricCache, MetricKind, label};
use crate::pod::pod_uid;

/// How far back a "last" value may be.
pub(crate) const WINDOW_MS: i64 = 2000;

/// A pod and its last usage (cores, bytes; 0 without samples).
#[derive(Debug, Clone)]
pub(crate) struct PodUsage {
    pub pod: Arc<Pod>,
    /// Kube QoS BestEffort (the eviction victims).
    pub best_effort: bool,
    /// koordinator's `koordinator.sh/qosClass: BE` label (CPU suppress counts such
    /// pods with BestEffort, as koordlet does).
    pub koord_be: bool,
    pub cpu_cores: f64,
    pub memory_bytes: f64,
    /// Whether the cache had a CPU rate for the pod (the advisor's first reading of a
    /// pod has none).
    pub has_cpu: bool,
    /// Whether the cache had a memory sample for the pod (koordlet skips pods
    /// without metrics as victims).
    pub has_memory: bool,
}

#[cfg(test)]
impl PodUsage {
    pub(crate) fn test(uid: &str, best_effort: bool, cpu: f64, mem: f64) -> PodUsage {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.into());
        pod.metadata.name = Some(uid.into());
        pod.metadata.namespace = Some("default".into());
        PodUsage {
            pod: Arc::new(pod),
            best_effort,
            koord_be: false,
            cpu_cores: cpu,
            memory_bytes: mem,
            has_cpu: true,
            has_memory: true,
        }
    }
}

/// The pod's annotation `key` (koordinator's per-pod settings: eviction policy,
/// pinned CPUs, memory QoS).
pub(crate) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The node and its pods, as the cache saw them last.
#[derive(Debug, Clone)]
pub(crate) struct UsageView {
    pub node_cpu_cores: f64,
    pub node_memory_bytes: f64,
    pub pods: Vec<PodUsage>,
    /// The NodeSLO's host applications' CPU cores: all of them, and those not BE.
    pub host_apps_cpu_cores: (f64, f64),
}

/// Why a round has no view.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum NoView {
    #[error("no {0} sample in the last 2s")]
    Stale(&'static str),
}

fn last(
    cache: &MetricCache,
    kind: MetricKind,
    labels: &[(&str, &str)],
    now_ms: i64,
) -> Option<f64> {
    cache
        .query(kind, labels, now_ms - WINDOW_MS, now_ms)
        .value(Aggregation::Last)
        .ok()
}

/// Reads the view at `now_ms` for `pods` (the pod manager's pods).
pub(crate) fn view(
    cache: &MetricCache,
    pods: &[Arc<Pod>],
    now_ms: i64,
) -> Result<UsageView, NoView> {
    let node_cpu = last(cache, MetricKind::NodeCpuUsage, &[], now_ms)
        .ok_or(NoView::Stale(MetricKind::NodeCpuUsage.name()))?;
    let node_mem = last(cache, MetricKind::NodeMemoryUsage, &[], now_ms)
        .ok_or(NoView::Stale(MetricKind::NodeMemoryUsage.name()))?;
    let pods = pods
        .iter()
        .map(|p| {
            let uid = [(label::POD_UID, pod_uid(p))];
            let mem = last(cache, MetricKind::PodMemoryUsage, &uid, now_ms);
            let cpu = last(cache, MetricKind::PodCpuUsage, &uid, now_ms);
            PodUsage {
                best_effort: QosClass::of(p) == QosClass::BestEffort,
                koord_be: KoordQos::of_label(p) == Some(KoordQos::Be),
                cpu_cores: cpu.unwrap_or(0.0),
                has_cpu: cpu.is_some(),
                memory_bytes: mem.unwrap_or(0.0),
                has_memory: mem.is_some(),
                pod: p.clone(),
            }
        })
        .collect();
    Ok(UsageView {
        node_cpu_cores: node_cpu,
        node_memory_bytes: node_mem,
        pods,
        host_apps_cpu_cores: host_apps_cpu(cache, now_ms),
    })
}

/// The host applications' last CPU (the advisor keeps their list in the key-value
/// store): all of them, and those whose QoS is not BE.
fn host_apps_cpu(cache: &MetricCache, now_ms: i64) -> (f64, f64) {
    let apps: Vec<crate::koordapi::HostApp> =
        cache.kv().get("host_applications").unwrap_or_default();
    apps.iter().fold((0.0, 0.0), |(all, non_be), app| {
        let labels = [(label::HOST_APP_NAME, app.name.as_str())];
        let cpu = last(cache, MetricKind::HostAppCpuUsage, &labels, now_ms).unwrap_or(0.0);
        (all + cpu, if app.is_be() { non_be } else { non_be + cpu })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metriccache::Sample;

    #[test]
    fn last_values_of_the_last_two_seconds_only() {
        let cache = MetricCache::default();
        let pod = Arc::new(PodUsage::test("u1", true, 0.0, 0.0).pod.as_ref().clone());
        cache.append([
            Sample::new(MetricKind::NodeCpuUsage, &[], 9_000, 3.0).unwrap(),
            Sample::new(MetricKind::NodeMemoryUsage, &[], 9_500, 100.0).unwrap(),
            Sample::new(MetricKind::PodCpuUsage, &[("pod_uid", "u1")], 9_500, 0.5).unwrap(),
        ]);
        assert_eq!(
            view(&cache, std::slice::from_ref(&pod), 12_000).unwrap_err(),
            NoView::Stale("node_cpu_usage")
        );
        cache.append([
            Sample::new(MetricKind::NodeCpuUsage, &[], 10_500, 1.5).unwrap(),
            Sample::new(MetricKind::NodeCpuUsage, &[], 11_000, 2.0).unwrap(),
            Sample::new(MetricKind::NodeMemoryUsage, &[], 11_000, 200.0).unwrap(),
        ]);
        let v = view(&cache, &[pod], 12_000).unwrap();
        assert_eq!((v.node_cpu_cores, v.node_memory_bytes), (2.0, 200.0));
        // The pod's sample is too old: counted as 0 and as having no metrics.
        assert_eq!(v.pods[0].cpu_cores, 0.0);
        assert!(!v.pods[0].has_memory && v.pods[0].best_effort);
    }
}
