//! kubelet's switches for the secure port's debugging endpoints
//! (`enableDebuggingHandlers`, `enableSystemLogHandler`, `enableDebugFlagsHandler`).
//! The server builds its routes from them as kubelet's `NewServer` does.

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
