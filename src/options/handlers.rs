//! kubelet's switches for the secure port's debugging endpoints
//! (`enableDebuggingHandlers`, `enableSystemLogHandler`, `enableDebugFlagsHandler`).
//! The server builds its routes from them as kubelet's `NewServer` does.

use super::settings::{Kind, Setting, parse_bool, row};

/// Which of kubelet's debugging endpoints the secure port serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DebugHandlers {
    /// `enableDebuggingHandlers`: exec, attach, port-forward, run, `/containerLogs`,
    /// `/logs/`, `/runningpods/`, `/configz`, `/debug/flags/v` and `/checkpoint`.
    /// Off, kubelet answers the first seven (and `/debug/pprof/`) with 405 and
    /// does not serve the others at all.
    pub debugging: bool,
    /// `enableSystemLogHandler`: `/logs/`, only while `debugging` is on.
    pub system_log: bool,
    /// `enableDebugFlagsHandler`: `PUT /debug/flags/v`, only while `debugging` is on.
    pub debug_flags: bool,
    /// `enableProfilingHandler`: kubelet's `/debug/pprof/` (oxlet's CPU profile and cmdline)
    /// (404); off, it answers kubelet's 405, only while `debugging` is on.
    pub profiling: bool,
}

impl Default for DebugHandlers {
    /// kubelet's defaults: every handler on.
    fn default() -> Self {
        DebugHandlers {
            debugging: true,
            system_log: true,
            debug_flags: true,
            profiling: true,
        }
    }
}

/// kubelet's switches for the debugging endpoints (kubelet's NewServer).
pub(super) const DEBUGGING: &[Setting] = &[
    row(
        "enable-debugging-handlers",
        Some("enableDebuggingHandlers"),
        Kind::Bool,
        "true",
        "true|false",
        "Serve exec, attach, port-forward, run, /containerLogs, /logs/, /runningpods/, /configz, \
         /debug/flags/v and /checkpoint on the secure port (false: the first seven answer 405 \
         \"Debug endpoints are disabled.\", the others 404)",
        |o, i| parse_bool(i.text).map(|b| o.handlers.debugging = b),
    ),
    row(
        "",
        Some("enableSystemLogHandler"),
        Kind::Bool,
        "true",
        "true|false",
        "Serve the node's /var/log at /logs/ (false: 405 \"logs endpoint is disabled.\"); only \
         with enableDebuggingHandlers; config file only",
        |o, i| parse_bool(i.text).map(|b| o.handlers.system_log = b),
    ),
];

/// The profiling and `/debug/flags/v` switches.
pub(super) const PROFILING_AND_FLAGS: &[Setting] = &[
    row(
        "",
        Some("enableProfilingHandler"),
        Kind::Bool,
        "true",
        "true|false",
        "kubelet's /debug/pprof/: oxlet serves the CPU profile (profile?seconds=N, pprof's \
         protobuf) and cmdline; false answers 405 \"profiling endpoint is disabled.\" as kubelet; \
         only with enableDebuggingHandlers; config file only",
        |o, i| parse_bool(i.text).map(|b| o.handlers.profiling = b),
    ),
    row(
        "",
        Some("enableDebugFlagsHandler"),
        Kind::Bool,
        "true",
        "true|false",
        "Serve PUT /debug/flags/v, which changes -v (false: 405 \"flags endpoint is disabled.\"); \
         only with enableDebuggingHandlers; config file only",
        |o, i| parse_bool(i.text).map(|b| o.handlers.debug_flags = b),
    ),
];
