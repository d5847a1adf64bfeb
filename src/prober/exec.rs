//! exec probes: CRI `ExecSync` with the probe's timeout. A timeout is a failure
//! (kubelet's `ExecProbeTimeout`, on by default); any other runtime error is a probe
//! error (retried, not counted). As kubelet's `pkg/probe/exec`, the failure message is
//! the command's own output (what `<Kind> probe failed: …` events show), and a timeout's
//! is `command "<argv joined>" timed out`.

use std::time::Duration;

use super::{ProbeError, ProbeOutcome};
use crate::cri::Cri;

/// Output kept for the log line, as kubelet caps exec output (10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;

pub(crate) async fn probe(
    cri: &dyn Cri,
    container_id: &str,
    command: Vec<String>,
    timeout: Duration,
) -> Result<ProbeOutcome, ProbeError> {
    let shown = command.join(" ");
    match cri.exec_sync(container_id, command, timeout).await {
        Ok(out) => {
            let mut text = out.stdout;
            text.extend_from_slice(&out.stderr);
            text.truncate(MAX_OUTPUT);
            let text = String::from_utf8_lossy(&text).into_owned();
            if out.exit_code == 0 {
                Ok(ProbeOutcome::Success(text))
            } else {
                Ok(ProbeOutcome::Failure(text))
            }
        }
        Err(e) if e.code() == Some(tonic::Code::DeadlineExceeded) => Ok(ProbeOutcome::Failure(
            format!("command {shown:?} timed out"),
        )),
        Err(e) => Err(ProbeError::Exec(e)),
    }
}
