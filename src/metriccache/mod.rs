//! The metric cache: koordlet's `metriccache`. It holds the metric advisor's samples as
//! time series (one per kind and label set) and a small key-value store for facts that
//! are not series (CPU topology, the last prediction round). The prediction model, the
//! QoS manager and the NodeMetric report read it; the advisor is its only writer.
//!
//! koordlet keeps the series in Prometheus's TSDB on disk, 12 h of them; so does oxlet,
//! in a small store of the same shape under `--root-dir` (see [`disk`]):
//! - the **head** holds the newest points in memory: the last minute as it came (a late
//!   point, up to a minute behind, is slotted in), the rest compressed in chunks;
//! - every point is written to a **write-ahead log** first, so a restart (even after
//!   kill -9) replays it and loses nothing that was written;
//! - each finished 10-minute window goes to an immutable **block** file, and leaves
//!   memory; queries read blocks for older points;
//! - blocks past the retention, or the oldest past the size cap, are deleted.
//!
//! So memory holds about 11 minutes of points whatever the retention. Without a
//! directory (the tests, or one that cannot be opened) the cache is the head alone,
//! kept for [`CacheLimits::retention`]. Either way a sample that would open a series past
//! the limit is dropped and counted, never stored.

mod aggregate;
mod block;
mod codec;
mod disk;
mod gorilla;
mod kv;
mod series;
mod synthetic;
mod wal;

#[cfg(test)]
mod tests;

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) use aggregate::{AggregateResult, Aggregation, Cut};
use disk::Disk;
// A synthetic round of a node's samples, for the benchmarks.
pub(crate) use kv::KvStore;
use series::{Series, SeriesRules};
pub(crate) use synthetic::round as synthetic_round;

/// What a series measures, with koordlet's metric names. Units: cores for CPU usage,
/// bytes for memory, a ratio (0..1) for throttling, a count for pids, percent for PSI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum MetricKind {
    NodeCpuUsage,
    NodeMemoryUsage,
    SysCpuUsage,
    SysMemoryUsage,
    PodCpuUsage,
    PodMemoryUsage,
    PodCpuThrottled,
    PodPids,
    PodPsi,
    ContainerCpuUsage,
    ContainerMemoryUsage,
    ContainerCpuThrottled,
    ContainerPsi,
    NodeMemoryUsageWithPageCache,
    PodMemoryUsageWithPageCache,
    ContainerMemoryUsageWithPageCache,
    /// The BestEffort tier's CPU in millicores: its usage, its pods' batch requests and
    /// the limit its cgroup really has (koordlet's `node_be`).
    NodeBe,
    HostAppCpuUsage,
    HostAppMemoryUsage,
    HostAppMemoryUsageWithPageCache,
}

impl MetricKind {
    /// Every kind, in the order of their codes on disk (append only).
    pub(crate) const ALL: [MetricKind; 20] = [
        MetricKind::NodeCpuUsage,
        MetricKind::NodeMemoryUsage,
        MetricKind::SysCpuUsage,
        MetricKind::SysMemoryUsage,
        MetricKind::PodCpuUsage,
        MetricKind::PodMemoryUsage,
        MetricKind::PodCpuThrottled,
        MetricKind::PodPids,
        MetricKind::PodPsi,
        MetricKind::ContainerCpuUsage,
        MetricKind::ContainerMemoryUsage,
        MetricKind::ContainerCpuThrottled,
        MetricKind::ContainerPsi,
        MetricKind::NodeMemoryUsageWithPageCache,
        MetricKind::PodMemoryUsageWithPageCache,
        MetricKind::ContainerMemoryUsageWithPageCache,
        MetricKind::NodeBe,
        MetricKind::HostAppCpuUsage,
        MetricKind::HostAppMemoryUsage,
        MetricKind::HostAppMemoryUsageWithPageCache,
    ];

    /// The kind's code in the log and the blocks.
    fn code(self) -> u8 {
        MetricKind::ALL.iter().position(|k| *k == self).unwrap_or(0) as u8
    }

    fn from_code(code: u8) -> Option<MetricKind> {
        MetricKind::ALL.get(usize::from(code)).copied()
    }

    /// koordlet's name for the kind (its series' `__name__`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            MetricKind::NodeCpuUsage => "node_cpu_usage",
            MetricKind::NodeMemoryUsage => "node_memory_usage",
            MetricKind::SysCpuUsage => "sys_cpu_usage",
            MetricKind::SysMemoryUsage => "sys_memory_usage",
            MetricKind::PodCpuUsage => "pod_cpu_usage",
            MetricKind::PodMemoryUsage => "pod_memory_usage",
            MetricKind::PodCpuThrottled => "pod_cpu_throttled",
            MetricKind::PodPids => "pod_pids",
            MetricKind::PodPsi => "pod_psi",
            MetricKind::ContainerCpuUsage => "container_cpu_usage",
            MetricKind::ContainerMemoryUsage => "container_memory_usage",
            MetricKind::ContainerCpuThrottled => "container_cpu_throttled",
            MetricKind::ContainerPsi => "container_psi",
            MetricKind::NodeMemoryUsageWithPageCache => "node_memory_usage_with_page_cache",
            MetricKind::PodMemoryUsageWithPageCache => "pod_memory_usage_with_page_cache",
            MetricKind::ContainerMemoryUsageWithPageCache => {
                "container_memory_usage_with_page_cache"
            }
            MetricKind::NodeBe => "node_be",
            MetricKind::HostAppCpuUsage => "host_application_cpu_usage",
            MetricKind::HostAppMemoryUsage => "host_application_memory_usage",
            MetricKind::HostAppMemoryUsageWithPageCache => {
                "host_application_memory_usage_with_page_cache"
            }
        }
    }

    /// The labels every sample of this kind must carry (koordlet's label schema).
    pub(crate) fn label_names(self) -> &'static [&'static str] {
        match self {
            MetricKind::NodeCpuUsage
            | MetricKind::NodeMemoryUsage
            | MetricKind::SysCpuUsage
            | MetricKind::SysMemoryUsage
            | MetricKind::NodeMemoryUsageWithPageCache => &[],
            MetricKind::NodeBe => &[label::BE_RESOURCE, label::BE_ALLOCATION],
            MetricKind::HostAppCpuUsage
            | MetricKind::HostAppMemoryUsage
            | MetricKind::HostAppMemoryUsageWithPageCache => &[label::HOST_APP_NAME],
            MetricKind::PodCpuUsage
            | MetricKind::PodMemoryUsageWithPageCache
            | MetricKind::PodMemoryUsage
            | MetricKind::PodCpuThrottled
            | MetricKind::PodPids => &[label::POD_UID],
            MetricKind::PodPsi => &[
                label::POD_UID,
                label::PSI_RESOURCE,
                label::PSI_PRECISION,
                label::PSI_DEGREE,
            ],
            MetricKind::ContainerCpuUsage
            | MetricKind::ContainerMemoryUsage
            | MetricKind::ContainerMemoryUsageWithPageCache
            | MetricKind::ContainerCpuThrottled => &[label::CONTAINER_ID],
            MetricKind::ContainerPsi => &[
                label::POD_UID,
                label::CONTAINER_ID,
                label::PSI_RESOURCE,
                label::PSI_PRECISION,
                label::PSI_DEGREE,
            ],
        }
    }
}

/// koordlet's label names.
pub(crate) mod label {
    pub(crate) const POD_UID: &str = "pod_uid";
    pub(crate) const CONTAINER_ID: &str = "container_id";
    /// `cpu`, `mem` or `io`.
    pub(crate) const PSI_RESOURCE: &str = "psi_resource";
    /// The averaging window in seconds: `10`.
    pub(crate) const PSI_PRECISION: &str = "psi_precision";
    /// `some` or `full`.
    pub(crate) const PSI_DEGREE: &str = "psi_degree";
    /// `cpu`.
    pub(crate) const BE_RESOURCE: &str = "be_resource";
    /// `usage`, `request` or `real-limit`.
    pub(crate) const BE_ALLOCATION: &str = "be_allocation";
    /// A host application's name (NodeSLO `hostApplications[].name`).
    pub(crate) const HOST_APP_NAME: &str = "host_app_name";
}

/// A series' identity: its kind and its label values, in the kind's label order.
///
/// Shared, with its hash taken once: every second each pod and container adds a few
/// points, and each is looked up in the head and in the log's references. With the
/// key's strings compared and hashed anew every time, that was most of the cache's
/// CPU at rest (its memory is cold after a second). A collector that keeps its
/// targets' keys hands the same key in each round, so a lookup is one hash table
/// probe and a pointer comparison.
#[derive(Clone)]
pub(crate) struct SeriesKey(Arc<KeyParts>);

/// What a [`SeriesKey`] names, and its hash.
#[derive(Debug)]
pub(crate) struct KeyParts {
    pub kind: MetricKind,
    pub labels: Vec<(&'static str, String)>,
    /// Of `kind` and `labels`, with the process's one random hasher (see
    /// [`key_hasher`]).
    hash: u64,
}

/// The hasher every key's hash is taken with: keyed at random once per process, so
/// equal keys hash alike and label values cannot be chosen to collide.
fn key_hasher() -> &'static std::hash::RandomState {
    static HASHER: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    HASHER.get_or_init(std::hash::RandomState::new)
}

impl SeriesKey {
    pub(crate) fn new(kind: MetricKind, labels: Vec<(&'static str, String)>) -> SeriesKey {
        use std::hash::BuildHasher as _;
        let hash = key_hasher().hash_one((kind, &labels));
        SeriesKey(Arc::new(KeyParts { kind, labels, hash }))
    }
}

impl std::ops::Deref for SeriesKey {
    type Target = KeyParts;
    fn deref(&self) -> &KeyParts {
        &self.0
    }
}

impl std::fmt::Debug for SeriesKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesKey")
            .field("kind", &self.kind)
            .field("labels", &self.labels)
            .finish()
    }
}

impl PartialEq for SeriesKey {
    fn eq(&self, other: &SeriesKey) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.hash == other.hash && self.kind == other.kind && self.labels == other.labels)
    }
}

impl Eq for SeriesKey {}

impl std::hash::Hash for SeriesKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for SeriesKey {
    fn partial_cmp(&self, other: &SeriesKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SeriesKey {
    fn cmp(&self, other: &SeriesKey) -> std::cmp::Ordering {
        (self.kind, &self.labels).cmp(&(other.kind, &other.labels))
    }
}

/// Why a sample was not stored.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SampleError {
    #[error("{kind} needs label {label:?}")]
    MissingLabel {
        kind: &'static str,
        label: &'static str,
    },
    #[error("{kind} has no label {label:?}")]
    UnknownLabel { kind: &'static str, label: String },
    #[error("{kind}: value {value} is not a finite number")]
    NotFinite { kind: &'static str, value: f64 },
}

/// One observation. Build it with [`Sample::new`], which checks the labels against the
/// kind's schema (koordlet's `GenerateSample`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    key: SeriesKey,
    /// Unix milliseconds.
    ts_ms: i64,
    value: f64,
}

impl Sample {
    pub(crate) fn new(
        kind: MetricKind,
        labels: &[(&str, &str)],
        ts_ms: i64,
        value: f64,
    ) -> Result<Sample, SampleError> {
        Sample::check_finite(kind, value)?;
        if let Some((name, _)) = labels
            .iter()
            .find(|(name, _)| !kind.label_names().contains(name))
        {
            return Err(SampleError::UnknownLabel {
                kind: kind.name(),
                label: (*name).to_string(),
            });
        }
        let mut ordered = Vec::with_capacity(kind.label_names().len());
        for want in kind.label_names() {
            let Some((_, v)) = labels.iter().find(|(name, _)| name == want) else {
                return Err(SampleError::MissingLabel {
                    kind: kind.name(),
                    label: want,
                });
            };
            ordered.push((*want, (*v).to_string()));
        }
        Ok(Sample {
            key: SeriesKey::new(kind, ordered),
            ts_ms,
            value,
        })
    }

    /// A sample of a series whose key a collector keeps from round to round: no
    /// label is checked or copied again.
    pub(crate) fn with_key(key: &SeriesKey, ts_ms: i64, value: f64) -> Result<Sample, SampleError> {
        Sample::check_finite(key.kind, value)?;
        Ok(Sample {
            key: key.clone(),
            ts_ms,
            value,
        })
    }

    /// A point's value must be a number, however its key was made.
    fn check_finite(kind: MetricKind, value: f64) -> Result<(), SampleError> {
        if value.is_finite() {
            return Ok(());
        }
        Err(SampleError::NotFinite {
            kind: kind.name(),
            value,
        })
    }

    #[cfg(test)]
    pub(crate) fn key(&self) -> &SeriesKey {
        &self.key
    }
}

/// How much the cache may hold, and where the head hands points to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheLimits {
    /// How long a point is kept (koordlet's `--tsdb-retention-duration`, 12 h).
    pub retention: Duration,
    /// Points a series keeps in memory at most; the oldest chunk goes past it.
    pub max_points_per_series: usize,
    /// Series kept at most; samples that would open more are dropped.
    pub max_series: usize,
    /// The span of a block (koordlet's `--tsdb-min-block-duration`, 10 min).
    pub block: Duration,
    /// How far behind its series' newest point a point may still come.
    pub out_of_order: Duration,
    /// The directory's size cap (koordlet's `--tsdb-max-bytes`, 100 MiB).
    pub max_disk_bytes: u64,
}

impl CacheLimits {
    /// In memory only: 30 minutes, and series for 250 pods of 4 containers with every
    /// kind.
    pub(crate) const DEFAULT: CacheLimits = CacheLimits {
        retention: Duration::from_secs(30 * 60),
        max_points_per_series: 30 * 60 + 60,
        max_series: 8192,
        block: Duration::from_secs(10 * 60),
        out_of_order: Duration::from_secs(60),
        max_disk_bytes: 100 << 20,
    };

    /// On disk, as koordlet's TSDB: 12 h, 10-minute blocks, 100 MiB. The head holds a
    /// block and the out-of-order minute at most, so its cap is the in-memory one.
    pub(crate) const ON_DISK: CacheLimits = CacheLimits {
        retention: Duration::from_secs(12 * 3600),
        ..CacheLimits::DEFAULT
    };

    fn ms(d: Duration) -> i64 {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
    }
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits::DEFAULT
    }
}

/// The most points one query returns (16 bytes each): a window that would take more is
/// cut there, and its result says so.
pub(crate) const MAX_QUERY_POINTS: usize = 1 << 20;

/// How much one query may read, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueryBounds {
    /// Points read at most; a window holding more is cut there, and its result says so.
    pub max_points: usize,
    /// How long reading may take; past it the result is cut, and says so.
    pub time: Option<Duration>,
}

impl Default for QueryBounds {
    /// The cache's own readers: [`MAX_QUERY_POINTS`], no deadline.
    fn default() -> Self {
        QueryBounds {
            max_points: MAX_QUERY_POINTS,
            time: None,
        }
    }
}

/// The cache's size and traffic, for the debug endpoint and the bench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CacheStats {
    pub series: usize,
    pub head_bytes: usize,
    pub disk_bytes: u64,
    pub blocks: usize,
    /// Bytes written to the log and to blocks since start.
    pub bytes_written: u64,
    pub dropped_samples: u64,
    /// Points before this (unix ms) are read from blocks; `null` in memory only.
    pub persisted_until_ms: Option<i64>,
}

/// The series in memory, and the directory they go to.
struct Head {
    series: HashMap<SeriesKey, Series>,
    /// Every block window before this is on disk, and no point before it is taken.
    persisted_until: i64,
    newest_ms: i64,
    disk: Option<Disk>,
}

/// The time series and the key-value store. Cheap to share behind an `Arc`; every
/// call takes a short lock (a query copies what it needs under it and reads the blocks
/// after).
pub(crate) struct MetricCache {
    limits: CacheLimits,
    head: Mutex<Head>,
    kv: KvStore,
    dropped: AtomicU64,
    /// An outside reader's query is running (see [`MetricCache::outside_slot`]).
    outside: std::sync::atomic::AtomicBool,
}

/// The one outside reader's turn; the next may query once it is dropped.
pub(crate) struct OutsideSlot<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for OutsideSlot<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for MetricCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricCache")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for MetricCache {
    fn default() -> Self {
        MetricCache::new(CacheLimits::DEFAULT)
    }
}

impl MetricCache {
    /// A cache in memory only.
    pub(crate) fn new(limits: CacheLimits) -> MetricCache {
        MetricCache {
            limits,
            head: Mutex::new(Head {
                series: HashMap::new(),
                persisted_until: i64::MIN,
                newest_ms: i64::MIN,
                disk: None,
            }),
            kv: KvStore::default(),
            dropped: AtomicU64::new(0),
            outside: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A cache kept in `dir`: the blocks found there are read by queries, and the log
    /// is replayed, so the points from before a restart are all there.
    pub(crate) fn open(
        dir: &std::path::Path,
        limits: CacheLimits,
    ) -> Result<(MetricCache, disk::Opened), disk::OpenError> {
        let cache = MetricCache::new(limits);
        let rules = cache.rules(i64::MIN);
        let mut series: HashMap<SeriesKey, Series> = HashMap::new();
        let mut newest = i64::MIN;
        let (d, opened) = Disk::open(dir, rules.block_ms, |s| {
            let full = series.len() >= limits.max_series;
            if let Some(entry) = series.get_mut(&s.key) {
                let _ = entry.push(s.ts_ms, s.value, rules);
            } else if !full {
                let mut fresh = Series::default();
                let _ = fresh.push(s.ts_ms, s.value, rules);
                series.insert(s.key, fresh);
            }
            newest = newest.max(s.ts_ms);
        })?;
        {
            let mut head = cache.head.locked();
            head.series = series;
            head.persisted_until = opened.persisted_until;
            head.newest_ms = newest;
            head.disk = Some(d);
            cache.persist_due(&mut head);
        }
        Ok((cache, opened))
    }

    pub(crate) fn limits(&self) -> CacheLimits {
        self.limits
    }

    fn rules(&self, floor_ms: i64) -> SeriesRules {
        SeriesRules {
            floor_ms,
            out_of_order_ms: CacheLimits::ms(self.limits.out_of_order),
            block_ms: CacheLimits::ms(self.limits.block),
            max_points: self.limits.max_points_per_series,
        }
    }

    /// Stores a batch (one collector round), logging it first when the cache is on disk.
    /// A point more than the out-of-order window older than its series' newest, one
    /// already on disk, a duplicate, or one that would open a series past the limit is
    /// dropped and counted. Returns how many were stored.
    pub(crate) fn append(&self, samples: impl IntoIterator<Item = Sample>) -> usize {
        let samples: Vec<Sample> = samples.into_iter().collect();
        self.append_slice(&samples)
    }

    /// [`MetricCache::append`] of borrowed samples: the advisor keeps its round's
    /// vector (and its capacity) from one round to the next.
    pub(crate) fn append_slice(&self, samples: &[Sample]) -> usize {
        let retention_ms = CacheLimits::ms(self.limits.retention);
        let mut head = self.head.locked();
        let rules = self.rules(head.persisted_until);
        let mut taken: Vec<&Sample> = Vec::with_capacity(samples.len());
        let mut dropped = 0u64;
        for s in samples {
            // One lookup for a known series (nearly every sample), an insert for a new one.
            let full = head.series.len() >= self.limits.max_series;
            let series = match head.series.get_mut(&s.key) {
                Some(series) => series,
                None if full => {
                    dropped += 1;
                    continue;
                }
                None => head.series.entry(s.key.clone()).or_default(),
            };
            match series.push(s.ts_ms, s.value, rules) {
                Ok(()) => {
                    series.drop_before(s.ts_ms.saturating_sub(retention_ms));
                    taken.push(s);
                }
                Err(_) => dropped += 1,
            }
        }
        let stored = taken.len();
        if let Some(newest) = taken.iter().map(|s| s.ts_ms).max() {
            head.newest_ms = head.newest_ms.max(newest);
        }
        if let Some(disk) = head.disk.as_mut() {
            disk.log(&taken);
        }
        drop(taken);
        self.persist_due(&mut head);
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
        stored
    }

    /// Moves every block window that is past the out-of-order window of the newest
    /// point to disk, and forgets the series left empty (a deleted pod's, once its
    /// last points are in a block).
    fn persist_due(&self, head: &mut Head) {
        let rules = self.rules(head.persisted_until);
        let cut = series::window_start(
            head.newest_ms.saturating_sub(rules.out_of_order_ms),
            rules.block_ms,
        );
        if head.disk.is_none() || head.newest_ms == i64::MIN || cut <= head.persisted_until {
            return;
        }
        let mut finished = Vec::new();
        for (key, s) in &mut head.series {
            let chunks = s.take_before(cut, rules.block_ms);
            if !chunks.is_empty() {
                finished.push((key.clone(), chunks));
            }
        }
        finished.sort_by(|a, b| a.0.cmp(&b.0));
        head.series.retain(|_, s| !s.is_empty());
        head.persisted_until = cut;
        if let Some(disk) = head.disk.as_mut() {
            let lost = disk.persist(cut, finished);
            self.dropped.fetch_add(lost as u64, Ordering::Relaxed);
        }
    }

    /// Every point in `[start_ms, end_ms]` of every series of `kind` whose labels include
    /// all of `labels` (koordlet's equality matchers), as one list: the blocks' points,
    /// then the head's. At most [`MAX_QUERY_POINTS`].
    pub(crate) fn query(
        &self,
        kind: MetricKind,
        labels: &[(&str, &str)],
        start_ms: i64,
        end_ms: i64,
    ) -> AggregateResult {
        self.query_within(kind, labels, start_ms, end_ms, QueryBounds::default())
    }

    /// [`MetricCache::query`] within `bounds`. The lock is held only to copy what the
    /// query needs of the head (at most `bounds.max_points` points) and to name the
    /// blocks; the blocks are read and the copies decoded after it is let go, so the
    /// advisor's append never waits for a disk read or a long decode.
    pub(crate) fn query_within(
        &self,
        kind: MetricKind,
        labels: &[(&str, &str)],
        start_ms: i64,
        end_ms: i64,
        bounds: QueryBounds,
    ) -> AggregateResult {
        let deadline = bounds.time.map(|t| std::time::Instant::now() + t);
        let want = block::Want {
            kind,
            labels,
            start_ms,
            end_ms,
            limit: bounds.max_points,
            deadline,
        };
        let mut copies: Vec<series::Copied> = Vec::new();
        let mut copy_cut = None;
        let blocks = {
            let head = self.head.locked();
            let mut budget = bounds.max_points;
            for (_, s) in head.series.iter().filter(|(k, _)| want.matches(k)) {
                let copy = (budget > 0).then(|| s.copy_range(start_ms, end_ms, &mut budget));
                match copy {
                    Some(c) if !c.cut => copies.push(c),
                    partial => {
                        copies.extend(partial);
                        copy_cut = Some(Cut::Points);
                        break;
                    }
                }
            }
            head.disk
                .as_ref()
                .filter(|_| start_ms < head.persisted_until)
                .map(|d| (d.blocks_in(start_ms, end_ms), head.persisted_until - 1))
        };
        // The lock is let go: what follows reads files and decodes copies.
        let mut points = Vec::new();
        let mut cut = blocks.and_then(|(blocks, last_persisted)| {
            let in_blocks = block::Want {
                end_ms: end_ms.min(last_persisted),
                ..want
            };
            blocks.read_into(&in_blocks, &mut points)
        });
        for copy in &copies {
            if cut.is_some() {
                break;
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                cut = Some(Cut::Deadline);
            } else if !copy.range_into(start_ms, end_ms, &mut points, bounds.max_points) {
                cut = Some(Cut::Points);
            }
        }
        AggregateResult::new(points).cut_short(cut.or(copy_cut))
    }

    /// A turn for a reader from outside the node (the debug endpoint): one at a time,
    /// so clients cannot run many bounded queries at once. None while one runs.
    pub(crate) fn outside_slot(&self) -> Option<OutsideSlot<'_>> {
        self.outside
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| OutsideSlot(&self.outside))
    }

    /// The label sets of `kind`'s series in memory (for callers that group, e.g. per pod).
    pub(crate) fn series_of(&self, kind: MetricKind) -> Vec<SeriesKey> {
        let head = self.head.locked();
        let mut keys: Vec<SeriesKey> = head
            .series
            .keys()
            .filter(|k| k.kind == kind)
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Drops what is past the retention before `now_ms`: points and emptied series in
    /// memory, blocks on disk (and the oldest blocks while the directory is over its
    /// cap). Returns how many series went.
    pub(crate) fn gc(&self, now_ms: i64) -> usize {
        let cutoff = now_ms.saturating_sub(CacheLimits::ms(self.limits.retention));
        let mut head = self.head.locked();
        let before = head.series.len();
        head.series.retain(|_, s| {
            s.drop_before(cutoff);
            !s.is_empty()
        });
        let gone = before - head.series.len();
        if let Some(disk) = head.disk.as_mut() {
            disk.enforce_limits(cutoff, self.limits.max_disk_bytes);
        }
        gone
    }

    /// Series held in memory now.
    pub(crate) fn series_count(&self) -> usize {
        self.head.locked().series.len()
    }

    /// Samples dropped so far (series limit, out of order, duplicates, a block that
    /// could not be written).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The memory the head takes now: its buffers and keys. An estimate of the heap,
    /// without the allocator's own overhead.
    pub(crate) fn approx_bytes(&self) -> usize {
        approx_head_bytes(&self.head.locked())
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let head = self.head.locked();
        let disk = head.disk.as_ref();
        CacheStats {
            series: head.series.len(),
            head_bytes: approx_head_bytes(&head),
            disk_bytes: disk.map_or(0, Disk::disk_bytes),
            blocks: disk.map_or(0, Disk::blocks),
            bytes_written: disk.map_or(0, |d| d.bytes_written + d.log_bytes_written()),
            dropped_samples: self.dropped(),
            persisted_until_ms: disk.map(|_| head.persisted_until),
        }
    }

    /// The key-value store.
    pub(crate) fn kv(&self) -> &KvStore {
        &self.kv
    }
}

fn approx_head_bytes(head: &Head) -> usize {
    let per_entry = std::mem::size_of::<(SeriesKey, Series)>() + 8;
    head.series
        .iter()
        .map(|(k, s)| {
            per_entry
                + s.heap_bytes()
                + k.labels.capacity() * std::mem::size_of::<(&str, String)>()
                + k.labels.iter().map(|(_, v)| v.capacity()).sum::<usize>()
        })
        .sum::<usize>()
        + head.series.capacity() * std::mem::size_of::<u64>()
}

/// Now, in unix milliseconds (the cache's timestamps).
pub(crate) fn now_ms() -> i64 {
    unix_ms(std::time::SystemTime::now())
}

/// `t` in unix milliseconds (0 before the epoch): a reading's time as a sample's.
pub(crate) fn unix_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
