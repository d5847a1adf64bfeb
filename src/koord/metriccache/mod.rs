//! The metric cache: koordlet's `metriccache`, kept in memory. It holds the metric
//! advisor's samples as time series (one per kind and label set, each with its own
//! retention) and a small key-value store for facts that are not series (CPU topology,
//! the last prediction round). The prediction model and the QoS manager read it; the
//! advisor is its only writer.
//!
//! koordlet puts the series in an embedded Prometheus TSDB on disk; oxlet needs only
//! the last half hour, so a ring of points per series is enough, and its memory is
//! bounded by [`CacheLimits`]: points per series and the number of series. A sample
//! that would open a series past the limit is dropped and counted, never stored.

mod aggregate;
mod kv;
mod series;

#[cfg(test)]
mod tests;

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) use aggregate::{AggregateResult, Aggregation};
pub(crate) use kv::KvStore;
use series::Series;

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
}

impl MetricKind {
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
        }
    }

    /// The labels every sample of this kind must carry (koordlet's label schema).
    pub(crate) fn label_names(self) -> &'static [&'static str] {
        match self {
            MetricKind::NodeCpuUsage
            | MetricKind::NodeMemoryUsage
            | MetricKind::SysCpuUsage
            | MetricKind::SysMemoryUsage => &[],
            MetricKind::PodCpuUsage
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
pub(super) mod label {
    pub(crate) const POD_UID: &str = "pod_uid";
    pub(crate) const CONTAINER_ID: &str = "container_id";
    /// `cpu`, `mem` or `io`.
    pub(crate) const PSI_RESOURCE: &str = "psi_resource";
    /// The averaging window in seconds: `10`.
    pub(crate) const PSI_PRECISION: &str = "psi_precision";
    /// `some` or `full`.
    pub(crate) const PSI_DEGREE: &str = "psi_degree";
}

/// A series' identity: its kind and its label values, in the kind's label order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SeriesKey {
    pub kind: MetricKind,
    pub labels: Vec<(&'static str, String)>,
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
        if !value.is_finite() {
            return Err(SampleError::NotFinite {
                kind: kind.name(),
                value,
            });
        }
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
            key: SeriesKey {
                kind,
                labels: ordered,
            },
            ts_ms,
            value,
        })
    }

    #[cfg(test)]
    pub(crate) fn key(&self) -> &SeriesKey {
        &self.key
    }
}

/// How much the cache may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheLimits {
    /// How long a point is kept (koordlet: 12 h on disk; oxlet: 30 min in memory).
    pub retention: Duration,
    /// Points kept per series at most: retention at the finest collection interval.
    pub max_points_per_series: usize,
    /// Series kept at most; samples that would open more are dropped.
    pub max_series: usize,
}

impl CacheLimits {
    /// 30 minutes at 1 s resolution, and series for 250 pods of 4 containers with
    /// every kind. 110 pods of two containers take about 16 MiB (see the budget test).
    pub(crate) const DEFAULT: CacheLimits = CacheLimits {
        retention: Duration::from_secs(30 * 60),
        max_points_per_series: 30 * 60 + 60,
        max_series: 8192,
    };

    /// The most memory the points can take, in bytes.
    pub(crate) fn max_point_bytes(&self) -> usize {
        self.max_series * self.max_points_per_series * series::POINT_BYTES
    }
}

impl Default for CacheLimits {
    fn default() -> Self {
        CacheLimits::DEFAULT
    }
}

/// The time series and the key-value store. Cheap to share behind an `Arc`; every
/// call takes a short lock.
#[derive(Debug)]
pub(crate) struct MetricCache {
    limits: CacheLimits,
    series: Mutex<HashMap<SeriesKey, Series>>,
    kv: KvStore,
    dropped: AtomicU64,
}

impl Default for MetricCache {
    fn default() -> Self {
        MetricCache::new(CacheLimits::DEFAULT)
    }
}

impl MetricCache {
    pub(crate) fn new(limits: CacheLimits) -> MetricCache {
        MetricCache {
            limits,
            series: Mutex::new(HashMap::new()),
            kv: KvStore::default(),
            dropped: AtomicU64::new(0),
        }
    }

    pub(crate) fn limits(&self) -> CacheLimits {
        self.limits
    }

    /// Stores a batch (one collector round). Points older than the retention, counted
    /// from each series' newest point, are dropped; a point older than its series' newest
    /// is dropped too (koordlet's TSDB allows 1 min out of order; the advisor never
    /// writes out of order, so oxlet does not). Returns how many were stored.
    pub(crate) fn append(&self, samples: impl IntoIterator<Item = Sample>) -> usize {
        let retention_ms = i64::try_from(self.limits.retention.as_millis()).unwrap_or(i64::MAX);
        let mut stored = 0;
        let mut map = self.series.locked();
        for s in samples {
            // One lookup for a known series (nearly every sample), an insert for a new one.
            let full = map.len() >= self.limits.max_series;
            let series = match map.get_mut(&s.key) {
                Some(series) => series,
                None if full => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                None => map
                    .entry(s.key)
                    .or_insert_with(|| Series::new(self.limits.max_points_per_series)),
            };
            if series.push(s.ts_ms, s.value, retention_ms) {
                stored += 1;
            } else {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        stored
    }

    /// Every point in `[start_ms, end_ms]` of every series of `kind` whose labels include
    /// all of `labels` (koordlet's equality matchers), as one list.
    pub(crate) fn query(
        &self,
        kind: MetricKind,
        labels: &[(&str, &str)],
        start_ms: i64,
        end_ms: i64,
    ) -> AggregateResult {
        let map = self.series.locked();
        let mut points = Vec::new();
        for (key, series) in map.iter() {
            if key.kind != kind {
                continue;
            }
            let matches = labels
                .iter()
                .all(|(n, v)| key.labels.iter().any(|(kn, kv)| kn == n && kv == v));
            if matches {
                points.extend(series.range(start_ms, end_ms));
            }
        }
        AggregateResult::new(points)
    }

    /// The label sets of `kind`'s series (for callers that group, e.g. per pod).
    pub(crate) fn series_of(&self, kind: MetricKind) -> Vec<SeriesKey> {
        let map = self.series.locked();
        let mut keys: Vec<SeriesKey> = map.keys().filter(|k| k.kind == kind).cloned().collect();
        keys.sort();
        keys
    }

    /// Drops the points older than the retention before `now_ms`, and the series left
    /// empty (a deleted pod's series go once their last point ages out).
    pub(crate) fn gc(&self, now_ms: i64) -> usize {
        let retention_ms = i64::try_from(self.limits.retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms.saturating_sub(retention_ms);
        let mut map = self.series.locked();
        let before = map.len();
        map.retain(|_, s| {
            s.drop_before(cutoff);
            !s.is_empty()
        });
        before - map.len()
    }

    /// Series held now.
    pub(crate) fn series_count(&self) -> usize {
        self.series.locked().len()
    }

    /// Samples dropped so far (series limit, or out of order).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The memory the series take now: their point buffers (allocated capacity) and
    /// their keys. An estimate of the heap, without the allocator's own overhead.
    pub(crate) fn approx_bytes(&self) -> usize {
        let map = self.series.locked();
        let per_entry = std::mem::size_of::<(SeriesKey, Series)>() + 8;
        map.iter()
            .map(|(k, s)| {
                per_entry
                    + s.heap_bytes()
                    + k.labels.capacity() * std::mem::size_of::<(&str, String)>()
                    + k.labels.iter().map(|(_, v)| v.capacity()).sum::<usize>()
            })
            .sum::<usize>()
            + map.capacity() * std::mem::size_of::<u64>()
    }

    /// The key-value store.
    pub(crate) fn kv(&self) -> &KvStore {
        &self.kv
    }
}

/// Now, in unix milliseconds (the cache's timestamps).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
