//! A read-only look into the metric cache for tests and operators:
//! `/debug/koord/metrics?kind=container_cpu_usage&container_id=…&agg=last&window=5s`.
//! One aggregation over one window, bounded to the cache's retention, and in what it
//! reads: at most [`DEBUG_BOUNDS`]' points and time, one query at a time. A query cut
//! by a bound answers what it read and says which bound cut it (`truncated_by`).

use std::time::Duration;

use crate::metriccache::{Aggregation, MetricCache, MetricKind, QueryBounds, label, now_ms};

/// The longest window asked for: the on-disk cache's retention.
const MAX_WINDOW: Duration = Duration::from_secs(12 * 3600);

/// What one debug query may read: 200 000 points (3 MiB, a day of one series at 1 s
/// and a few ms to decode) within 1 s. The advisor's own readers keep the cache's
/// larger bound; this one is for a look by hand.
pub(crate) const DEBUG_BOUNDS: QueryBounds = QueryBounds {
    max_points: 200_000,
    time: Some(Duration::from_secs(1)),
};

/// The query string.
#[derive(Debug, Clone, Default)]
pub(crate) struct DebugQuery {
    pub kind: String,
    pub pod_uid: Option<String>,
    pub container_id: Option<String>,
    pub psi_resource: Option<String>,
    pub psi_degree: Option<String>,
    pub be_resource: Option<String>,
    pub be_allocation: Option<String>,
    pub host_app_name: Option<String>,
    /// avg, p50, p90, p95, p99, last, count (default last).
    pub agg: Option<String>,
    /// A duration such as `5s` or `1m` (default 10s).
    pub window: Option<String>,
}

/// The query keys understood; any other is refused, so a typo (`pod=`) is not
/// silently answered with the aggregate over every series.
const KEYS: [&str; 10] = [
    "kind",
    "pod_uid",
    "container_id",
    "psi_resource",
    "psi_degree",
    "agg",
    "window",
    "be_resource",
    "be_allocation",
    "host_app_name",
];

/// The aggregations, by their query names.
const AGGS: [&str; 7] = ["avg", "p50", "p90", "p95", "p99", "last", "count"];

/// A query that cannot be answered as asked, naming the parameter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum DebugQueryError {
    #[error("{0:?} is not a query parameter; valid: {valid}", valid = KEYS.join(", "))]
    UnknownKey(String),
    #[error("kind: {0:?} is not a metric kind; valid: {valid}", valid = kind_names())]
    Kind(String),
    #[error("agg: {0:?} is not one of {valid}", valid = AGGS.join(", "))]
    Agg(String),
    #[error("window: {0:?} is not a duration of at most 12h (e.g. 5s, 1m, 2h)")]
    Window(String),
    #[error("another /debug/koord/metrics query is running; one runs at a time, try again")]
    Busy,
}

fn kind_names() -> String {
    MetricKind::ALL.map(MetricKind::name).join(", ")
}

impl DebugQuery {
    /// The query from its decoded `key=value` pairs; an unknown key is an error
    /// naming it. A repeated key keeps its first value (Go's `Query().Get`).
    pub(crate) fn from_pairs(pairs: &[(String, String)]) -> Result<DebugQuery, DebugQueryError> {
        let mut q = DebugQuery::default();
        let mut seen = [false; KEYS.len()];
        for (k, v) in pairs {
            let i = KEYS
                .iter()
                .position(|known| known == k)
                .ok_or_else(|| DebugQueryError::UnknownKey(k.clone()))?;
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            let v = v.clone();
            match i {
                0 => q.kind = v,
                1 => q.pod_uid = Some(v),
                2 => q.container_id = Some(v),
                3 => q.psi_resource = Some(v),
                4 => q.psi_degree = Some(v),
                5 => q.agg = Some(v),
                6 => q.window = Some(v),
                7 => q.be_resource = Some(v),
                8 => q.be_allocation = Some(v),
                _ => q.host_app_name = Some(v),
            }
        }
        Ok(q)
    }
}

fn parse_agg(s: &str) -> Option<Aggregation> {
    Some(match s {
        "avg" => Aggregation::Avg,
        "p50" => Aggregation::P50,
        "p90" => Aggregation::P90,
        "p95" => Aggregation::P95,
        "p99" => Aggregation::P99,
        "last" => Aggregation::Last,
        "count" => Aggregation::Count,
        _ => return None,
    })
}

fn parse_window(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        _ => return None,
    };
    (d <= MAX_WINDOW).then_some(d)
}

/// Answers `q` from `cache`: `{kind, labels, agg, window_ms, count, value}` with
/// `value` null when the window holds no point.
pub(crate) fn debug_query(
    cache: &MetricCache,
    q: &DebugQuery,
) -> Result<serde_json::Value, DebugQueryError> {
    let kind = MetricKind::ALL
        .into_iter()
        .find(|k| k.name() == q.kind)
        .ok_or_else(|| DebugQueryError::Kind(q.kind.clone()))?;
    let agg_name = q.agg.as_deref().unwrap_or("last");
    let agg = parse_agg(agg_name).ok_or_else(|| DebugQueryError::Agg(agg_name.into()))?;
    let window_text = q.window.as_deref().unwrap_or("10s");
    let window =
        parse_window(window_text).ok_or_else(|| DebugQueryError::Window(window_text.into()))?;
    let labels: Vec<(&str, &str)> = [
        (label::POD_UID, q.pod_uid.as_deref()),
        (label::CONTAINER_ID, q.container_id.as_deref()),
        (label::PSI_RESOURCE, q.psi_resource.as_deref()),
        (label::PSI_DEGREE, q.psi_degree.as_deref()),
        (label::BE_RESOURCE, q.be_resource.as_deref()),
        (label::BE_ALLOCATION, q.be_allocation.as_deref()),
        (label::HOST_APP_NAME, q.host_app_name.as_deref()),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    let end = now_ms();
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    // One at a time: its reads run on the caller's thread.
    let running = cache.outside_slot().ok_or(DebugQueryError::Busy)?;
    let result = cache.query_within(kind, &labels, end - window_ms, end, DEBUG_BOUNDS);
    drop(running);
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
        .collect();
    let stats = cache.stats();
    Ok(serde_json::json!({
        "kind": kind.name(),
        "labels": labels,
        "agg": agg_name,
        "window_ms": window_ms,
        "count": result.count(),
        "time_range_ms": result.time_range_ms(),
        "value": result.value(agg).ok(),
        "series_of_kind": cache.series_of(kind).len(),
        "truncated": result.truncated(),
        "truncated_by": result.cut().map(crate::metriccache::Cut::as_str),
        "max_points": DEBUG_BOUNDS.max_points,
        "deadline_ms": DEBUG_BOUNDS.time.map(|t| t.as_millis()),
        "cache": {
            "series": stats.series,
            "dropped_samples": stats.dropped_samples,
            "approx_bytes": stats.head_bytes,
            "disk_bytes": stats.disk_bytes,
            "blocks": stats.blocks,
            "bytes_written": stats.bytes_written,
            "persisted_until_ms": stats.persisted_until_ms,
            "retention_s": cache.limits().retention.as_secs(),
        },
        "node_info": cache.kv().get::<serde_json::Value>(super::NODE_INFO_KEY),
        "node_cpu_info": cache.kv().get::<serde_json::Value>(super::topology::CPU_INFO_KEY),
        "node_numa_info": cache.kv().get::<serde_json::Value>(super::topology::NUMA_INFO_KEY),
    }))
}
