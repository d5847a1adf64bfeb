//! Container logs: where they go, their rotation and the legacy symlinks.

use std::path::PathBuf;

use super::settings::{
    InvalidValue,
    Kind::{Duration, Int, Text},
    Setting, absolute, parse_duration, parse_int, row,
};

/// Container logs' directory and rotation (read by `agent/runtime.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ContainerLogOptions {
    pub(crate) pod_logs_dir: PathBuf,
    /// `containerLogMaxSize` in bytes; negative turns log rotation off (as in kubelet).
    pub(crate) max_size: i64,
    /// `containerLogMaxFiles`: the current log plus rotated ones, at least 2.
    pub(crate) max_files: usize,
    /// `containerLogMaxWorkers`: containers rotated at once.
    pub(crate) max_workers: usize,
    /// `containerLogMonitorInterval`: how often log sizes are checked (at least 3 s).
    pub(crate) monitor_interval: std::time::Duration,
    /// `--container-log-symlink-dir` (oxlet only): where the legacy
    /// `<pod>_<ns>_<container>-<id>.log` symlinks go; kubelet hardcodes /var/log/containers.
    pub(crate) symlink_dir: PathBuf,
}

impl ContainerLogOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ContainerLogOptions {
            pod_logs_dir: PathBuf::new(),
            max_size: 0,
            max_files: 0,
            max_workers: 0,
            monitor_interval: std::time::Duration::ZERO,
            symlink_dir: PathBuf::new(),
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ContainerLogOptions {
    fn default() -> Self {
        super::Options::default().logs
    }
}

/// Where container logs go.
pub(super) const POD_LOGS_DIR: &[Setting] = &[row(
    "pod-logs-dir",
    Some("podLogsDir"),
    Text,
    "/var/log/pods",
    "PATH",
    "Directory for container logs",
    |o, i| absolute(i.text).map(|p| o.logs.pod_logs_dir = p),
)];

/// Container log rotation (kubelet's container log manager) and the legacy log symlinks.
pub(super) const ROTATION: &[Setting] = &[
    row(
        "container-log-max-size",
        Some("containerLogMaxSize"),
        Text,
        "10Mi",
        "QUANTITY",
        "Size a container's log file reaches before it is rotated (negative: no rotation)",
        |o, i| log_max_size(i.text).map(|n| o.logs.max_size = n),
    ),
    row(
        "container-log-max-files",
        Some("containerLogMaxFiles"),
        Int,
        "5",
        "N",
        "Most log files kept per container, the current one included (at least 2)",
        |o, i| {
            Some(parse_int(i.text)?)
                .filter(|n| *n > 1)
                .and_then(|n| usize::try_from(n).ok())
                .map(|n| o.logs.max_files = n)
                .ok_or_else(|| "must be greater than 1".into())
        },
    ),
    row(
        "container-log-max-workers",
        Some("containerLogMaxWorkers"),
        Int,
        "1",
        "N",
        "Containers whose logs are rotated at once",
        |o, i| {
            Some(parse_int(i.text)?)
                .filter(|n| *n >= 1)
                .and_then(|n| usize::try_from(n).ok())
                .map(|n| o.logs.max_workers = n)
                .ok_or_else(|| "must be greater than or equal to 1".into())
        },
    ),
    row(
        "container-log-monitor-interval",
        Some("containerLogMonitorInterval"),
        Duration,
        "10s",
        "DURATION",
        "How often container log sizes are checked for rotation (at least 3s)",
        |o, i| {
            parse_duration(i.text)?
                .to_std()
                .filter(|d| d.as_secs() >= 3)
                .map(|d| o.logs.monitor_interval = d)
                .ok_or_else(|| {
                    "must be a positive time duration greater than or equal to 3s".into()
                })
        },
    ),
    row(
        "container-log-symlink-dir",
        None,
        Text,
        "/var/log/containers",
        "PATH",
        "Directory of the legacy <pod>_<namespace>_<container>-<id>.log symlinks to container \
         logs (oxlet only: kubelet hardcodes /var/log/containers)",
        |o, i| absolute(i.text).map(|p| o.logs.symlink_dir = p),
    ),
];

/// kubelet's `parseMaxSize`: a quantity in bytes; a negative one turns rotation off.
fn log_max_size(text: &str) -> Result<i64, InvalidValue> {
    crate::quantity::bytes(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        text.to_string(),
    ))
    .map_err(|e| e.to_string().into())
}
