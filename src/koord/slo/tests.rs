use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::nodemetric::{MIN_REPORT as MIN, ReportPolicy, build_status};
use crate::koord::prediction::ResourceAmount;
use crate::koordapi::NodeMetricSpec;
use crate::metriccache::{MetricCache, MetricKind, Sample, label};

fn spec(v: serde_json::Value) -> NodeMetricSpec {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_policy_is_the_spec_over_koordlets_defaults_with_its_floors() {
    let d = ReportPolicy::of(None, MIN);
    assert_eq!(d.aggregate, Duration::from_secs(300));
    assert_eq!(d.report, Duration::from_secs(60));
    let mins: Vec<u64> = d.durations.iter().map(|d| d.as_secs() / 60).collect();
    assert_eq!(mins, [5, 10, 30]);
    assert_eq!(d.memory_policy, "usageWithoutPageCache");
    // Field by field: what the spec leaves out keeps its default.
    let p = ReportPolicy::of(
        Some(&spec(
            json!({"metricCollectPolicy": {"reportIntervalSeconds": 120}}),
        )),
        MIN,
    );
    assert_eq!((p.report.as_secs(), p.aggregate.as_secs()), (120, 300));
    assert_eq!(p.durations.len(), 3);
    // Floors: 60 s of aggregation, 30 s between reports (lowered only by the tests).
    let low = spec(
        json!({"metricCollectPolicy": {"aggregateDurationSeconds": 10,
        "reportIntervalSeconds": 5, "nodeAggregatePolicy": {"durations": ["1m0s", "90s", "soon"]}}}),
    );
    let p = ReportPolicy::of(Some(&low), MIN);
    assert_eq!((p.aggregate.as_secs(), p.report.as_secs()), (60, 30));
    assert_eq!(
        p.durations,
        [Duration::from_secs(60), Duration::from_secs(90)]
    );
    assert_eq!(
        ReportPolicy::of(Some(&low), Duration::from_secs(1))
            .report
            .as_secs(),
        5
    );
}

fn pod(name: &str, uid: &str, labels: serde_json::Value, cpu: Option<&str>) -> Arc<Pod> {
    let resources = cpu.map_or(
        json!({}),
        |c| json!({"limits": {"cpu": c, "memory": "1Gi"}}),
    );
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
        }))
        .unwrap(),
    )
}

/// `n` one-second samples of `kind` ending at `end_ms`, the i-th valued `value(i)`.
fn fill(
    cache: &MetricCache,
    kind: MetricKind,
    labels: &[(&str, &str)],
    end_ms: i64,
    n: i64,
    value: impl Fn(i64) -> f64,
) {
    let samples =
        (0..n).map(|i| Sample::new(kind, labels, end_ms - (n - 1 - i) * 1000, value(i)).unwrap());
    cache.append(samples.collect::<Vec<_>>());
}

#[test]
fn the_status_averages_the_window_and_holds_back_windows_not_half_covered() {
    let cache = MetricCache::default();
    let now = 10_000_000;
    // 120 s of node samples: CPU 1 core then 2 cores, memory a steady 2 GiB.
    fill(&cache, MetricKind::NodeCpuUsage, &[], now, 120, |i| {
        if i < 60 { 1.0 } else { 2.0 }
    });
    fill(&cache, MetricKind::NodeMemoryUsage, &[], now, 120, |_| {
        2.0 * (1u64 << 30) as f64
    });
    fill(&cache, MetricKind::SysCpuUsage, &[], now, 120, |_| 0.25);
    fill(&cache, MetricKind::SysMemoryUsage, &[], now, 120, |_| {
        1000.0
    });
    let uid = [(label::POD_UID, "u-burn")];
    fill(&cache, MetricKind::PodCpuUsage, &uid, now, 30, |_| 0.9);
    fill(&cache, MetricKind::PodMemoryUsage, &uid, now, 30, |_| {
        3.0 * 1024.0 * 1024.0
    });
    let pods = [
        pod(
            "zz-burn",
            "u-burn",
            json!({"koordinator.sh/qosClass": "BE"}),
            None,
        ),
        pod("aa-quiet", "u-quiet", json!({}), Some("1")),
    ];
    let policy = ReportPolicy::of(
        Some(&spec(
            json!({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["2m0s", "5m0s"]}}}),
        )),
        MIN,
    );
    // A host application with 0.3 cores and 5 MiB, the other without samples.
    let app = [(label::HOST_APP_NAME, "nginx")];
    fill(&cache, MetricKind::HostAppCpuUsage, &app, now, 30, |_| 0.3);
    fill(
        &cache,
        MetricKind::HostAppMemoryUsage,
        &app,
        now,
        30,
        |_| 5.0 * 1024.0 * 1024.0,
    );
    let (apps, errors) = crate::koordapi::parse_host_apps(Some(&[
        json!({"name": "nginx", "priority": "koord-prod", "qos": "LS",
               "cgroupPath": {"relativePath": "nginx"}}),
        json!({"name": "idle", "qos": "BE",
               "cgroupPath": {"relativePath": "idle"}}),
    ]));
    assert!(errors.is_empty(), "{errors:?}");
    let status = build_status(&cache, &pods, &apps, &policy, &|_| None, now);
    let v = serde_json::to_value(&status).unwrap();
    let node = &v["nodeMetric"];
    assert_eq!(
        node["nodeUsage"]["resources"],
        json!({"cpu": "1500m", "memory": "2Gi"})
    );
    // Go writes a BinarySI quantity under 1024 as a decimal one.
    assert_eq!(
        node["systemUsage"]["resources"],
        json!({"cpu": "250m", "memory": "1k"})
    );
    // 2 minutes are covered: every aggregation; p90 of 60 ones and 60 twos is 2.
    let two = &node["aggregatedNodeUsages"][0];
    assert_eq!(two["duration"], "2m0s");
    assert_eq!(two["usage"]["p90"]["resources"]["cpu"], "2");
    assert_eq!(two["usage"]["p50"]["resources"]["cpu"], "1");
    assert_eq!(two["usage"]["avg"]["resources"]["cpu"], "1500m");
    // 119 s of 5 minutes is less than half: each aggregation is empty (koordlet's cold start).
    let five = &node["aggregatedNodeUsages"][1];
    assert_eq!(five["duration"], "5m0s");
    assert_eq!(five["usage"]["avg"], json!({}));
    assert_eq!(
        node["aggregatedSystemUsages"][0]["usage"]["avg"]["resources"]["cpu"],
        "250m"
    );
    // Only the pod with samples, with koordinator's classes.
    assert_eq!(
        v["podsMetric"],
        json!([{"name": "zz-burn", "namespace": "default", "priority": "koord-batch", "qos": "BE",
                "podUsage": {"resources": {"cpu": "900m", "memory": "3Mi"}}}])
    );
    // The host application with samples, truncated as Go does (0.3 is stored as
    // 0.30000001 and reported 300m, not 299m).
    assert_eq!(
        v["hostApplicationMetric"],
        json!([{"name": "nginx", "priority": "koord-prod", "qos": "LS",
                "usage": {"resources": {"cpu": "300m", "memory": "5Mi"}}}])
    );
    assert_eq!(v["prodReclaimableMetric"], json!({"resource": {}}));
    assert!(v.get("prodPeakMetric").is_none());
    assert!(
        v["updateTime"]
            .as_str()
            .unwrap()
            .starts_with("1970-01-01T02:46:40")
    );

    // With the predictor synced, its answer is reported.
    let amount = |cpu_milli, memory_bytes| ResourceAmount {
        cpu_milli,
        memory_bytes,
    };
    // The predictor is asked of the pods with metrics only (koordlet's collectMetric).
    let predict = |measured: &[Arc<Pod>]| {
        let names: Vec<_> = measured
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["zz-burn"]);
        Some((amount(2500, 1 << 30), amount(1000, 4096)))
    };
    let status = build_status(&cache, &pods, &apps, &policy, &predict, now);
    let v = serde_json::to_value(&status).unwrap();
    assert_eq!(
        v["prodReclaimableMetric"]["resource"]["resources"],
        json!({"cpu": "2500m", "memory": "1Gi"})
    );
    assert_eq!(
        v["prodPeakMetric"]["resource"]["resources"],
        json!({"cpu": "1", "memory": "4Ki"})
    );
}

#[test]
fn usage_with_page_cache_reports_memory_from_the_page_cache_series() {
    let cache = MetricCache::default();
    let now = 10_000_000;
    fill(&cache, MetricKind::NodeCpuUsage, &[], now, 120, |_| 1.0);
    fill(&cache, MetricKind::NodeMemoryUsage, &[], now, 120, |_| {
        (1u64 << 30) as f64
    });
    fill(
        &cache,
        MetricKind::NodeMemoryUsageWithPageCache,
        &[],
        now,
        120,
        |_| 3.0 * (1u64 << 30) as f64,
    );
    let uid = [(label::POD_UID, "u-1")];
    fill(&cache, MetricKind::PodCpuUsage, &uid, now, 30, |_| 0.5);
    fill(&cache, MetricKind::PodMemoryUsage, &uid, now, 30, |_| {
        1024.0 * 1024.0
    });
    fill(
        &cache,
        MetricKind::PodMemoryUsageWithPageCache,
        &uid,
        now,
        30,
        |_| 7.0 * 1024.0 * 1024.0,
    );
    let pods = [pod("p", "u-1", json!({}), None)];
    let with = |policy: &str| {
        let spec = spec(json!({"metricCollectPolicy": {"nodeMemoryCollectPolicy": policy}}));
        let policy = ReportPolicy::of(Some(&spec), MIN);
        serde_json::to_value(build_status(&cache, &pods, &[], &policy, &|_| None, now)).unwrap()
    };
    let v = with("usageWithPageCache");
    assert_eq!(v["nodeMetric"]["nodeUsage"]["resources"]["memory"], "3Gi");
    assert_eq!(v["podsMetric"][0]["podUsage"]["resources"]["memory"], "7Mi");
    let v = with("usageWithoutPageCache");
    assert_eq!(v["nodeMetric"]["nodeUsage"]["resources"]["memory"], "1Gi");
    assert_eq!(v["podsMetric"][0]["podUsage"]["resources"]["memory"], "1Mi");
}
