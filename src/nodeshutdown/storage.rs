//! kubelet's `graceful_node_shutdown_state` in the root directory: the last shutdown's
//! start and end times, written when it starts and ends and read at start, so the
//! `kubelet_graceful_shutdown_*_time_seconds` gauges say them after the node is back.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

/// kubelet's `localStorageStateFile`.
pub(crate) const STATE_FILE: &str = "graceful_node_shutdown_state";
/// Go's zero `time.Time` as `encoding/json` writes it.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";
/// The file is two timestamps; reads stop here.
const MAX_STATE_BYTES: u64 = 4096;

/// The file's JSON: kubelet's `state` struct.
#[derive(Debug, Serialize, Deserialize)]
struct StateJson {
    #[serde(rename = "startTime")]
    start_time: String,
    #[serde(rename = "endTime")]
    end_time: String,
}

/// A time as Go's JSON writes it (RFC 3339 with nanoseconds, UTC); None is Go's zero.
fn go_time(t: Option<SystemTime>) -> String {
    t.and_then(|t| jiff::Timestamp::try_from(t).ok())
        .map_or_else(|| GO_ZERO_TIME.to_string(), |ts| ts.to_string())
}

/// Unix seconds of a Go JSON time; None for Go's zero or a malformed one.
fn unix_seconds(text: &str) -> Option<i64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    (ts.as_second() > 0).then_some(ts.as_second())
}

/// The last shutdown's times: where they are kept, and the gauges they set.
#[derive(Debug, Clone)]
pub(crate) struct ShutdownTimes {
    path: PathBuf,
}

impl ShutdownTimes {
    /// The file in `root_dir`.
    pub(crate) fn new(root_dir: &Path) -> ShutdownTimes {
        ShutdownTimes {
            path: root_dir.join(STATE_FILE),
        }
    }

    /// kubelet's start: the gauges from the file, if a shutdown was recorded.
    pub(crate) fn restore(&self) {
        let Some((start, end)) = self.load() else {
            return;
        };
        let k = crate::metrics::kubelet();
        if let Some(s) = start {
            k.graceful_shutdown_start.set(s as f64);
        }
        if let Some(e) = end {
            k.graceful_shutdown_end.set(e as f64);
        }
        info!(path = %self.path.display(), start = start.unwrap_or_default(), end = end.unwrap_or_default(), "node shutdown manager: the last graceful shutdown's times, read back for the metrics");
    }

    fn load(&self) -> Option<(Option<i64>, Option<i64>)> {
        let mut text = String::new();
        let file = std::fs::File::open(&self.path).ok()?;
        file.take(MAX_STATE_BYTES).read_to_string(&mut text).ok()?;
        let state: StateJson = serde_json::from_str(&text)
            .inspect_err(|e| warn!(path = %self.path.display(), error = %e, "node shutdown manager: unreadable shutdown state, ignored"))
            .ok()?;
        Some((
            unix_seconds(&state.start_time),
            unix_seconds(&state.end_time),
        ))
    }

    /// A shutdown started (`end` None) or ended: the gauges (whole seconds, as
    /// kubelet's `Unix()`) and the file.
    pub(crate) fn record(&self, start: SystemTime, end: Option<SystemTime>) {
        let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let k = crate::metrics::kubelet();
        match end {
            None => k.graceful_shutdown_start.set(secs(start) as f64),
            Some(e) => k.graceful_shutdown_end.set(secs(e) as f64),
        }
        let state = StateJson {
            start_time: go_time(Some(start)),
            end_time: go_time(end),
        };
        if let Err(e) = self.store(&state) {
            warn!(path = %self.path.display(), error = %e, "node shutdown manager: cannot write the shutdown state; the times will not survive a restart");
        }
    }

    /// Written whole (a temporary file renamed over it), as kubelet's atomic write,
    /// through the one helper for oxlet's state files.
    fn store(&self, state: &StateJson) -> std::io::Result<()> {
        let data = serde_json::to_vec(state).map_err(std::io::Error::other)?;
        crate::private_file::write_atomically(&self.path, &data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_round_trip_through_kubelets_json() {
        let dir = tempfile::tempdir().unwrap();
        let times = ShutdownTimes::new(dir.path());
        let start = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        times.record(start, None);
        let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
        assert_eq!(
            text,
            r#"{"startTime":"2023-11-14T22:13:20.25Z","endTime":"0001-01-01T00:00:00Z"}"#
        );
        assert_eq!(times.load(), Some((Some(1_700_000_000), None)));
        times.record(start, Some(start + Duration::from_secs(30)));
        assert_eq!(
            times.load(),
            Some((Some(1_700_000_000), Some(1_700_000_030)))
        );
    }
}
