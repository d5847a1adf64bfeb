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

fn limits(retention_s: u64, max_points: usize, max_series: usize) -> CacheLimits {
    CacheLimits {
        retention: Duration::from_secs(retention_s),
        max_points_per_series: max_points,
        max_series,
        ..CacheLimits::DEFAULT
    }
}

#[test]
fn retention_cap_and_order_bound_each_series() {
    let cache = MetricCache::new(limits(600, 130, 2));
    assert_eq!(
        cache.append((0..200).map(|i| pod_cpu("a", 1000 * i, 1.0))),
        200
    );
    // The cap drops whole chunks (120 points) from the front once past 130.
    let r = cache.query(MetricKind::PodCpuUsage, &[], 0, i64::MAX);
    assert_eq!(r.count(), 80);
    assert_eq!(cache.dropped(), 0);
    // A point up to a minute behind the newest is slotted in; further back, or a
    // duplicate, is refused.
    assert_eq!(cache.append([pod_cpu("a", 150_500, 9.0)]), 1);
    assert_eq!(cache.append([pod_cpu("a", 120_000, 1.0)]), 0);
    assert_eq!(cache.append([pod_cpu("a", 199_000, 1.0)]), 0);
    assert_eq!(cache.dropped(), 2);
    let r = cache.query(MetricKind::PodCpuUsage, &[], 150_000, 151_000);
    assert_eq!(r.count(), 3);
    assert_eq!(r.value(Aggregation::Last).unwrap(), 1.0);
    assert_eq!(r.value(Aggregation::Avg).unwrap(), 11.0 / 3.0);
    // A point 20 min later leaves only what is inside the 10 min retention.
    cache.append([pod_cpu("a", 1_400_000, 2.0)]);
    let r = cache.query(MetricKind::PodCpuUsage, &[], 0, i64::MAX);
    assert_eq!(r.count(), 1);
    // The series limit: a third series is dropped and counted.
    cache.append([pod_cpu("b", 0, 1.0), pod_cpu("c", 0, 1.0)]);
    assert_eq!(cache.series_count(), 2);
    assert_eq!(cache.dropped(), 3);
    // GC drops series whose points all aged out.
    assert_eq!(cache.gc(1_000_000), 1);
    assert_eq!(cache.series_count(), 1);
}

#[test]
fn points_far_apart_keep_their_times_and_values() {
    // 45 days of retention, a point every 20 days, and values every bit of which moves.
    let cache = MetricCache::new(limits(45 * 24 * 3600, 10, 10));
    let day = 24 * 3600 * 1000_i64;
    let start = 1_700_000_000_000;
    for d in [0, 20, 40, 60, 80] {
        cache.append([pod_cpu("a", start + d * day, d as f64 + 0.1)]);
    }
    let r = cache.query(MetricKind::PodCpuUsage, &[], start, start + 80 * day);
    assert_eq!(r.count(), 3);
    assert_eq!(r.time_range_ms(), 40 * day);
    assert_eq!(r.value(Aggregation::Last).unwrap(), 80.1);
    assert_eq!(
        r.value(Aggregation::Avg).unwrap(),
        (40.1 + 60.1 + 80.1) / 3.0
    );
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
/// some, full) of each pod and container at 10 s), 30 min at 1 s resolution, in memory.
pub(crate) const BUDGET_110_PODS_BYTES: usize = 12 << 20;

/// One advisor round at 110 pods of two containers.
fn round_of_110_pods(sec: i64, ts: i64) -> Vec<Sample> {
    synthetic::round(110, 2, sec, ts)
}

const SERIES_AT_110_PODS: usize = 4 + 110 * (4 + 6) + 220 * (3 + 6);

#[test]
fn a_full_half_hour_of_110_pods_stays_within_the_budget() {
    let cache = MetricCache::default();
    let start = 1_700_000_000_000_i64;
    for sec in 0..(30 * 60 + 120) {
        cache.append(round_of_110_pods(sec, start + sec * 1000));
    }
    assert_eq!(cache.dropped(), 0);
    let bytes = cache.approx_bytes();
    assert_eq!(cache.series_count(), SERIES_AT_110_PODS);
    assert!(
        bytes <= BUDGET_110_PODS_BYTES,
        "{} series take {bytes} bytes, over the {BUDGET_110_PODS_BYTES} budget",
        cache.series_count()
    );
    // And the half hour is all there: 1800 s of points, plus the minute of slack.
    let r = cache.query(MetricKind::NodeCpuUsage, &[], 0, i64::MAX);
    assert!(r.count() >= 1800, "{}", r.count());
}

mod on_disk {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    const START: i64 = 1_700_000_000_000;

    fn open(dir: &std::path::Path, limits: CacheLimits) -> (MetricCache, disk::Opened) {
        MetricCache::open(dir, limits).unwrap()
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn node_points(cache: &MetricCache) -> Vec<(i64, f64)> {
        let mut p = cache.query(MetricKind::NodeCpuUsage, &[], 0, i64::MAX);
        p.sort_by_time();
        p.points().to_vec()
    }

    fn node(ts: i64, v: f64) -> Sample {
        Sample::new(MetricKind::NodeCpuUsage, &[], ts, v).unwrap()
    }

    #[test]
    fn a_restart_replays_the_log_and_reads_the_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, found) = open(dir.path(), CacheLimits::ON_DISK);
        assert_eq!(found.blocks + found.wal.segments, 0);
        // 25 minutes at 1 s: two full blocks and a head of the rest.
        let mut want = Vec::new();
        for sec in 0..1500 {
            let (ts, v) = (START + sec * 1000 + sec % 3, (sec as f64).sqrt() / 7.0);
            cache.append([node(ts, v), pod_cpu("p", ts, v * 2.0)]);
            want.push((ts, v));
        }
        let stats = cache.stats();
        assert_eq!(stats.blocks, 2, "{stats:?}");
        assert!(stats.persisted_until_ms.unwrap() > START + 600_000);
        assert_eq!(node_points(&cache), want);
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.path()), 0o700);
        for n in names(dir.path()) {
            assert_eq!(mode(&dir.path().join(&n)), 0o600, "{n}");
        }
        // No clean shutdown: the cache is simply dropped, as kill -9 would leave it.
        drop(cache);
        let (cache, found) = open(dir.path(), CacheLimits::ON_DISK);
        assert_eq!(found.blocks, 2);
        assert!(
            found.wal.points > 0 && found.wal.torn_bytes == 0,
            "{found:?}"
        );
        assert_eq!(node_points(&cache), want);
        // Aggregations over a window that spans a block and the head see every point.
        let r = cache.query(
            MetricKind::PodCpuUsage,
            &[("pod_uid", "p")],
            START + 500_000,
            START + 1_000_000,
        );
        assert!((500..=501).contains(&r.count()), "{}", r.count());
        // And it goes on where it left off.
        assert_eq!(cache.append([node(START + 1_500_000, 1.0)]), 1);
        assert_eq!(
            cache.append([node(START + 1_400_000, 1.0)]),
            0,
            "behind the out-of-order minute"
        );
    }

    #[test]
    fn a_torn_log_tail_costs_only_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), CacheLimits::ON_DISK);
        for sec in 0..30 {
            cache.append([node(START + sec * 1000, sec as f64)]);
        }
        drop(cache);
        let wal = dir.path().join(names(dir.path()).pop().unwrap());
        let len = std::fs::metadata(&wal).unwrap().len();
        // Half of the last record is gone, and some garbage follows.
        let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
        f.set_len(len - 5).unwrap();
        std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
        let mut bytes = std::fs::read(&wal).unwrap();
        bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
        std::fs::write(&wal, &bytes).unwrap();
        let (cache, found) = open(dir.path(), CacheLimits::ON_DISK);
        assert_eq!(found.wal.points, 29);
        assert!(found.wal.torn_bytes > 0);
        assert_eq!(node_points(&cache).len(), 29);
        // The segment was cut back, so what is logged after it replays too.
        cache.append([node(START + 31_000, 31.0)]);
        drop(cache);
        let (cache, found) = open(dir.path(), CacheLimits::ON_DISK);
        assert_eq!((found.wal.points, found.wal.torn_bytes), (30, 0));
        assert_eq!(node_points(&cache).last(), Some(&(START + 31_000, 31.0)));
    }

    #[test]
    fn a_corrupt_block_loses_what_it_held_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), CacheLimits::ON_DISK);
        for sec in 0..1300 {
            let ts = START + sec * 1000;
            cache.append([node(ts, 1.0 + sec as f64), pod_cpu("p", ts, 0.5)]);
        }
        drop(cache);
        let blocks: Vec<String> = names(dir.path())
            .into_iter()
            .filter(|n| n.starts_with("block-"))
            .collect();
        assert_eq!(blocks.len(), 2);
        // One bit of the first block's data flips (just past its header).
        let first = dir.path().join(&blocks[0]);
        let mut bytes = std::fs::read(&first).unwrap();
        bytes[30] ^= 0x10;
        std::fs::write(&first, &bytes).unwrap();
        // The second block loses its footer.
        let second = dir.path().join(&blocks[1]);
        let len = std::fs::metadata(&second).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&second)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let (cache, found) = open(dir.path(), CacheLimits::ON_DISK);
        assert_eq!(found.blocks, 1, "the block without a footer is skipped");
        let all = cache
            .query(MetricKind::NodeCpuUsage, &[], 0, i64::MAX)
            .count()
            + cache
                .query(MetricKind::PodCpuUsage, &[], 0, i64::MAX)
                .count();
        // Whatever the flipped bit hit (one series' data), the head's points and the
        // other series of the first block are still read, and nothing panics.
        assert!(all >= 1300 * 2 - 1200 - 600, "{all}");
        assert!(all < 1300 * 2, "{all}");
    }

    #[test]
    fn retention_and_the_size_cap_delete_the_oldest_blocks_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        std::fs::write(dir.path().join("block-x-y"), "not a block").unwrap();
        let limits = CacheLimits {
            retention: Duration::from_secs(3600),
            ..CacheLimits::ON_DISK
        };
        let (cache, _) = open(dir.path(), limits);
        for sec in 0..(100 * 60) {
            cache.append(
                round_of_110_pods(sec, START + sec * 1000)
                    .into_iter()
                    .take(40),
            );
        }
        let made = cache.stats().blocks;
        assert!(made >= 9, "{made}");
        // An hour of retention at 100 min: the blocks ending before minute 40 go, and
        // only those.
        let cutoff = START + 40 * 60_000;
        cache.gc(START + 100 * 60_000);
        let ends: Vec<i64> = names(dir.path())
            .iter()
            .filter_map(|n| block::parse_name(n, false))
            .map(|(_, end)| end)
            .collect();
        assert!(ends.iter().all(|e| *e > cutoff), "{ends:?}");
        assert!(ends.iter().any(|e| *e - 600_000 <= cutoff), "{ends:?}");
        let blocks = ends.len();
        assert!(blocks < made);
        // A cap below what is there: the oldest go until it fits.
        let before = cache.stats().disk_bytes;
        let cap = CacheLimits {
            max_disk_bytes: before / 2,
            ..limits
        };
        drop(cache);
        let (cache, _) = open(dir.path(), cap);
        cache.gc(START + 100 * 60_000);
        let stats = cache.stats();
        assert!(
            stats.disk_bytes <= before / 2 && stats.blocks < blocks,
            "{stats:?}"
        );
        assert_eq!(
            names(dir.path())
                .iter()
                .filter(|n| !n.starts_with("block-1") && !n.starts_with("wal-"))
                .collect::<Vec<_>>(),
            ["block-x-y", "notes.txt"]
        );
    }

    /// A query reads its blocks with the lock let go (the advisor's append goes on
    /// meanwhile), and stops at its bounds in points and time, saying which.
    #[test]
    fn a_query_reads_blocks_without_the_lock_and_within_its_bounds() {
        use std::sync::atomic::AtomicUsize;
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(open(dir.path(), CacheLimits::ON_DISK).0);
        // 35 minutes of 20 pods at 1 s: three blocks and a head.
        let secs = 35 * 60;
        for sec in 0..secs {
            let ts = START + sec * 1000;
            cache.append((0..20).map(|p| pod_cpu(&format!("p{p}"), ts, 1.0)));
        }
        assert_eq!(cache.stats().blocks, 3, "{:?}", cache.stats());
        let (free, appended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (c, f, a) = (cache.clone(), free.clone(), appended.clone());
        let mut next = START + secs * 1000;
        disk::BEFORE_BLOCK_READ.set(Some(Box::new(move || {
            // The lock is free while the query is between its copy and its answer…
            let was_free = c.head.try_lock().is_ok();
            f.fetch_add(usize::from(was_free), Ordering::Relaxed);
            // …so the advisor's round is stored at once.
            if was_free {
                a.fetch_add(c.append([node(next, 1.0)]), Ordering::Relaxed);
                next += 1000;
            }
        })));
        let all = cache.query(MetricKind::PodCpuUsage, &[], START, i64::MAX);
        disk::BEFORE_BLOCK_READ.set(None);
        assert_eq!((all.count(), all.cut()), (20 * 2100, None));
        assert_eq!(
            free.load(Ordering::Relaxed),
            3,
            "before each of three blocks"
        );
        assert_eq!(appended.load(Ordering::Relaxed), 3);
        // The point bound: exactly that many, and the answer says it was cut.
        let bounded = |max_points, time| QueryBounds { max_points, time };
        let r = cache.query_within(
            MetricKind::PodCpuUsage,
            &[],
            START,
            i64::MAX,
            bounded(1000, None),
        );
        assert_eq!((r.count(), r.cut()), (1000, Some(Cut::Points)));
        // In the head alone: the copy stops at the bound too.
        let head_from = START + 31 * 60 * 1000;
        let r = cache.query_within(
            MetricKind::PodCpuUsage,
            &[],
            head_from,
            i64::MAX,
            bounded(100, None),
        );
        assert_eq!((r.count(), r.cut()), (100, Some(Cut::Points)));
        let whole_head = cache.query(MetricKind::PodCpuUsage, &[], head_from, i64::MAX);
        assert_eq!((whole_head.count(), whole_head.cut()), (20 * 240, None));
        // The time bound: a deadline already past reads nothing and says why.
        let r = cache.query_within(
            MetricKind::PodCpuUsage,
            &[],
            START,
            i64::MAX,
            bounded(MAX_QUERY_POINTS, Some(Duration::ZERO)),
        );
        assert_eq!((r.count(), r.cut()), (0, Some(Cut::Deadline)));
        // One outside reader at a time.
        let slot = cache.outside_slot().unwrap();
        assert!(cache.outside_slot().is_none());
        drop(slot);
        assert!(cache.outside_slot().is_some());
    }

    #[test]
    fn twelve_hours_of_110_pods_stay_in_memory_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, _) = open(dir.path(), CacheLimits::ON_DISK);
        for sec in 0..(45 * 60) {
            cache.append(round_of_110_pods(sec, START + sec * 1000));
        }
        let stats = cache.stats();
        assert_eq!(stats.dropped_samples, 0);
        assert_eq!(stats.series, SERIES_AT_110_PODS);
        // The head holds at most a block and the out-of-order minute, so whatever the
        // retention, memory stays about a third of the in-memory half hour's.
        assert!(stats.head_bytes <= BUDGET_110_PODS_BYTES / 2, "{stats:?}");
        // The blocks hold the rest, compressed.
        let points_on_disk = 40 * 60 * 1100;
        assert!(stats.disk_bytes < points_on_disk * 6, "{stats:?}");
        eprintln!("45 min at 110 pods: {stats:?}");
    }
}

#[test]
fn a_kept_key_and_a_fresh_one_name_the_same_series() {
    let cache = MetricCache::default();
    let kept = pod_cpu("a", 0, 0.0).key().clone();
    let fresh = pod_cpu("a", 0, 0.0).key().clone();
    assert_eq!(kept, fresh, "equal without being the same allocation");
    assert_ne!(kept, pod_cpu("b", 0, 0.0).key().clone());
    let state = std::hash::RandomState::new();
    assert_eq!(
        std::hash::BuildHasher::hash_one(&state, &kept),
        std::hash::BuildHasher::hash_one(&state, &fresh)
    );
    cache.append([Sample::with_key(&kept, 1000, 1.0).unwrap()]);
    cache.append([pod_cpu("a", 2000, 3.0)]);
    cache.append([Sample::with_key(&fresh, 3000, 5.0).unwrap()]);
    assert_eq!(cache.series_count(), 1);
    let got = cache.query(
        MetricKind::PodCpuUsage,
        &[(label::POD_UID, "a")],
        0,
        i64::MAX,
    );
    assert_eq!(got.value(Aggregation::Avg), Ok(3.0));
    // A kept key still refuses a value that is not a number.
    assert!(Sample::with_key(&kept, 4000, f64::NAN).is_err());
}
