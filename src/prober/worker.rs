//! One probe worker: a task per (pod, container, probe type) that probes every
//! period and turns consecutive results into the cached result (kubelet's
//! `prober/worker.go`). It reads the container's ID, state and start time from the
//! status manager, as kubelet's worker does, and never restarts anything itself.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodStatus, Probe};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::results::ProbeResult;
use super::{ProbeKind, ProbeOutcome, WorkerDeps, run_probe};
use crate::events::{EventType, ObjectRef, reason};
use crate::pod::{Phase, container_should_restart, pod_ref, pod_uid};

/// kubelet's `maxProbeRetries`: a probe that errors is tried this often per period.
pub(crate) const MAX_PROBE_RETRIES: usize = 3;

/// The probe's settings with the API defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    pub initial_delay: i64,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// Values of zero or below mean "not set" (the API's defaults), as defaulting would.
fn positive(v: Option<i32>, default: i32) -> i32 {
    v.filter(|v| *v > 0).unwrap_or(default)
}

impl Timing {
    pub(crate) fn of(probe: &Probe) -> Self {
        let secs = |v: i32| Duration::from_secs(u64::try_from(v).unwrap_or(1));
        let count = |v: i32| u32::try_from(v).unwrap_or(1);
        Timing {
            initial_delay: i64::from(probe.initial_delay_seconds.unwrap_or(0).max(0)),
            period: secs(positive(probe.period_seconds, 10)),
            timeout: secs(positive(probe.timeout_seconds, 1)),
            success_threshold: count(positive(probe.success_threshold, 1)),
            failure_threshold: count(positive(probe.failure_threshold, 3)),
        }
    }
}

/// The worker's state between probes.
pub(crate) struct Worker {
    pub kind: ProbeKind,
    pub pod: Arc<Pod>,
    pub container: Container,
    pub probe: Probe,
    pub timing: Timing,
    deps: Arc<WorkerDeps>,
    /// The container instance being probed (a new ID resets everything).
    container_id: Option<String>,
    /// After a liveness/startup failure: wait for the restarted container.
    on_hold: bool,
    last: ProbeResult,
    run: u32,
}

/// The container's status by name, app or init (sidecar) container.
fn container_status<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
}

/// `containerd://abc` → `abc`.
pub(crate) fn runtime_id(container_id: &str) -> &str {
    container_id
        .split_once("://")
        .map_or(container_id, |(_, id)| id)
}

impl Worker {
    pub(crate) fn new(
        kind: ProbeKind,
        pod: Arc<Pod>,
        container: Container,
        probe: Probe,
        deps: Arc<WorkerDeps>,
    ) -> Self {
        Worker {
            kind,
            timing: Timing::of(&probe),
            pod,
            container,
            probe,
            deps,
            container_id: None,
            on_hold: false,
            last: ProbeResult::Unknown,
            run: 0,
        }
    }

    /// Probes every period until cancelled or the worker has nothing left to probe.
    /// `jitter` delays the first probe (kubelet spreads probes after its own start).
    pub(crate) async fn run(mut self, jitter: Duration, cancel: CancellationToken) {
        tokio::select! {
            () = cancel.cancelled() => return self.stopped(),
            () = tokio::time::sleep(jitter) => {}
        }
        let mut tick = tokio::time::interval(self.timing.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            if !self.do_probe(jiff::Timestamp::now()).await {
                break;
            }
        }
        self.stopped();
    }

    fn stopped(&self) {
        if let Some(id) = &self.container_id {
            self.deps.results.remove(self.kind, id);
        }
        crate::metrics::probes().forget(&self.series());
        debug!(pod = %pod_ref(&self.pod), podUID = %pod_uid(&self.pod), container = %self.container.name, probe = self.kind.as_str(), "probe worker stopped");
    }

    /// This worker's series on `/metrics/probes`.
    fn series(&self) -> crate::metrics::ProbeSeries {
        crate::metrics::ProbeSeries {
            probe_type: self.kind.as_str(),
            container: self.container.name.clone(),
            pod: self.pod.metadata.name.clone().unwrap_or_default(),
            namespace: self.pod.metadata.namespace.clone().unwrap_or_default(),
            pod_uid: pod_uid(&self.pod).to_string(),
        }
    }

    /// The initial cached result of a new container instance.
    fn initial(&self) -> ProbeResult {
        match self.kind {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }

    async fn set(&self, result: ProbeResult) {
        if let Some(id) = &self.container_id {
            self.deps
                .results
                .set(self.kind, pod_uid(&self.pod), id, result)
                .await;
        }
    }

    /// One probe (kubelet's `doProbe`); false when the worker should stop.
    pub(crate) async fn do_probe(&mut self, now: jiff::Timestamp) -> bool {
        // kubelet times the whole step, status lookups included.
        let step_start = std::time::Instant::now();
        let pod = self.pod.clone();
        let uid = pod_uid(&pod);
        let Some(status) = self.deps.statuses.get(uid) else {
            // Not synced yet; or, once probed, the pod is gone.
            return self.container_id.is_none();
        };
        if Phase::parse_or_pending(status.phase.as_deref()).is_terminal() {
            return false;
        }
        let Some(c) = container_status(&status, &self.container.name) else {
            return true;
        };
        let Some(id) = c
            .container_id
            .as_deref()
            .map(runtime_id)
            .filter(|i| !i.is_empty())
        else {
            return true;
        };
        if self.container_id.as_deref() != Some(id) {
            if let Some(old) = self.container_id.take() {
                self.deps.results.remove(self.kind, &old);
            }
            self.container_id = Some(id.to_string());
            self.set(self.initial()).await;
            self.on_hold = false;
            self.last = ProbeResult::Unknown;
            self.run = 0;
        }
        if self.on_hold {
            return true;
        }
        let state = c.state.as_ref();
        let Some(running) = state.and_then(|s| s.running.as_ref()) else {
            self.set(ProbeResult::Failure).await;
            // A container that ended and will not run again (its restart rules and
            // policy, else the pod's, over its exit code) needs no more probes.
            return state.and_then(|s| s.terminated.as_ref()).is_none_or(|t| {
                self.pod.spec.as_ref().is_some_and(|spec| {
                    container_should_restart(&self.container, spec, t.exit_code)
                })
            });
        };
        let started_at = running.started_at.as_ref().map(|t| t.0);
        if started_at.is_some_and(|t| now.duration_since(t).as_secs() < self.timing.initial_delay) {
            return true;
        }
        let started = self.deps.started(&self.container, id);
        if self.kind == ProbeKind::Startup {
            if started {
                return true; // Done: the startup probe stops after its first success.
            }
        } else if !started {
            return true; // Gated until the startup probe succeeds.
        }

        let mut outcome = Err(super::ProbeError::NotRun);
        for _ in 0..MAX_PROBE_RETRIES {
            outcome = run_probe(
                &self.deps,
                &self.probe,
                &self.container,
                &status,
                id,
                self.timing.timeout,
            )
            .await;
            if outcome.is_ok() {
                break;
            }
        }
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                // Could not probe at all: discarded, counters untouched.
                info!(pod = %pod_ref(&self.pod), podUID = %uid, container = %self.container.name, probe = self.kind.as_str(), error = %e, "probe errored; result discarded");
                self.event(format!("{} probe errored: {e}", self.kind.as_str()));
                return true;
            }
        };
        let (result, output) = match &outcome {
            ProbeOutcome::Success(o) => (ProbeResult::Success, o),
            ProbeOutcome::Failure(o) => (ProbeResult::Failure, o),
        };
        let measured = match result {
            ProbeResult::Success => crate::metrics::ProbeOutcome::Successful,
            ProbeResult::Failure => crate::metrics::ProbeOutcome::Failed,
            ProbeResult::Unknown => crate::metrics::ProbeOutcome::Unknown,
        };
        crate::metrics::probes().record(&self.series(), measured, step_start.elapsed());
        if result == ProbeResult::Failure {
            // kubelet records every failed probe, not only the one that crosses the threshold.
            self.event(format!("{} probe failed: {output}", self.kind.as_str()));
        }
        debug!(pod = %pod_ref(&self.pod), podUID = %uid, container = %self.container.name, probe = self.kind.as_str(), result = result.as_str(), output = output.as_str(), "probe ran");
        if !self.count(result) {
            return true;
        }
        if self.deps.results.get(self.kind, id) != Some(result) {
            info!(pod = %pod_ref(&self.pod), podUID = %uid, container = %self.container.name, containerID = %id,
                probe = self.kind.as_str(), result = result.as_str(), cause = output.as_str().trim_end(),
                "{}", self.transition(result));
        }
        self.set(result).await;
        if result == ProbeResult::Failure && self.kind != ProbeKind::Readiness {
            // The container will be killed; wait for its successor.
            self.on_hold = true;
            self.run = 0;
        }
        true
    }

    /// The result that crossed its threshold, as a sentence: how many in a row, the
    /// threshold, and what follows from it.
    fn transition(&self, result: ProbeResult) -> String {
        let kind = self.kind.as_str().to_lowercase();
        let (what, threshold, then) = match (result, self.kind) {
            (ProbeResult::Failure, ProbeKind::Readiness) => {
                ("failed", "failureThreshold", "the container is not ready")
            }
            (ProbeResult::Failure, _) => (
                "failed",
                "failureThreshold",
                "the container will be killed and restarted by its restart policy",
            ),
            (ProbeResult::Success, ProbeKind::Readiness) => {
                ("succeeded", "successThreshold", "the container is ready")
            }
            (ProbeResult::Success, ProbeKind::Startup) => (
                "succeeded",
                "successThreshold",
                "the container has started; liveness and readiness probes begin",
            ),
            (ProbeResult::Success, ProbeKind::Liveness) => {
                ("succeeded", "successThreshold", "the container is live")
            }
            (ProbeResult::Unknown, _) => return format!("{kind} probe result unknown"),
        };
        let limit = match result {
            ProbeResult::Failure => self.timing.failure_threshold,
            _ => self.timing.success_threshold,
        };
        format!(
            "{kind} probe {what} {} time{} in a row ({threshold} {limit}): {then}",
            self.run,
            if self.run == 1 { "" } else { "s" }
        )
    }

    /// Records kubelet's `Unhealthy` warning about this container.
    fn event(&self, message: String) {
        let obj = ObjectRef::container(&self.pod, &self.container.name);
        (self.deps.events).event(&obj, EventType::Warning, reason::UNHEALTHY, message);
    }

    /// Counts consecutive results; true when `result` reached its threshold.
    pub(crate) fn count(&mut self, result: ProbeResult) -> bool {
        if self.last == result {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = result;
            self.run = 1;
        }
        match result {
            ProbeResult::Failure => self.run >= self.timing.failure_threshold,
            ProbeResult::Success => self.run >= self.timing.success_threshold,
            ProbeResult::Unknown => false,
        }
    }
}
