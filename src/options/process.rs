//! The process itself: its state directory and lock, logging, limits, feature gates,
//! and what start-up reports (the flags in force, settings not implemented, warnings).

use std::path::PathBuf;

use super::settings::{
    InvalidValue,
    Kind::{Bool, Gates, Int, Path, Text},
    MIN_OPEN_FILES, Setting, UNSUPPORTED_LOG_FORMAT, feature_gates, int_within, non_empty,
    opt_path, parse_bool, parse_int, row,
};

/// The process's settings (read by `agent` and `main`).
#[derive(Debug, Clone)]
pub(crate) struct ProcessOptions {
    /// `--config`: the KubeletConfiguration file, if any.
    pub(crate) config_file: Option<PathBuf>,
    /// `--root-dir`: oxlet's state directory.
    pub(crate) root_dir: PathBuf,
    /// klog verbosity.
    pub(crate) verbosity: u8,
    /// `--logging-format` / `logging.format`: klog's text lines or JSON.
    pub(crate) logging_format: crate::logging::LogFormat,
    /// Every flag oxlet implements with the value in force (given, from the config
    /// file, or the default), and `--config`: what `/flagz` lists.
    pub(crate) flag_values: Vec<(String, String)>,
    /// When the options were read: the start of the process, give or take the
    /// parsing (`/statusz`'s "Started").
    pub(crate) started: std::time::SystemTime,
    /// RLIMIT_NOFILE set at start.
    pub(crate) max_open_files: u64,
    /// `--runonce`: start the static pods once, wait for them, then exit.
    pub(crate) runonce: bool,
    /// `--task-cpu-accounting` (oxlet only): CPU time per task on `/debug/tasks`.
    pub(crate) task_cpu_accounting: bool,
    /// `--feature-gates` / `featureGates`, as given (see [`super::Options::evented_pleg`]).
    pub(crate) feature_gates: std::collections::BTreeMap<String, bool>,
    /// kubelet's `--lock-file` (waited for) and `--exit-on-lock-contention`.
    pub(crate) lock_file: Option<PathBuf>,
    pub(crate) exit_on_lock_contention: bool,
    /// Settings kubelet has and oxlet accepts but does not implement yet, one
    /// human-readable line each ("flag --foo", "config field bar"); logged at start.
    pub(crate) unimplemented: Vec<String>,
    /// Other startup warnings, one line each (e.g. config-file keys that are not
    /// KubeletConfiguration fields, which kubelet also only warns about); logged at start.
    pub(crate) warnings: Vec<String>,
}

impl ProcessOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ProcessOptions {
            config_file: None,
            root_dir: PathBuf::new(),
            verbosity: 0,
            logging_format: crate::logging::LogFormat::Text,
            flag_values: Vec::new(),
            started: std::time::SystemTime::now(),
            max_open_files: 0,
            runonce: false,
            task_cpu_accounting: false,
            feature_gates: std::collections::BTreeMap::new(),
            lock_file: None,
            exit_on_lock_contention: false,
            unimplemented: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ProcessOptions {
    fn default() -> Self {
        super::Options::default().process
    }
}

/// The state directory.
pub(super) const ROOT_DIR: &[Setting] = &[row(
    "root-dir",
    None,
    Text,
    "/var/lib/oxlet",
    "PATH",
    "Directory for oxlet state",
    |o, i| non_empty(i.text).map(|p| o.process.root_dir = p),
)];

/// kubelet's lock file.
pub(super) const LOCK: &[Setting] = &[
    row(
        "lock-file",
        None,
        Path,
        "",
        "PATH",
        "A file to hold an exclusive lock on while running, waited for at start (besides the lock \
         oxlet always takes on the root dir)",
        |o, i| {
            o.process.lock_file = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "exit-on-lock-contention",
        None,
        Bool,
        "false",
        "true|false",
        "Exit when another process opens --lock-file",
        |o, i| parse_bool(i.text).map(|b| o.process.exit_on_lock_contention = b),
    ),
];

/// The process's file limit.
pub(super) const OPEN_FILES: &[Setting] = &[row(
    "max-open-files",
    Some("maxOpenFiles"),
    Int,
    "1000000",
    "N",
    "Number of files the oxlet process may open (RLIMIT_NOFILE)",
    |o, i| max_open_files(i.text).map(|n| o.process.max_open_files = n),
)];

/// Logging, run-once and task accounting.
pub(super) const LOGGING_AND_RUN: &[Setting] = &[
    row(
        "v",
        None,
        Int,
        "0",
        "LEVEL",
        "Log verbosity (klog level)",
        |o, i| int_within(i.text, 0, 255).map(|v| o.process.verbosity = v),
    )
    .short('v'),
    row(
        "logging-format",
        Some("logging.format"),
        Text,
        "text",
        "text|json",
        "Log format: text (klog's lines) or json (one JSON object a line)",
        |o, i| {
            crate::logging::LogFormat::parse(i.text)
                .map(|f| o.process.logging_format = f)
                .ok_or_else(|| UNSUPPORTED_LOG_FORMAT.into())
        },
    ),
    row(
        "runonce",
        None,
        Bool,
        "false",
        "true|false",
        "Start the static pods once, wait for them, then exit",
        |o, i| parse_bool(i.text).map(|b| o.process.runonce = b),
    ),
    row(
        "task-cpu-accounting",
        None,
        Bool,
        "false",
        "true|false",
        "Charge each task's CPU time to its name, shown on /debug/tasks (oxlet only; two clock \
         reads per poll)",
        |o, i| parse_bool(i.text).map(|b| o.process.task_cpu_accounting = b),
    ),
];

/// Feature gates.
pub(super) const FEATURE_GATES: &[Setting] = &[row(
    "feature-gates",
    Some("featureGates"),
    Gates,
    "",
    "GATE=true|false,...",
    "Feature gates. oxlet reads EventedPLEG (on unless set false: the evented PLEG runs where \
         the runtime streams container events) and NodeLogQuery (off unless set true, as \
         kubelet's: with enableSystemLogQuery, /logs/?query= reads the journal); any other gate \
         is reported as not implemented",
    |o, i| feature_gates(i.text).map(|g| o.process.feature_gates = g),
)];

fn max_open_files(s: &str) -> Result<u64, InvalidValue> {
    u64::try_from(parse_int(s)?)
        .ok()
        .filter(|&n| n >= MIN_OPEN_FILES)
        .ok_or_else(|| format!("must be at least {MIN_OPEN_FILES}").into())
}
