//! Pod startup stages, logged once per pod when it is first seen running (kubelet's
//! pod startup latency tracker logs "Observed pod startup duration"): how long the
//! pod spent in the merger, waiting for its worker, getting a sandbox, getting its
//! containers started, and until its status said Running.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::kuberuntime::{ContainerState, PodRuntimeStatus};
use crate::pod::CONFIG_SEEN_ANNOTATION;

/// The stages of one pod's start, as wall-clock times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartupStages {
    /// The merger first saw the pod (`kubernetes.io/config.seen`).
    pub seen: Timestamp,
    /// The pod worker began its first sync.
    pub worker_started: Timestamp,
    /// The runtime recorded the sandbox (RunPodSandbox began).
    pub sandbox_created: Timestamp,
    /// The last container was created (CreateContainer began).
    pub containers_created: Timestamp,
    /// The last container's process started.
    pub containers_started: Timestamp,
    /// The status first said Running with every container running.
    pub status_running: Timestamp,
}

impl StartupStages {
    fn ms(a: Timestamp, b: Timestamp) -> f64 {
        (b.as_nanosecond() - a.as_nanosecond()) as f64 / 1e6
    }
    /// (stage name, milliseconds) in order.
    pub(crate) fn durations(&self) -> [(&'static str, f64); 5] {
        [
            ("seenToWorker", Self::ms(self.seen, self.worker_started)),
            (
                "workerToSandbox",
                Self::ms(self.worker_started, self.sandbox_created),
            ),
            (
                "sandboxToContainers",
                Self::ms(self.sandbox_created, self.containers_created),
            ),
            (
                "containersToStarted",
                Self::ms(self.containers_created, self.containers_started),
            ),
            (
                "startedToStatus",
                Self::ms(self.containers_started, self.status_running),
            ),
        ]
    }
}

#[derive(Debug, Default)]
struct Entry {
    worker_started: Option<Timestamp>,
    reported: bool,
}

/// Tracks each pod's first sync and reports its startup stages once.
#[derive(Debug, Default)]
pub(crate) struct StartupTracker {
    pods: Mutex<HashMap<String, Entry>>,
}

fn from_nanos(ns: i64) -> Option<Timestamp> {
    (ns > 0)
        .then(|| Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
}

impl StartupTracker {
    /// Pods whose startup is tracked (the census).
    pub(crate) fn len(&self) -> usize {
        self.pods.locked().len()
    }

    /// Records the start of a pod's first sync.
    pub(crate) fn worker_started(&self, uid: &str, now: Timestamp) {
        let mut pods = self.pods.locked();
        let e = pods.entry(uid.to_string()).or_default();
        e.worker_started.get_or_insert(now);
    }

    /// Returns the stages the first time the pod is running with containers that were
    /// started by this agent (adopted pods are not reported).
    pub(crate) fn observe(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        status: &PodStatus,
        now: Timestamp,
    ) -> Option<StartupStages> {
        let uid = pod.metadata.uid.as_deref()?;
        let running = status.phase.as_deref() == Some(crate::pod::Phase::Running.as_str())
            && status
                .container_statuses
                .iter()
                .flatten()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        if !running {
            return None;
        }
        let mut pods = self.pods.locked();
        let e = pods.get_mut(uid)?;
        if e.reported {
            return None;
        }
        e.reported = true;
        let worker_started = e.worker_started?;
        let seen = pod
            .metadata
            .annotations
            .as_ref()?
            .get(CONFIG_SEEN_ANNOTATION)?
            .parse::<Timestamp>()
            .ok()?;
        let sandbox_created = from_nanos(rt.sandboxes.first()?.created_at)?;
        let current = rt
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running);
        let containers_created = from_nanos(current.clone().map(|c| c.created_at).max()?)?;
        let containers_started = from_nanos(current.map(|c| c.started_at).max()?)?;
        // Containers older than this worker were adopted, not started by us.
        if sandbox_created < worker_started {
            return None;
        }
        Some(StartupStages {
            seen,
            worker_started,
            sandbox_created,
            containers_created,
            containers_started,
            status_running: now,
        })
    }

    pub(crate) fn forget(&self, uid: &str) {
        self.pods.locked().remove(uid);
    }
}
