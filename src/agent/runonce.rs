//! `--runonce`: start the static pods, wait until each runs or fails, print their
//! statuses and exit 0 only if all of them run.

use std::time::Duration;

use k8s_openapi::api::core::v1::PodStatus;
use tokio_util::sync::CancellationToken;

use crate::pod::PodManager;
use crate::pod::{Phase, WaitingReason, pod_ref, pod_uid};
use crate::status::StatusManager;

/// Gives up on pods that neither run nor fail within this time.
const RUNONCE_TIMEOUT: Duration = Duration::from_secs(120);
/// kubelet waits about a second for the first manifest batch.
const FIRST_BATCH_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Running,
    Failed(String),
    Pending,
}

fn verdict(status: Option<&PodStatus>) -> Verdict {
    let Some(s) = status else {
        return Verdict::Pending;
    };
    let phase = Phase::parse_or_pending(s.phase.as_deref());
    if phase == Phase::Failed {
        return Verdict::Failed(s.reason.clone().unwrap_or_else(|| phase.to_string()));
    }
    let cs = s.container_statuses.as_deref().unwrap_or_default();
    for c in cs {
        if let Some(w) = c.state.as_ref().and_then(|st| st.waiting.as_ref())
            && let Some(r) = w
                .reason
                .as_deref()
                .and_then(|r| r.parse::<WaitingReason>().ok())
                .filter(|r| r.is_stuck())
        {
            return Verdict::Failed(format!("container {}: {r}", c.name));
        }
    }
    let all_running = !cs.is_empty()
        && cs
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()));
    if phase == Phase::Succeeded || (phase == Phase::Running && all_running) {
        Verdict::Running
    } else {
        Verdict::Pending
    }
}

/// Watches the `desired` pods and their `statuses`; returns the process exit code.
pub(super) async fn run(
    desired: &PodManager,
    statuses: &StatusManager,
    cancel: &CancellationToken,
) -> i32 {
    tokio::time::sleep(FIRST_BATCH_WAIT).await;
    let deadline = tokio::time::Instant::now() + RUNONCE_TIMEOUT;
    loop {
        let pods = desired.all();
        let verdicts: Vec<_> = pods
            .iter()
            .map(|p| (p.clone(), verdict(statuses.get(pod_uid(p)).as_ref())))
            .collect();
        let done = verdicts.iter().all(|(_, v)| *v != Verdict::Pending);
        if done || tokio::time::Instant::now() >= deadline || cancel.is_cancelled() {
            let mut ok = true;
            for (p, v) in &verdicts {
                let status = statuses.get(pod_uid(p));
                let phase = Phase::parse_or_pending(status.and_then(|s| s.phase).as_deref());
                match v {
                    Verdict::Running => println!("{}: {phase}: running", pod_ref(p)),
                    Verdict::Failed(why) => {
                        ok = false;
                        println!("{}: {phase}: failed: {why}", pod_ref(p));
                    }
                    Verdict::Pending => {
                        ok = false;
                        println!("{}: {phase}: did not start in time", pod_ref(p));
                    }
                }
            }
            if pods.is_empty() {
                println!("no static pods found");
            }
            return if ok { 0 } else { 1 };
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
