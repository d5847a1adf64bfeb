use std::time::Duration;

use super::aggregate::AggregateError;
use super::kv::KvError;
use super::*;

fn pod_cpu(uid: &str, ts: i64, v: f64) -> Sample {
    Sample::new(MetricKind::PodCpuUsage, &[(label::POD_UID, uid)], ts, v).unwrap()
}

#[test]
fn samples_follow_the_kind_label_schema() {
    assert_eq!(
        Sample::new(MetricKind::PodCpuUsage, &[], 0, 1.0).unwrap_err(),
        SampleError::MissingLabel {
            kind: "pod_cpu_usage",
            label: "pod_uid"
        }
    );
    assert_eq!(
        Sample::new(MetricKind::NodeCpuUsage, &[("pod_uid", "a")], 0, 1.0).unwrap_err(),
        SampleError::UnknownLabel {
            kind: "node_cpu_usage",
            label: "pod_uid".into()
        }
    );
    assert!(matches!(
        Sample::new(MetricKind::NodeCpuUsage, &[], 0, f64::NAN),
        Err(SampleError::NotFinite { .. })
    ));
    // Labels are kept in the schema's order, whatever order they were given in.
    let s = Sample::new(
        MetricKind::ContainerPsi,
        &[
            (label::PSI_DEGREE, "some"),
            (label::CONTAINER_ID, "c"),
            (label::PSI_PRECISION, "10"),
            (label::POD_UID, "p"),
            (label::PSI_RESOURCE, "cpu"),
        ],
        0,
        1.0,
    )
    .unwrap();
    let names: Vec<&str> = s.key().labels.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "pod_uid",
            "container_id",
            "psi_resource",
            "psi_precision",
            "psi_degree"
        ]
    );
}

#[test]
fn a_query_matches_label_subsets_and_the_time_window() {
    let cache = MetricCache::default();
    cache.append((0..10).map(|i| pod_cpu("a", 1000 * i, i as f64)));
    cache.append((0..10).map(|i| pod_cpu("b", 1000 * i, 100.0)));
    let a = cache.query(MetricKind::PodCpuUsage, &[("pod_uid", "a")], 2000, 5000);
    assert_eq!(a.count(), 4);
    assert_eq!(a.value(Aggregation::Avg).unwrap(), 3.5);
    assert_eq!(a.value(Aggregation::Last).unwrap(), 5.0);
    assert_eq!(a.time_range_ms(), 3000);
    // No labels: every pod's points in one list.
    let all = cache.query(MetricKind::PodCpuUsage, &[], 0, 9000);
    assert_eq!(all.count(), 20);
    // Another kind, or an unknown pod, matches nothing.
    let none = cache.query(MetricKind::PodMemoryUsage, &[], 0, 9000);
    assert_eq!(none.value(Aggregation::Count).unwrap(), 0.0);
    assert_eq!(
        none.value(Aggregation::Avg).unwrap_err(),
        AggregateError::Empty
    );
    assert_eq!(cache.series_of(MetricKind::PodCpuUsage).len(), 2);
}

#[test]
fn percentiles_are_nearest_rank_without_interpolation() {
    // 1..=10: p50 is element int(10·0.5)−1 = 4 → 5; p90 → 9; p95 → int(9.5)−1 = 8 → 9;
    // p99 → int(9.9)−1 = 8 → 9.
    let r = AggregateResult::new((1..=10).rev().map(|v| (v, v as f64)).collect());
    assert_eq!(r.value(Aggregation::P50).unwrap(), 5.0);
    assert_eq!(r.value(Aggregation::P90).unwrap(), 9.0);
    assert_eq!(r.value(Aggregation::P95).unwrap(), 9.0);
    assert_eq!(r.value(Aggregation::P99).unwrap(), 9.0);
    // One point: every percentile is that point (rank clamped to 0).
    let one = AggregateResult::new(vec![(0, 7.0)]);
    assert_eq!(one.value(Aggregation::P50).unwrap(), 7.0);
    // "last" is the point with the greatest timestamp, not the last in the list.
    let r = AggregateResult::new(vec![(5, 1.0), (9, 2.0), (7, 3.0)]);
    assert_eq!(r.value(Aggregation::Last).unwrap(), 2.0);
}

#[test]
fn retention_cap_and_order_bound_each_series() {
    let cache = MetricCache::new(CacheLimits {
        retention: Duration::from_secs(10),
        max_points_per_series: 5,
        max_series: 2,
    });
    assert_eq!(cache.append((0..8).map(|i| pod_cpu("a", 1000 * i, 1.0))), 8);
    // The cap keeps the newest 5.
    assert_eq!(
        cache
            .query(MetricKind::PodCpuUsage, &[], 0, i64::MAX)
            .count(),
        5
    );
    // An older point than the newest is refused.
    assert_eq!(cache.append([pod_cpu("a", 0, 1.0)]), 0);
    // A point 20 s later leaves only itself inside the 10 s retention.
    cache.append([pod_cpu("a", 27_000, 2.0)]);
    let r = cache.query(MetricKind::PodCpuUsage, &[], 0, i64::MAX);
    assert_eq!(r.count(), 1);
    // The series limit: a third series is dropped and counted.
    cache.append([pod_cpu("b", 0, 1.0), pod_cpu("c", 0, 1.0)]);
    assert_eq!(cache.series_count(), 2);
    assert_eq!(cache.dropped(), 2);
    // GC drops series whose points all aged out.
    assert_eq!(cache.gc(30_000), 1);
    assert_eq!(cache.series_count(), 1);
}

#[test]
fn offsets_are_rebased_past_49_days() {
    // 45 days of retention, a point every 20 days: the u32 offsets overflow at day 49,
    // so the series moves its base up and keeps the points inside the retention.
    let cache = MetricCache::new(CacheLimits {
        retention: Duration::from_secs(45 * 24 * 3600),
        max_points_per_series: 10,
        max_series: 10,
    });
    let day = 24 * 3600 * 1000_i64;
    let start = 1_700_000_000_000;
    for d in [0, 20, 40, 60, 80] {
        cache.append([pod_cpu("a", start + d * day, d as f64)]);
    }
    let r = cache.query(MetricKind::PodCpuUsage, &[], start, start + 80 * day);
    assert_eq!(r.count(), 3);
    assert_eq!(r.time_range_ms(), 40 * day);
    assert_eq!(r.value(Aggregation::Last).unwrap(), 80.0);
    assert_eq!(r.value(Aggregation::Avg).unwrap(), 60.0);
}

#[test]
fn the_key_value_store_is_bounded() {
    let cache = MetricCache::default();
    cache.kv().set("node_cpu_info", &vec![1, 2, 3]).unwrap();
    assert_eq!(
        cache.kv().get::<Vec<i32>>("node_cpu_info"),
        Some(vec![1, 2, 3])
    );
    assert_eq!(cache.kv().get::<String>("node_cpu_info"), None);
    let big = "x".repeat(kv::MAX_VALUE_BYTES);
    assert!(matches!(
        cache.kv().set("big", &big),
        Err(KvError::TooLarge { .. })
    ));
    for i in 1..kv::MAX_KEYS {
        cache.kv().set(&format!("k{i}"), &i).unwrap();
    }
    assert!(matches!(
        cache.kv().set("one-more", &0),
        Err(KvError::Full { .. })
    ));
    cache.kv().remove("k1");
    cache.kv().set("one-more", &0).unwrap();
}

/// The budget the issue asks for: 110 pods of two containers with every series the
/// advisor writes (node and system CPU and memory; pod CPU, memory, throttling and pids;
/// container CPU, memory and throttling, all at 1 s; the six PSI series (cpu, mem, io ×
/// some, full) of each pod and container at 10 s), 30 min at 1 s resolution.
pub(crate) const BUDGET_110_PODS_BYTES: usize = 24 << 20;

#[test]
fn a_full_half_hour_of_110_pods_stays_within_the_budget() {
    let cache = MetricCache::default();
    let start = 1_700_000_000_000_i64;
    let per_second = [
        MetricKind::PodCpuUsage,
        MetricKind::PodMemoryUsage,
        MetricKind::PodCpuThrottled,
        MetricKind::PodPids,
    ];
    let psi = [
        ("cpu", "some"),
        ("cpu", "full"),
        ("mem", "some"),
        ("mem", "full"),
        ("io", "some"),
        ("io", "full"),
    ];
    let per_container = [
        MetricKind::ContainerCpuUsage,
        MetricKind::ContainerMemoryUsage,
        MetricKind::ContainerCpuThrottled,
    ];
    for sec in 0..(30 * 60 + 120) {
        let ts = start + sec * 1000;
        let mut batch = Vec::new();
        for kind in [
            MetricKind::NodeCpuUsage,
            MetricKind::NodeMemoryUsage,
            MetricKind::SysCpuUsage,
            MetricKind::SysMemoryUsage,
        ] {
            batch.push(Sample::new(kind, &[], ts, 1.0).unwrap());
        }
        for p in 0..110 {
            let uid = format!("0b8c6f9e-1f2a-4c3d-9e8f-{p:012}");
            for kind in per_second {
                batch.push(Sample::new(kind, &[(label::POD_UID, &uid)], ts, 0.5).unwrap());
            }
            if sec % 10 == 0 {
                for (res, deg) in psi {
                    let labels = [
                        (label::POD_UID, uid.as_str()),
                        (label::PSI_RESOURCE, res),
                        (label::PSI_PRECISION, "10"),
                        (label::PSI_DEGREE, deg),
                    ];
                    batch.push(Sample::new(MetricKind::PodPsi, &labels, ts, 1.0).unwrap());
                }
            }
            for c in 0..2 {
                let id = format!("{p:032x}{c:032x}");
                for kind in per_container {
                    batch.push(Sample::new(kind, &[(label::CONTAINER_ID, &id)], ts, 0.5).unwrap());
                }
                if sec % 10 == 0 {
                    for (res, deg) in psi {
                        let labels = [
                            (label::POD_UID, uid.as_str()),
                            (label::CONTAINER_ID, id.as_str()),
                            (label::PSI_RESOURCE, res),
                            (label::PSI_PRECISION, "10"),
                            (label::PSI_DEGREE, deg),
                        ];
                        batch
                            .push(Sample::new(MetricKind::ContainerPsi, &labels, ts, 1.0).unwrap());
                    }
                }
            }
        }
        cache.append(batch);
    }
    assert_eq!(cache.dropped(), 0);
    let bytes = cache.approx_bytes();
    assert_eq!(cache.series_count(), 4 + 110 * (4 + 6) + 220 * (3 + 6));
    assert!(
        bytes <= BUDGET_110_PODS_BYTES,
        "{} series take {bytes} bytes, over the {BUDGET_110_PODS_BYTES} budget",
        cache.series_count()
    );
    // And the half hour is all there: 1800 s of points, plus the minute of slack.
    let r = cache.query(MetricKind::NodeCpuUsage, &[], 0, i64::MAX);
    assert!(r.count() >= 1800, "{}", r.count());
}
