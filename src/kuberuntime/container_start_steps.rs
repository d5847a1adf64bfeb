//! SyncPod's container starts (kubelet's `kuberuntime_manager.go`, `SyncPod`'s steps
//! 5 to 7): the ephemeral containers, the init containers in order, the regular
//! containers; and `doBackOff`, the CrashLoopBackOff check before each start. Each
//! start itself is `container_start.rs` (kubelet's `startContainer`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use k8s_openapi::api::core::v1::PodSpec;
use tracing::{debug, info};

use super::container;
use super::container_start::{ContainerStart, StartContext};
use super::errors::ContainerStartError;
use super::labels::ContainerType;
use super::manager::RuntimeManager;
use super::sidecar;
use crate::events::EventType::Warning;
use crate::events::{ObjectRef, reason};
use crate::pod::{WaitingReason, pod_ref, pod_uid};

/// What the container starts of one sync came to: the soonest end of a back-off
/// among them, and the containers that failed.
#[derive(Default)]
pub(super) struct ContainerStarts {
    pub(super) retry_after: Option<Duration>,
    pub(super) errors: Vec<ContainerStartError>,
}

/// Converts a CRI wall-clock timestamp (ns) into a tokio instant in the past.
fn instant_of(ns: i64) -> tokio::time::Instant {
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let ago = Duration::from_nanos((now_ns - ns).max(0) as u64);
    tokio::time::Instant::now()
        .checked_sub(ago)
        .unwrap_or_else(tokio::time::Instant::now)
}

impl RuntimeManager {
    /// SyncPod's step 5: starts the ephemeral containers never started yet (`kubectl
    /// debug`), each once; one that fails is not retried until the next sync.
    pub(super) async fn start_ephemeral_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        let all = spec.ephemeral_containers.as_deref().unwrap_or_default();
        for ec in indices.iter().filter_map(|&i| all.get(i)) {
            let c = container::ephemeral_as_container(ec);
            let mut s = ContainerStart::new(ctx, &c, ContainerType::Ephemeral);
            s.target = ec
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty());
            info!(pod = %s.pod_ref, podUID = %s.uid, container = %c.name, target = s.target.unwrap_or(""),
                cause = "in the pod's ephemeralContainers with no instance yet", "starting ephemeral container");
            match self.start_one(s).await {
                Ok(retry) => merge_retry(&mut started.retry_after, retry),
                Err(e) => started.errors.push(e),
            }
        }
    }

    /// SyncPod's step 6: starts the init containers due, in order. A sidecar that cannot
    /// start does not hold up the others; a regular init container does.
    pub(super) async fn start_init_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        for &i in indices {
            let c = &spec.init_containers.as_ref().expect("init index")[i];
            let is_sidecar = sidecar::is_sidecar(c);
            if is_sidecar {
                info!(pod = %pod_ref(ctx.pod), podUID = %pod_uid(ctx.pod), container = %c.name, initIndex = i, "starting sidecar container");
            }
            match self.start_container(ctx, c, ContainerType::Init).await {
                Ok(retry) => merge_retry(&mut started.retry_after, retry),
                Err(e) if is_sidecar => started.errors.push(e),
                Err(e) => {
                    started.errors.push(e);
                    break;
                }
            }
        }
    }

    /// SyncPod's step 7: starts the regular containers together, but one with a
    /// postStart hook blocks the ones after it until the hook returned (kubelet starts
    /// them one by one).
    pub(super) async fn start_regular_containers(
        &self,
        ctx: &StartContext<'_>,
        spec: &PodSpec,
        indices: &[usize],
        started: &mut ContainerStarts,
    ) {
        let mut futs = Vec::new();
        for (n, &i) in indices.iter().enumerate() {
            let c = &spec.containers[i];
            futs.push(self.start_container(ctx, c, ContainerType::Regular));
            let blocks = c.lifecycle.as_ref().is_some_and(|l| l.post_start.is_some());
            if blocks || n + 1 == indices.len() {
                for r in join_all(std::mem::take(&mut futs)).await {
                    match r {
                        Ok(retry) => merge_retry(&mut started.retry_after, retry),
                        Err(e) => started.errors.push(e),
                    }
                }
            }
        }
    }

    /// kubelet's `doBackOff` (CrashLoopBackOff): only a container that already ran and
    /// exited backs off, counted from its newest exited instance (not only the latest
    /// one: a container restarted because a probe failed is running still). Some: the
    /// back-off left, the container does not start now.
    pub(super) fn do_back_off(&self, s: &ContainerStart<'_>) -> Option<Duration> {
        let prev = s.ctx.status.latest_exited(s.name)?;
        let (pod, uid, name) = (s.ctx.pod, s.uid, s.name);
        let key = format!("{uid}_{name}");
        let died = instant_of(prev.finished_at);
        if let Some(left) = self.crash_backoff.remaining(&key, died) {
            let current = self.crash_backoff.current(&key).unwrap_or(left);
            let msg = format!(
                "back-off {} restarting failed container={name} pod={}_{}({uid})",
                crate::duration::format_go_duration(current),
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            // Said once per exit, at -v=2; every later sync in the same back-off at -v=4.
            let told = self
                .reasons
                .get(uid, name)
                .is_some_and(|(r, m)| r == WaitingReason::CrashLoopBackOff && m == msg);
            if told {
                debug!(pod = %s.pod_ref, podUID = %uid, container = name, message = %msg, "container in CrashLoopBackOff");
            } else {
                let ran = Duration::from_nanos(
                    (prev.finished_at - prev.started_at).max(0).unsigned_abs(),
                );
                info!(pod = %s.pod_ref, podUID = %uid, container = name, restartCount = prev.restart_count,
                    cause = %format!("exited with code {} ({}) after running {:.1}s", prev.exit_code, prev.terminated_reason(), ran.as_secs_f64()),
                    "back-off {} restarting failed container ({}s left)",
                    crate::duration::format_go_duration(current), left.as_secs());
            }
            // kubelet's doBackOff: recorded on the container (its fieldPath).
            let event = format!(
                "Back-off restarting failed container {name} in pod {}_{}({uid})",
                pod.metadata.name.as_deref().unwrap_or(""),
                pod.metadata.namespace.as_deref().unwrap_or("default"),
            );
            let container_ref = ObjectRef::container(pod, name);
            (self.events).event(&container_ref, Warning, reason::BACK_OFF, event);
            self.reasons
                .set(uid, name, WaitingReason::CrashLoopBackOff, msg);
            return Some(left);
        }
        self.crash_backoff.next(&key, died);
        None
    }
}

fn merge_retry(acc: &mut Option<Duration>, next: Option<Duration>) {
    if let Some(d) = next {
        *acc = Some(acc.map_or(d, |a| a.min(d)));
    }
}
