//! What koordlet reports in its node's NodeMetric status (its states informer's
//! `nodeMetricInformer.collectMetric`), made from the metric cache:
//! - `nodeMetric.nodeUsage` and `systemUsage`: the average over the aggregate duration
//!   (300 s, at least 60 s);
//! - `aggregatedNodeUsages` / `aggregatedSystemUsages`: for each configured duration
//!   (5m, 10m, 30m), avg, p50, p90, p95 and p99; each map stays empty while the
//!   samples cover less than half the window (koordlet's cold-start rule);
//! - `podsMetric`: each pod's average CPU and memory (without page cache), with
//!   koordinator's priority and QoS classes, sorted by namespace and name; a pod
//!   without samples is left out;
//! - `hostApplicationMetric`: each NodeSLO host application's average usage;
//! - `prodReclaimableMetric` / `prodPeakMetric`: the peak predictor's answer for the
//!   pods with metrics.
//!
//! Memory is without the page cache unless `nodeMemoryCollectPolicy` asks for it with
//! (`usageWithPageCache`); quantities are truncated as Go's `int64()` does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::koord::prediction::ResourceAmount;
use crate::koordapi::HostApp;
use crate::koordapi::{
    AggregatedUsage, HostAppMetricInfo, NodeMetricInfo, NodeMetricSpec, NodeMetricStatus,
    PodMetricInfo, ResourceMap, ResourceMetric,
};
use crate::koordapi::{PriorityClass, koord_qos_with_default};
use crate::metriccache::{Aggregation, MetricCache, MetricKind, label};

/// koordlet's defaults and floors (`states_nodemetric.go`).
const DEFAULT_AGGREGATE_SECS: i64 = 300;
const MIN_AGGREGATE_SECS: i64 = 60;
const DEFAULT_REPORT: Duration = Duration::from_secs(60);
/// koordlet's floor on the report interval (`minReportIntervalSeconds`).
pub(crate) const MIN_REPORT: Duration = Duration::from_secs(30);
const DEFAULT_DURATIONS: [Duration; 3] = [
    Duration::from_secs(300),
    Duration::from_secs(600),
    Duration::from_secs(1800),
];
/// A window's aggregates are reported once its samples span at least this share of it.
const COLD_START_RATIO: f64 = 0.5;
/// koordlet's default memory policy: memory without the page cache.
pub(crate) const MEMORY_POLICY: &str = "usageWithoutPageCache";
/// The policy that reports memory with the page cache (whose series the page cache
/// collector records, `--enable-pagecache-collector`, as in koordlet).
pub(crate) const MEMORY_WITH_PAGE_CACHE: &str = "usageWithPageCache";

/// The report's policy: the NodeMetric's `metricCollectPolicy` field by field over
/// koordlet's defaults, with its floors.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReportPolicy {
    pub aggregate: Duration,
    pub report: Duration,
    pub durations: Vec<Duration>,
    /// `nodeMemoryCollectPolicy` as asked: [`MEMORY_WITH_PAGE_CACHE`] reports the
    /// page cache too; anything else is reported as [`MEMORY_POLICY`] (koordlet, too,
    /// falls back to it for `usageWithHotPageCache` without cold memory).
    pub memory_policy: String,
}

/// The (node, pod, host application) kinds of a CPU and a memory series.
struct Kinds {
    node: (MetricKind, MetricKind),
    pod: (MetricKind, MetricKind),
    host_app: (MetricKind, MetricKind),
}

impl ReportPolicy {
    /// The series the policy's memory is read from.
    fn kinds(&self) -> Kinds {
        use MetricKind as K;
        if self.memory_policy == MEMORY_WITH_PAGE_CACHE {
            Kinds {
                node: (K::NodeCpuUsage, K::NodeMemoryUsageWithPageCache),
                pod: (K::PodCpuUsage, K::PodMemoryUsageWithPageCache),
                host_app: (K::HostAppCpuUsage, K::HostAppMemoryUsageWithPageCache),
            }
        } else {
            Kinds {
                node: (K::NodeCpuUsage, K::NodeMemoryUsage),
                pod: (K::PodCpuUsage, K::PodMemoryUsage),
                host_app: (K::HostAppCpuUsage, K::HostAppMemoryUsage),
            }
        }
    }
}

fn secs(v: i64, floor: i64) -> Duration {
    Duration::from_secs(v.max(floor).unsigned_abs())
}

impl ReportPolicy {
    /// The policy of `spec` (None: no NodeMetric yet). `min_report` is the floor on
    /// the report interval: [`MIN_REPORT`], lowered only by the tests.
    pub(crate) fn of(spec: Option<&NodeMetricSpec>, min_report: Duration) -> ReportPolicy {
        let p = spec.and_then(|s| s.collect_policy.as_ref());
        let durations = p
            .and_then(|p| p.node_aggregate_policy.as_ref())
            .map(|a| {
                a.durations
                    .iter()
                    .filter_map(|d| crate::duration::parse_go_duration(d).ok()?.to_std())
                    .collect()
            })
            .unwrap_or_else(|| DEFAULT_DURATIONS.to_vec());
        let report = p
            .and_then(|p| p.report_interval_seconds)
            .map_or(DEFAULT_REPORT, |v| {
                Duration::from_secs(v.max(0).unsigned_abs())
            })
            .max(min_report);
        ReportPolicy {
            aggregate: secs(
                p.and_then(|p| p.aggregate_duration_seconds)
                    .unwrap_or(DEFAULT_AGGREGATE_SECS),
                MIN_AGGREGATE_SECS,
            ),
            report,
            durations,
            memory_policy: p
                .and_then(|p| p.node_memory_collect_policy.clone())
                .unwrap_or_else(|| MEMORY_POLICY.to_string()),
        }
    }
}

/// Go's `int64(v)` of a reading from the cache: truncated, as koordlet converts, after
/// undoing the cache's f32 rounding (0.9 cores is stored as 0.89999998, which Go's
/// float64 cache would have kept as 0.9): a value within one part in a million below
/// the next integer is that integer (more than an f32's error, less than anything a
/// reading can mean), and an integer stays itself.
fn go_int(v: f64) -> i64 {
    if v < 0.0 {
        return -go_int(-v);
    }
    let up = v.ceil();
    if up - v <= v * 1e-6 {
        up as i64
    } else {
        v.trunc() as i64
    }
}

/// Go's `NewMilliQuantity(int64(cores*1000), DecimalSI).String()`: whole cores without
/// a suffix.
fn cpu_quantity(cores: f64) -> Quantity {
    let milli = go_int(cores * 1000.0);
    Quantity(if milli % 1000 == 0 {
        crate::quantity::canonical(milli / 1000, false)
    } else {
        format!("{milli}m")
    })
}

/// Go's `NewQuantity(int64(bytes), BinarySI).String()`.
fn memory_quantity(bytes: f64) -> Quantity {
    Quantity(crate::quantity::canonical(go_int(bytes), true))
}

fn resources(cpu: f64, memory: f64) -> ResourceMap {
    ResourceMap {
        resources: BTreeMap::from([
            ("cpu".to_string(), cpu_quantity(cpu)),
            ("memory".to_string(), memory_quantity(memory)),
        ]),
        devices: None,
    }
}

/// One window of the metric cache.
struct Window<'a> {
    cache: &'a MetricCache,
    start_ms: i64,
    end_ms: i64,
}

impl Window<'_> {
    /// Each of `aggs` of a CPU and a memory kind, from one query of each; empty when
    /// either has no points, or when `cold_start` and the CPU samples span less than
    /// half the window.
    fn usages(
        &self,
        (cpu, memory): (MetricKind, MetricKind),
        labels: &[(&str, &str)],
        aggs: &[Aggregation],
        cold_start: bool,
    ) -> Vec<ResourceMap> {
        let c = self.cache.query(cpu, labels, self.start_ms, self.end_ms);
        let m = self.cache.query(memory, labels, self.start_ms, self.end_ms);
        let span = (self.end_ms - self.start_ms) as f64;
        let cold = cold_start && (c.time_range_ms() as f64) < span * COLD_START_RATIO;
        aggs.iter()
            .map(|agg| match (c.value(*agg), m.value(*agg)) {
                (Ok(cores), Ok(bytes)) if !cold => resources(cores, bytes),
                _ => ResourceMap::default(),
            })
            .collect()
    }

    /// The average of a CPU and a memory kind (no cold-start rule).
    fn average(&self, kinds: (MetricKind, MetricKind), labels: &[(&str, &str)]) -> ResourceMap {
        self.usages(kinds, labels, &[Aggregation::Avg], false)
            .pop()
            .unwrap_or_default()
    }
}

const SYSTEM: (MetricKind, MetricKind) = (MetricKind::SysCpuUsage, MetricKind::SysMemoryUsage);

/// Each duration's aggregates of `kinds`, ending at `end_ms`.
fn aggregated(
    cache: &MetricCache,
    kinds: (MetricKind, MetricKind),
    durations: &[Duration],
    end_ms: i64,
) -> Vec<AggregatedUsage> {
    durations
        .iter()
        .map(|d| {
            let w = Window {
                cache,
                start_ms: end_ms - i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
                end_ms,
            };
            const NAMES: [&str; 5] = ["avg", "p50", "p90", "p95", "p99"];
            const AGGS: [Aggregation; 5] = [
                Aggregation::Avg,
                Aggregation::P50,
                Aggregation::P90,
                Aggregation::P95,
                Aggregation::P99,
            ];
            let usage = NAMES
                .iter()
                .map(|n| (*n).to_string())
                .zip(w.usages(kinds, &[], &AGGS, true))
                .collect();
            AggregatedUsage {
                usage,
                duration: crate::duration::format_go_duration(*d),
            }
        })
        .collect()
}

/// What the peak predictor says of the prod classes: (reclaimable, peak), or None
/// before it has synced (koordlet then reports an empty reclaimable and no peak).
pub(crate) type ProdPrediction = Option<(ResourceAmount, ResourceAmount)>;

fn amount_map(a: ResourceAmount) -> ResourceMap {
    resources(a.cpu_milli as f64 / 1000.0, a.memory_bytes as f64)
}

/// The status koordlet would write now, for `pods` (the node's pods, mirror pods
/// left out by the caller) and the NodeSLO's `host_apps`; `predict` answers for the
/// pods that have metrics, the only ones koordlet's collectMetric feeds its predictor.
pub(crate) fn build_status(
    cache: &MetricCache,
    pods: &[Arc<Pod>],
    host_apps: &[HostApp],
    policy: &ReportPolicy,
    predict: &dyn Fn(&[Arc<Pod>]) -> ProdPrediction,
    now_ms: i64,
) -> NodeMetricStatus {
    let w = Window {
        cache,
        start_ms: now_ms - i64::try_from(policy.aggregate.as_millis()).unwrap_or(i64::MAX),
        end_ms: now_ms,
    };
    let kinds = policy.kinds();
    let node_metric = NodeMetricInfo {
        node_usage: w.average(kinds.node, &[]),
        aggregated_node_usages: aggregated(cache, kinds.node, &policy.durations, now_ms),
        system_usage: w.average(SYSTEM, &[]),
        aggregated_system_usages: aggregated(cache, SYSTEM, &policy.durations, now_ms),
        numa_usages: Vec::new(),
    };
    let mut measured = Vec::new();
    let mut pods_metric: Vec<PodMetricInfo> = Vec::new();
    for pod in pods {
        let usage = w.average(kinds.pod, &[(label::POD_UID, crate::pod::pod_uid(pod))]);
        if usage.resources.is_empty() {
            continue;
        }
        measured.push(pod.clone());
        pods_metric.push(PodMetricInfo {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod_usage: usage,
            priority: PriorityClass::with_default(pod).name().to_string(),
            qos: koord_qos_with_default(pod).to_string(),
            extensions: None,
        });
    }
    pods_metric.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let prediction = predict(&measured);
    NodeMetricStatus {
        update_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_millisecond(now_ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        )),
        node_metric: Some(node_metric),
        pods_metric,
        host_application_metric: host_app_metrics(&w, kinds.host_app, host_apps),
        prod_reclaimable_metric: Some(ResourceMetric {
            resource: prediction.map_or_else(ResourceMap::default, |(r, _)| amount_map(r)),
        }),
        prod_peak_metric: prediction.map(|(_, p)| ResourceMetric {
            resource: amount_map(p),
        }),
    }
}

/// koordlet's `hostApplicationMetric`: each host application with samples, its
/// average usage, priority and QoS as the NodeSLO gives them, by name (slo-controller
/// takes them out of the system usage it charges batch allocatable with).
fn host_app_metrics(
    w: &Window<'_>,
    kinds: (MetricKind, MetricKind),
    apps: &[HostApp],
) -> Vec<HostAppMetricInfo> {
    let mut out: Vec<HostAppMetricInfo> = apps
        .iter()
        .filter_map(|app| {
            let usage = w.average(kinds, &[(label::HOST_APP_NAME, app.name.as_str())]);
            (!usage.resources.is_empty()).then(|| HostAppMetricInfo {
                name: app.name.clone(),
                usage,
                priority: app.priority.clone(),
                qos: app.qos.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
