//! The agent process's own settings: its `oom_score_adj` and open-file limit, the
//! signals it stops on, the start-up summary it logs first, and the task that gives
//! its heap's free pages back.

use std::path::Path;

use tracing::{info, warn};

use crate::logging::STARTUP_TARGET;
use crate::options::Options;

/// kubelet sets its own oom_score_adj to -999; a sandbox without CAP_SYS_RESOURCE
/// cannot, and that must not stop the agent.
pub(super) fn set_own_oom_score_adj() {
    let own = crate::cm::KUBELET_OOM_SCORE_ADJ.to_string();
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", own) {
        warn!(error = %e, "cannot set oom_score_adj to -999; going on");
    }
}

/// The lowest `oom_score_adj` oxlet may give a container: its own, unless it may lower
/// values (CAP_SYS_RESOURCE, checked by the kernel when it set its own to -999).
pub(super) fn own_oom_score_adj() -> i64 {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

/// kubelet's metrics live in process-wide registries
/// (`crate::metrics`); at start only the node name is set, nothing runs on its own.
pub(super) fn set_metrics_node_name(opts: &Options) {
    crate::metrics::set_node_name(&opts.node.name);
}

/// Logs the start-up summary (shown at every verbosity).
pub(super) fn log_summary(opts: &Options) {
    info!(
        target: STARTUP_TARGET,
        node = %opts.node.name,
        staticPodPath = %opts.sources.static_pod_path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_else(|| "(none)".into()),
        rootDir = %opts.process.root_dir.display(),
        podLogsDir = %opts.logs.pod_logs_dir.display(),
        maxPods = opts.pods.max_pods,
        syncFrequency = %crate::duration::format_go_duration(opts.pods.sync_frequency),
        fileCheckFrequency = %crate::duration::format_go_duration(opts.sources.file_check_frequency),
        staticPodURL = %opts.sources.manifest_url.as_deref().map_or("(none)".into(), crate::http_get::redacted_url),
        runonce = opts.process.runonce,
        "starting oxlet {}",
        env!("CARGO_PKG_VERSION")
    );
    for item in &opts.process.unimplemented {
        warn!("{item} is accepted but not implemented by oxlet yet; ignoring it");
    }
    for w in &opts.process.warnings {
        warn!("{w}");
    }
}

/// SIGTERM and SIGINT, listened for from the first instant of [`run`](super::run), so
/// that a stop during start-up (a slow runtime, a long image import) is honoured at once.
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for both from now on.
    pub(super) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal's name.
    pub(super) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Sets RLIMIT_NOFILE to `maxOpenFiles` (or the hard limit if that is lower) and logs it.
pub(super) fn apply_max_open_files(wanted: u64) {
    match crate::rlimit::raise_open_files(wanted) {
        Ok(r) if r.capped => {
            warn!(
                maxOpenFiles = wanted,
                soft = r.soft,
                hard = r.hard,
                "cannot set RLIMIT_NOFILE to maxOpenFiles; raised the soft limit to the hard limit instead"
            );
        }
        Ok(r) => {
            info!(target: STARTUP_TARGET, soft = r.soft, hard = r.hard, "set RLIMIT_NOFILE to maxOpenFiles");
        }
        Err(e) => warn!(error = %e, maxOpenFiles = wanted, "cannot set RLIMIT_NOFILE; going on"),
    }
}

/// Gives the heap's free pages back to the kernel every 30 s ([`crate::heap`]), so the
/// memory a burst of pods took comes back after it.
pub(super) fn spawn_heap_trimmer(tasks: &crate::tasks::Tasks) {
    tasks.spawn_restarting(
        "heap-trim",
        crate::tasks::Backoff::default(),
        |cancel| async move {
            crate::heap::run_trimmer(cancel).await;
            Ok(())
        },
    );
}
