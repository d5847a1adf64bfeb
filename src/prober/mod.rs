//! Probes (kubelet's `pkg/kubelet/prober`): one worker task per (pod, container,
//! probe type), exec / httpGet / tcpSocket / grpc handlers, and the result caches
//! whose changes reach the sync loop. The prober never restarts a container: a
//! liveness or startup failure is read by the runtime's pod actions, which kill it.
//!
//! Results live in memory only. After an oxlet restart every worker starts again
//! from the initial results (readiness Failure, liveness Success, startup Unknown),
//! exactly as kubelet does: a running container is reported not ready (and, with a
//! startup probe, not started) until its probes pass again; nothing is restarted
//! because of the restart.

mod exec;
mod grpc;
mod http;
mod results;
mod tcp;
mod worker;

#[cfg(test)]
mod tests;

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::pod::ProbeKind;
pub(crate) use results::{ProbeResult, ProbeResults, ProbeUpdate};

use crate::cri::Cri;
use crate::cri::CriError;
use crate::pod::{RestartPolicy, pod_ref, pod_uid};
use crate::status::StatusManager;
use crate::tasks::Tasks;

/// What one probe run found (with its output, for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProbeOutcome {
    Success(String),
    Failure(String),
}

/// The probe could not be run at all: retried, then discarded (not a failure).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    #[error("probe not run")]
    NotRun,
    #[error("exec probe: {0}")]
    Exec(CriError),
    #[error("invalid probe target: {0}")]
    BadTarget(String),
    #[error("container {container:?} has no port named {port:?}")]
    NoNamedPort { container: String, port: String },
    #[error("the pod has no IP yet")]
    NoPodIp,
    #[error("the probe has no handler")]
    NoHandler,
}

/// What every worker shares.
pub(crate) struct WorkerDeps {
    pub results: Arc<ProbeResults>,
    pub statuses: Arc<StatusManager>,
    pub cri: Arc<dyn Cri>,
    /// Where `Unhealthy` events go.
    pub events: crate::events::EventRecorder,
}

impl WorkerDeps {
    /// True once the container instance counts as started: it has no startup probe,
    /// or that probe succeeded.
    pub(crate) fn started(&self, c: &Container, container_id: &str) -> bool {
        c.startup_probe.is_none()
            || self.results.get(ProbeKind::Startup, container_id) == Some(ProbeResult::Success)
    }
}

/// The prober's startup results as the runtime's sidecar gate: the next init container
/// waits until a sidecar's startup probe succeeded, and a failed one restarts the sidecar.
pub(crate) struct StartupProbeGate(pub Arc<ProbeResults>);

impl crate::kuberuntime::StartupGate for StartupProbeGate {
    fn startup(
        &self,
        _pod_uid: &str,
        spec: &Container,
        running: &crate::kuberuntime::ContainerStatus,
    ) -> crate::kuberuntime::Startup {
        use crate::kuberuntime::Startup;
        if spec.startup_probe.is_none() {
            return Startup::Succeeded;
        }
        match self.0.get(ProbeKind::Startup, &running.id) {
            Some(ProbeResult::Success) => Startup::Succeeded,
            Some(ProbeResult::Failure) => Startup::Failed,
            Some(ProbeResult::Unknown) | None => Startup::Pending,
        }
    }
}

/// A port by number or by the container's port name.
fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, ProbeError> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| ProbeError::NoNamedPort {
                container: c.name.clone(),
                port: name.clone(),
            })?,
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ProbeError::BadTarget(format!("port {n} out of range")))
}

/// The host to probe: the spec's, or the pod's IP.
fn host_of(spec: Option<&String>, status: &PodStatus) -> Result<String, ProbeError> {
    spec.filter(|h| !h.is_empty())
        .or(status.pod_ip.as_ref().filter(|ip| !ip.is_empty()))
        .cloned()
        .ok_or(ProbeError::NoPodIp)
}

/// Runs the probe's handler once.
async fn run_probe(
    deps: &WorkerDeps,
    probe: &Probe,
    c: &Container,
    status: &PodStatus,
    container_id: &str,
    timeout: Duration,
) -> Result<ProbeOutcome, ProbeError> {
    if let Some(e) = &probe.exec {
        let command = e.command.clone().unwrap_or_default();
        return exec::probe(deps.cri.as_ref(), container_id, command, timeout).await;
    }
    if let Some(h) = &probe.http_get {
        let target = http::HttpTarget {
            https: h
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host: host_of(h.host.as_ref(), status)?,
            port: resolve_port(&h.port, c)?,
            path: h.path.clone().unwrap_or_default(),
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        };
        return http::probe(&target, timeout).await;
    }
    if let Some(t) = &probe.tcp_socket {
        let host = host_of(t.host.as_ref(), status)?;
        return Ok(tcp::probe(&host, resolve_port(&t.port, c)?, timeout).await);
    }
    if let Some(g) = &probe.grpc {
        let host = host_of(None, status)?;
        let port = resolve_port(&IntOrString::Int(g.port), c)?;
        return Ok(grpc::probe(&host, port, g.service.clone(), timeout).await);
    }
    Err(ProbeError::NoHandler)
}

type WorkerKey = (String, String, ProbeKind);

/// Starts and stops the probe workers and answers what their results mean
/// (kubelet's prober manager).
pub(crate) struct ProbeManager {
    deps: Arc<WorkerDeps>,
    tasks: Tasks,
    workers: Arc<Mutex<HashMap<WorkerKey, (u64, CancellationToken)>>>,
    next_id: AtomicU64,
    agent_start: Instant,
}

impl ProbeManager {
    /// Probe workers running (the census).
    pub(crate) fn worker_count(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn new(deps: WorkerDeps, tasks: Tasks) -> Self {
        ProbeManager {
            deps: Arc::new(deps),
            tasks,
            workers: Arc::default(),
            next_id: AtomicU64::new(0),
            agent_start: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WorkerKey, (u64, CancellationToken)>> {
        self.workers.locked()
    }

    /// Starts the workers the pod's containers need and do not have yet (app
    /// containers and restartable init containers, as kubelet's `AddPod`).
    pub(crate) fn add_pod(&self, pod: &Arc<Pod>) {
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| RestartPolicy::of_container(c) == Some(RestartPolicy::Always));
        let uid = pod_uid(pod).to_string();
        for c in spec.containers.iter().chain(sidecars) {
            for kind in ProbeKind::ALL {
                let Some(probe) = kind.of(c) else { continue };
                let key = (uid.clone(), c.name.clone(), kind);
                let mut workers = self.lock();
                if workers.contains_key(&key) {
                    continue;
                }
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let token = self.tasks.token().child_token();
                workers.insert(key.clone(), (id, token.clone()));
                drop(workers);
                let w = worker::Worker::new(
                    kind,
                    pod.clone(),
                    c.clone(),
                    probe.clone(),
                    self.deps.clone(),
                );
                // Probes right after an agent start are spread over one period.
                let jitter = if self.agent_start.elapsed() < w.timing.period {
                    w.timing.period.mul_f64(fastrand::f64())
                } else {
                    Duration::ZERO
                };
                debug!(pod = %pod_ref(pod), podUID = %uid, container = %c.name, probe = kind.as_str(), "starting probe worker");
                let map = self.workers.clone();
                // Tracked in the task tree; removes itself from the map when it ends.
                self.tasks.spawn_pass("probe-worker", async move {
                    w.run(jitter, token).await;
                    let mut m = map.locked();
                    if m.get(&key).is_some_and(|(i, _)| *i == id) {
                        m.remove(&key);
                    }
                    Ok(())
                });
            }
        }
    }

    fn stop_where(&self, keep: impl Fn(&WorkerKey) -> bool) {
        self.lock().retain(|k, (_, token)| {
            let kept = keep(k);
            if !kept {
                token.cancel();
            }
            kept
        });
    }

    /// The pod is terminating: liveness and startup stop (kubelet's
    /// `StopLivenessAndStartup`); readiness goes on until the pod is gone.
    pub(crate) fn stop_liveness_and_startup(&self, uid: &str) {
        self.stop_where(|(u, _, kind)| u != uid || *kind == ProbeKind::Readiness);
    }

    /// Stops every worker of the pod.
    pub(crate) fn remove_pod(&self, uid: &str) {
        self.stop_where(|(u, _, _)| u != uid);
    }

    /// The container's (ready, started) as its probes say, or None when it has none.
    pub(crate) fn readiness(&self, c: &Container, container_id: &str) -> Option<(bool, bool)> {
        if c.readiness_probe.is_none() && c.startup_probe.is_none() {
            return None;
        }
        let started = self.deps.started(c, container_id);
        let ready = started
            && (c.readiness_probe.is_none()
                || self.deps.results.get(ProbeKind::Readiness, container_id)
                    == Some(ProbeResult::Success));
        Some((ready, started))
    }

    /// The probe that failed the container instance, if liveness or startup did
    /// (the runtime's pod actions kill it then).
    pub(crate) fn failed(&self, container_id: &str) -> Option<ProbeKind> {
        [ProbeKind::Liveness, ProbeKind::Startup]
            .into_iter()
            .find(|k| self.deps.results.get(*k, container_id) == Some(ProbeResult::Failure))
    }
}
