//! The koordlet-like QoS side: the NodeSLO file, peak prediction, the metric cache.

use std::path::PathBuf;

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Bool, Duration, Int, Path},
    Setting, int_within, opt_path, parse_bool, positive_duration, row,
};

/// koordlet's settings (read by `agent/koordlet.rs`).
#[derive(Debug, Clone)]
pub(crate) struct KoordletOptions {
    /// `--node-slo-file`: the node QoS manager's file (None = QoS manager off).
    pub(crate) node_slo_file: Option<PathBuf>,
    /// koordlet's peak prediction on (its default) or off, and its
    /// `--prediction-checkpoint-filepath` (None: `<root-dir>/prediction-checkpoints`).
    pub(crate) prediction: bool,
    pub(crate) prediction_checkpoint_dir: Option<PathBuf>,
    /// koordlet's metric cache on disk: `--tsdb-path` (None: `<root-dir>/metric-cache`),
    /// `--tsdb-retention-duration` and `--tsdb-max-bytes`.
    pub(crate) tsdb_path: Option<PathBuf>,
    pub(crate) tsdb_retention: std::time::Duration,
    pub(crate) tsdb_max_bytes: u64,
    /// koordlet's `--enable-pagecache-collector`: memory with page cache recorded too.
    pub(crate) pagecache_collector: bool,
}

impl KoordletOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        KoordletOptions {
            node_slo_file: None,
            prediction: false,
            prediction_checkpoint_dir: None,
            tsdb_path: None,
            tsdb_retention: std::time::Duration::ZERO,
            tsdb_max_bytes: 0,
            pagecache_collector: false,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for KoordletOptions {
    fn default() -> Self {
        super::Options::default().koordlet
    }
}

/// The node QoS manager (koordlet's NodeSLO), peak prediction and the metric cache
/// on disk (koordlet's flags).
pub(super) const KOORDLET: &[Setting] = &[
    row(
        "node-slo-file",
        None,
        Path,
        "",
        "PATH",
        "koordlet NodeSLO spec file, plus strategies: cpuSuppress (default on), memoryEvict, \
         cpuEvict, cpuUsageEvict, cgroupReconcile; read at start; in cluster mode the node's \
         NodeSLO replaces its thresholds",
        set_node_slo_file,
    ),
    row(
        "enable-prediction",
        None,
        Bool,
        "true",
        "true|false",
        "Train koordlet's peak prediction models from the metric cache and serve \
         /stats/predictions",
        |o, i| parse_bool(i.text).map(|b| o.koordlet.prediction = b),
    ),
    row(
        "prediction-checkpoint-filepath",
        None,
        Path,
        "",
        "PATH",
        "Directory of the prediction models' checkpoints (empty: \
         <root-dir>/prediction-checkpoints)",
        |o, i| {
            o.koordlet.prediction_checkpoint_dir = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "tsdb-path",
        None,
        Path,
        "",
        "PATH",
        "Directory of the metric cache's log and blocks (empty: <root-dir>/metric-cache)",
        |o, i| {
            o.koordlet.tsdb_path = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "tsdb-retention-duration",
        None,
        Duration,
        "12h0m0s",
        "DURATION",
        "How long the metric cache keeps points on disk",
        |o, i| positive_duration(i.text).map(|d| o.koordlet.tsdb_retention = d),
    ),
    row(
        "tsdb-max-bytes",
        None,
        Int,
        "104857600",
        "BYTES",
        "The metric cache's size cap on disk; the oldest blocks go past it",
        |o, i| int_within(i.text, 1 << 20, i64::MAX).map(|n| o.koordlet.tsdb_max_bytes = n),
    ),
    row(
        "enable-pagecache-collector",
        None,
        Bool,
        "false",
        "true|false",
        "Record node, pod and container memory with the page cache too (koordlet's pagecache \
         collector)",
        |o, i| parse_bool(i.text).map(|b| o.koordlet.pagecache_collector = b),
    ),
];

/// Checks the file now, so a bad one stops the agent with its field and reason.
fn set_node_slo_file(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.koordlet.node_slo_file = None;
    if i.text.is_empty() {
        return Ok(());
    }
    let path = PathBuf::from(i.text);
    crate::koordapi::load_qos_config(&path).map_err(|e| InvalidValue(e.to_string()))?;
    let (_, errors) =
        crate::koordapi::host_apps_from_file(&path).map_err(|e| InvalidValue(e.to_string()))?;
    if let Some(e) = errors.first() {
        return Err(InvalidValue(format!("{}: {e}", path.display())));
    }
    o.koordlet.node_slo_file = Some(path);
    Ok(())
}
