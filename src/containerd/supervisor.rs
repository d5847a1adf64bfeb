//! Keeps the managed containerd running: restarts it with back-off when it dies, and
//! stops it when the agent stops.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::ManagedContainerd;

/// The first wait before restarting a managed containerd that died.
pub const RESTART_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A containerd that stayed up this long starts over at the initial back-off: one
/// that crashes as it starts still backs off, but one killed now and then (the
/// soak's six SIGKILLs 15 s apart) is back within seconds each time, as systemd's
/// `RestartSec=5` for containerd's own unit would have it. With 60 s, the sixth kill
/// left the node without a runtime for 32 s.
pub const RESTART_BACKOFF_RESET: Duration = Duration::from_secs(10);

/// The next restart back-off: doubled, capped at [`RESTART_BACKOFF_MAX`].
pub fn next_backoff(current: Duration) -> Duration {
    (current * 2).min(RESTART_BACKOFF_MAX)
}

/// Keeps a managed containerd running until `cancel` fires, then stops it.
///
/// k3s exits when its containerd dies and leaves the restart to systemd; oxlet restarts
/// it itself, with back-off (1 s doubling to 30 s, reset after 10 s up), so running pods
/// and the sync loop (which skips while the runtime is down) carry on. Containers survive
/// it: their shims are separate processes that the new containerd reconnects to.
///
/// Run it on a runtime worker thread (a task), never in `spawn_blocking`: the
/// parent-death signal of each restarted containerd follows the spawning thread.
pub async fn supervise(mut current: ManagedContainerd, cancel: CancellationToken) {
    let mut backoff = RESTART_BACKOFF_INITIAL;
    loop {
        let up_since = Instant::now();
        let exited = tokio::select! {
            () = cancel.cancelled() => None,
            status = current.wait() => Some(status),
        };
        let Some(status) = exited else {
            current.stop().await;
            return;
        };
        if up_since.elapsed() >= RESTART_BACKOFF_RESET {
            backoff = RESTART_BACKOFF_INITIAL;
        }
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("wait failed: {e}"),
        };
        tracing::warn!(
            pid = current.pid,
            %status,
            log = %current.launch.layout.log.display(),
            "managed containerd exited; restarting it after a back-off of {}",
            crate::duration::format_go_duration(backoff)
        );
        let launch = current.launch.clone();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            // Dropping a start cut short by `cancel` kills the half-started child.
            let started = tokio::select! {
                () = cancel.cancelled() => return,
                r = ManagedContainerd::start(&launch) => r,
            };
            backoff = next_backoff(backoff);
            match started {
                Ok(m) => {
                    tracing::warn!(pid = m.pid, "managed containerd restarted");
                    current = m;
                    break;
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "restarting managed containerd failed; retrying after a back-off of {}",
                    crate::duration::format_go_duration(backoff)
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_backoff_doubles_to_the_cap() {
        let mut b = RESTART_BACKOFF_INITIAL;
        let mut seen = vec![b];
        for _ in 0..7 {
            b = next_backoff(b);
            seen.push(b);
        }
        let secs: Vec<u64> = seen.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
    }
}
