//! What the node reports and how often: node status, the lease, volume stats.

use super::settings::{
    Kind::{Duration, Int},
    Setting, non_negative_duration, parse_int, positive_duration, row,
};

/// Node status, lease and volume stats periods (read by `agent/node.rs`).
#[derive(Debug, Clone)]
pub(crate) struct StatusOptions {
    /// `nodeStatusUpdateFrequency`; with `nodeLeaseDurationSeconds`, bounds the
    /// heartbeat client's timeout.
    pub(crate) update_frequency: std::time::Duration,
    pub(crate) lease_duration: std::time::Duration,
    /// `nodeStatusReportFrequency`: an unchanged status is still sent this often.
    pub(crate) report_frequency: std::time::Duration,
    /// `volumeStatsAggPeriod`: how often each pod's volumes and logs are measured
    /// (zero: never, as kubelet).
    pub(crate) volume_stats_agg_period: std::time::Duration,
}

impl StatusOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        StatusOptions {
            update_frequency: std::time::Duration::ZERO,
            lease_duration: std::time::Duration::ZERO,
            report_frequency: std::time::Duration::ZERO,
            volume_stats_agg_period: std::time::Duration::ZERO,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for StatusOptions {
    fn default() -> Self {
        super::Options::default().status
    }
}

/// Node status and the lease.
pub(super) const UPDATE_AND_LEASE: &[Setting] = &[
    row(
        "node-status-update-frequency",
        Some("nodeStatusUpdateFrequency"),
        Duration,
        "10s",
        "DURATION",
        "How often node status is computed; also the heartbeat client's timeout (at most the \
         lease duration)",
        |o, i| positive_duration(i.text).map(|d| o.status.update_frequency = d),
    ),
    row(
        "",
        Some("nodeLeaseDurationSeconds"),
        Int,
        "40",
        "SECONDS",
        "Duration of the node lease; caps the heartbeat client's timeout; config file only",
        |o, i| {
            Some(parse_int(i.text)?)
                .filter(|n| (1..=i64::from(i32::MAX)).contains(n))
                .and_then(|n| u64::try_from(n).ok())
                .map(|n| o.status.lease_duration = std::time::Duration::from_secs(n))
                .ok_or_else(|| "must be greater than 0".into())
        },
    ),
];

/// How often an unchanged status is sent.
pub(super) const REPORT: &[Setting] = &[row(
    "",
    Some("nodeStatusReportFrequency"),
    Duration,
    "5m0s",
    "DURATION",
    "How often an unchanged node status is still sent; config file only",
    |o, i| positive_duration(i.text).map(|d| o.status.report_frequency = d),
)];

/// How often volumes and logs are measured.
pub(super) const VOLUME_STATS: &[Setting] = &[row(
    "volume-stats-agg-period",
    Some("volumeStatsAggPeriod"),
    Duration,
    "1m0s",
    "DURATION",
    "How often each pod's volumes and logs are measured for the stats and the local storage \
         limits (0: never)",
    |o, i| non_negative_duration(i.text).map(|d| o.status.volume_stats_agg_period = d),
)];
