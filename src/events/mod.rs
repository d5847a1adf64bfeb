//! Events, as kubelet's recorder makes them (`makeEventRecorder` in kubelet's
//! `server.go`): core/v1 Events about a pod (with a container's `fieldPath`) or the
//! node, from `source.component=kubelet`, `source.host=<node>`.
//!
//! [`EventRecorder::event`] never blocks and never fails its caller: every event is
//! logged at `-v=3` (so standalone users see them too), and in cluster mode it is also
//! offered to a bounded queue (client-go's `maxQueuedEvents`, 1000) that the sink
//! task drains; a full queue drops the event, counted.

mod correlator;
mod sink;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tracing::info;

use crate::locks::Locked as _;

pub(crate) use sink::{SinkSettings, run_sink};

/// client-go's `maxQueuedEvents`: the broadcaster's queue, dropping when full.
pub(crate) const MAX_QUEUED_EVENTS: usize = 1000;

/// `source.component` of every event: kubelet's, so tools filtering on it find ours.
pub(crate) const COMPONENT: &str = "kubelet";

/// The reasons kubelet gives (`pkg/kubelet/events/event.go`).
#[allow(
    dead_code,
    reason = "seam: the node status slice emits NodeReady/NodeNotReady"
)]
pub(crate) mod reason {
    pub(crate) const CREATED: &str = "Created";
    pub(crate) const STARTED: &str = "Started";
    pub(crate) const FAILED: &str = "Failed";
    pub(crate) const KILLING: &str = "Killing";
    pub(crate) const BACK_OFF: &str = "BackOff";
    pub(crate) const EXCEEDED_GRACE_PERIOD: &str = "ExceededGracePeriod";
    pub(crate) const PULLING: &str = "Pulling";
    pub(crate) const PULLED: &str = "Pulled";
    pub(crate) const INSPECT_FAILED: &str = "InspectFailed";
    pub(crate) const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    pub(crate) const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";
    pub(crate) const NODE_READY: &str = "NodeReady";
    pub(crate) const NODE_NOT_READY: &str = "NodeNotReady";
    pub(crate) const STARTING: &str = "Starting";
    pub(crate) const NODE_ALLOCATABLE_ENFORCED: &str = "NodeAllocatableEnforced";
    pub(crate) const UNHEALTHY: &str = "Unhealthy";
    pub(crate) const PROBE_WARNING: &str = "ProbeWarning";
    pub(crate) const FAILED_SYNC: &str = "FailedSync";
    pub(crate) const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    pub(crate) const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    pub(crate) const SANDBOX_CHANGED: &str = "SandboxChanged";
    pub(crate) const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    pub(crate) const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";
    pub(crate) const NETWORK_NOT_READY: &str = "NetworkNotReady";
    pub(crate) const FAILED_KILL_POD: &str = "FailedKillPod";
    pub(crate) const FAILED_MOUNT: &str = "FailedMount";
    pub(crate) const MISSING_CLUSTER_DNS: &str = "MissingClusterDNS";
    pub(crate) const EVICTED: &str = "Evicted";
    pub(crate) const NODE_SHUTDOWN: &str = "NodeShutdown";
}

/// The event's type, as core/v1 spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event is about: a pod (optionally one container of it) or the node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.containers{name}` / `spec.initContainers{name}` for a container.
    pub field_path: String,
}

impl ObjectRef {
    /// The pod itself.
    pub(crate) fn pod(pod: &Pod) -> ObjectRef {
        ObjectRef {
            kind: "Pod",
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            field_path: String::new(),
        }
    }

    /// One container of the pod, by name: its `fieldPath` says which list it is in,
    /// as kubelet's `GenerateContainerRef` does.
    pub(crate) fn container(pod: &Pod, container: &str) -> ObjectRef {
        let spec = pod.spec.as_ref();
        let named = |c: &str| c == container;
        let list =
            if spec.is_some_and(|s| s.init_containers.iter().flatten().any(|c| named(&c.name))) {
                "spec.initContainers"
            } else if spec.is_some_and(|s| {
                s.ephemeral_containers
                    .iter()
                    .flatten()
                    .any(|c| named(&c.name))
            }) {
                "spec.ephemeralContainers"
            } else {
                "spec.containers"
            };
        ObjectRef {
            field_path: format!("{list}{{{container}}}"),
            ..ObjectRef::pod(pod)
        }
    }

    /// The node: kubelet uses the node name as its UID, with no namespace.
    pub(crate) fn node(name: &str) -> ObjectRef {
        ObjectRef {
            kind: "Node",
            namespace: String::new(),
            name: name.to_owned(),
            uid: name.to_owned(),
            field_path: String::new(),
        }
    }
}

/// An event's reason: one of kubelet's constants ([`reason`]), or one made at run time
/// (an admission rejection's `OutOfcpu`).
pub(crate) type Reason = std::borrow::Cow<'static, str>;

/// One recorded event, on its way to the sink.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub object: ObjectRef,
    pub kind: EventType,
    pub reason: Reason,
    pub message: String,
    pub at: jiff::Timestamp,
    /// The event object's annotations (kubelet's `AnnotatedEventf`; an eviction's
    /// offending containers); usually empty.
    pub annotations: BTreeMap<String, String>,
}

/// What the recorder queues for the sink, in the order it happened.
#[derive(Debug)]
pub(crate) enum Queued {
    Event(Recorded),
    /// The object with this UID is gone for good (a pod removed from the node): the
    /// correlator's entries about it can never match again. Queued behind the pod's
    /// last events, so none of them brings an entry back.
    Forget(String),
}

/// The most forgets kept aside while the queue is full (see [`EventRecorder::forget_object`]).
const MAX_DEFERRED_FORGETS: usize = 4096;

/// Forgets that found the queue full, applied by the sink once it has drained the
/// queue (so after the events queued before them).
type DeferredForgets = Arc<std::sync::Mutex<Vec<String>>>;

/// The sink's end of the recorder's queue.
#[derive(Debug)]
pub(crate) struct EventQueue {
    rx: mpsc::Receiver<Queued>,
    deferred: DeferredForgets,
}

impl EventQueue {
    /// The next thing queued; when the queue is empty, the forgets that found it full
    /// come first.
    pub(crate) async fn recv(&mut self) -> Option<Queued> {
        if self.rx.is_empty()
            && let Some(uid) = self.deferred.locked().pop()
        {
            return Some(Queued::Forget(uid));
        }
        self.rx.recv().await
    }

    /// The next queued event, passing over forgets (unit tests read what was recorded).
    #[cfg(test)]
    pub(crate) fn try_recv(&mut self) -> Result<Recorded, mpsc::error::TryRecvError> {
        loop {
            if let Queued::Event(e) = self.rx.try_recv()? {
                return Ok(e);
            }
        }
    }
}

/// Records events; cheap to clone; never blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventRecorder {
    queue: Option<mpsc::Sender<Queued>>,
    dropped: Arc<AtomicU64>,
    deferred: DeferredForgets,
}

impl EventRecorder {
    /// Logs only (standalone mode, unit tests).
    pub(crate) fn log_only() -> EventRecorder {
        EventRecorder::default()
    }

    /// Logs and queues up to `capacity` events for the sink.
    pub(crate) fn queued(capacity: usize) -> (EventRecorder, EventQueue) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let deferred = DeferredForgets::default();
        let recorder = EventRecorder {
            queue: Some(tx),
            dropped: Arc::default(),
            deferred: deferred.clone(),
        };
        (recorder, EventQueue { rx, deferred })
    }

    /// Tells the sink that the object `uid` is gone (see [`Queued::Forget`]). When
    /// the queue is full (an apiserver that does not answer holds the sink for
    /// minutes), it waits aside, up to [`MAX_DEFERRED_FORGETS`] of them; past that the
    /// correlator's caches stay bounded by their size, as client-go's always are.
    pub(crate) fn forget_object(&self, uid: &str) {
        let Some(queue) = &self.queue else { return };
        if let Err(e) = queue.try_send(Queued::Forget(uid.to_string())) {
            let mut deferred = self.deferred.locked();
            if deferred.len() < MAX_DEFERRED_FORGETS
                && let Queued::Forget(uid) = e.into_inner()
            {
                deferred.push(uid);
            }
        }
    }

    /// Records an event: logged at `-v=3`, queued for the apiserver if there is one.
    pub(crate) fn event(
        &self,
        object: &ObjectRef,
        kind: EventType,
        reason: impl Into<Reason>,
        message: impl Into<String>,
    ) {
        self.annotated_event(object, kind, reason, message, BTreeMap::new());
    }

    /// [`event`](Self::event) with annotations on the event object.
    pub(crate) fn annotated_event(
        &self,
        object: &ObjectRef,
        kind: EventType,
        reason: impl Into<Reason>,
        message: impl Into<String>,
        annotations: BTreeMap<String, String>,
    ) {
        let (reason, message) = (reason.into(), message.into());
        let (kind_name, reason_name) = (kind.as_str(), &*reason);
        // The message may carry a container's output (a probe's): one line in the log.
        let said = crate::klog::one_line(&message);
        if object.kind == "Pod" {
            let pod = format!("{}/{}", object.namespace, object.name);
            info!(target: crate::logging::EVENTS_TARGET, pod = %pod, podUID = %object.uid, fieldPath = %object.field_path,
                eventType = kind_name, reason = reason_name, "Event: {said}");
        } else {
            let obj = format!("{}/{}", object.kind, object.name);
            info!(target: crate::logging::EVENTS_TARGET, object = %obj, eventType = kind_name, reason = reason_name, "Event: {said}");
        }
        let Some(queue) = &self.queue else { return };
        let recorded = Recorded {
            object: object.clone(),
            kind,
            reason,
            message,
            at: jiff::Timestamp::now(),
            annotations,
        };
        if queue.try_send(Queued::Event(recorded)).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(dropped = n, "event queue full or closed; event dropped");
        }
    }

    /// How many events the full queue has dropped.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "app"}],
                     "ephemeralContainers": [{"name": "dbg"}]},
        }))
        .unwrap()
    }

    #[test]
    fn container_refs_name_their_list() {
        let p = pod();
        assert_eq!(
            ObjectRef::container(&p, "app").field_path,
            "spec.containers{app}"
        );
        let init = ObjectRef::container(&p, "init");
        assert_eq!(init.field_path, "spec.initContainers{init}");
        let dbg = ObjectRef::container(&p, "dbg");
        assert_eq!(dbg.field_path, "spec.ephemeralContainers{dbg}");
        assert_eq!((init.namespace.as_str(), init.uid.as_str()), ("ns", "u1"));
        assert_eq!(ObjectRef::node("n1").uid, "n1");
    }

    #[test]
    fn a_full_queue_drops_without_blocking() {
        let (rec, mut rx) = EventRecorder::queued(2);
        let obj = ObjectRef::pod(&pod());
        for i in 0..5 {
            rec.event(&obj, EventType::Normal, reason::PULLED, format!("m{i}"));
        }
        assert_eq!(rec.dropped(), 3);
        assert_eq!(rx.try_recv().unwrap().message, "m0");
        // A log-only recorder never queues.
        EventRecorder::log_only().event(&obj, EventType::Warning, reason::FAILED, "x");
    }

    /// A forget comes behind the events queued before it, even when the queue was
    /// full and it had to wait aside.
    #[tokio::test]
    async fn forgets_follow_the_events_before_them() {
        let (rec, mut rx) = EventRecorder::queued(2);
        let obj = ObjectRef::pod(&pod());
        rec.event(&obj, EventType::Normal, reason::PULLED, "m0");
        rec.forget_object("u0");
        rec.event(&obj, EventType::Normal, reason::PULLED, "m1");
        rec.forget_object("u1");
        rec.forget_object("u2");
        let mut seen = Vec::new();
        while seen.len() < 4 {
            seen.push(match rx.recv().await.unwrap() {
                Queued::Event(e) => e.message,
                Queued::Forget(uid) => format!("forget {uid}"),
            });
        }
        // m1 found the queue full and was dropped; the two forgets waited aside.
        assert_eq!(seen[..2], ["m0", "forget u0"]);
        let mut rest = seen[2..].to_vec();
        rest.sort();
        assert_eq!(rest, ["forget u1", "forget u2"]);
        assert_eq!(rec.dropped(), 1);
    }
}
