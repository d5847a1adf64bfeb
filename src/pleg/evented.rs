//! kubelet's evented PLEG (`pkg/kubelet/pleg/evented.go`): the runtime tells oxlet
//! when a container is created, started, stopped or deleted (CRI `GetContainerEvents`,
//! containerd 1.7 and later), so a container's exit reaches the pod cache within
//! milliseconds instead of up to a relist period later, and the full relist runs only
//! every [`EVENTED_RELIST_PERIOD`] (kubelet's 300 s) to catch what a stream may miss.
//!
//! As kubelet's:
//! - an event refreshes its pod in the cache and wakes the pod's worker (started →
//!   ContainerStarted, stopped → ContainerDied, deleted → ContainerDied; created only
//!   refreshes);
//! - the cache's global time moves on while events flow, so a worker waiting for news of
//!   a quiet pod is not held for the slow relist;
//! - health allows [`EVENTED_RELIST_THRESHOLD`] (10 min) between relists, and fails
//!   while the event channel is full.
//!
//! Where oxlet differs:
//! - kubelet moves the global time to "now" every 5 s, so a worker whose pod stays quiet
//!   (a sync for a probe result, say) waits up to 5 s where the generic PLEG made it wait
//!   1 s. oxlet moves it every [`GLOBAL_CACHE_UPDATE_PERIOD`] (500 ms), and only when
//!   every event received so far was handled, to [`EVENT_LAG`] before then.
//! - kubelet builds the pod's status from the event alone; oxlet reads the pod again (one
//!   filtered listing and the statuses), because the event carries only its own sandbox,
//!   and the status must also hold older sandboxes' containers and the termination
//!   messages kubelet reads from files.
//! - kubelet gives up on the stream after 5 failed attempts and relists every second from
//!   then on; oxlet relists every second only while the stream is down, and resubscribes
//!   with back-off (1 s doubling to 30 s).
//! - a container that stopped with exit 137 and no OOM reason is read once more
//!   [`OOM_EVENT_GRACE`] later, and its worker woken again when it turned `OOMKilled`:
//!   containerd 2.x may send its OOM event just after the exit. The second read is a
//!   timer of the loop, not a wait inside it: a loop held back would hand the workers a
//!   view older than what they did since (a sandbox they stopped still ready).

use std::time::Duration;

use futures::StreamExt as _;
use futures::future::BoxFuture;
use k8s_cri::v1 as cri;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{EventKind, GenericPleg, PodLifecycleEvent, RELIST_PERIOD};
use crate::cri::{ContainerEvents, CriError};
use crate::kuberuntime::{ContainerState, ContainerStatus, EventPod, RuntimeReader};

/// How long after an exit 137 the runtime's OOM event may still come. containerd 2.x's
/// shim can publish `TaskOOM` some milliseconds after `TaskExit` when the kernel kills
/// the whole cgroup (`memory.oom.group`), and only the OOM event makes the reason
/// `OOMKilled`; read before it, the container shows `Error`. kubelet's relist, a second
/// apart, seldom reads that soon; this PLEG reads at once, so it reads such a container
/// again this much later.
pub(crate) const OOM_EVENT_GRACE: Duration = Duration::from_millis(250);

/// Only an exit this recent may still turn into an OOM kill.
const FRESH_EXIT: Duration = Duration::from_secs(2);

/// kubelet's `eventedPlegRelistPeriod`: the full relist beside the event stream.
pub(crate) const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(300);
/// kubelet's `eventedPlegRelistThreshold`: the PLEG is unhealthy without a relist this long.
pub(crate) const EVENTED_RELIST_THRESHOLD: Duration = Duration::from_secs(600);
/// How often the cache's global time moves on while events flow (kubelet: every 5 s).
pub(crate) const GLOBAL_CACHE_UPDATE_PERIOD: Duration = Duration::from_millis(500);
/// How far behind "now" the global time is set: containerd queues an event before the
/// call that caused it returns, so what is still in flight after every received event
/// was handled is at most this old.
pub(crate) const EVENT_LAG: Duration = Duration::from_millis(100);
/// How long the start-up waits for `GetContainerEvents` to be refused. containerd 1.7
/// and 2.x answer the call only with the first event, so an open call is a live stream.
pub(crate) const SUBSCRIBE_PROBE: Duration = Duration::from_secs(1);
/// The first wait before resubscribing after the stream failed.
pub(crate) const RESUBSCRIBE_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between resubscriptions.
pub(crate) const RESUBSCRIBE_MAX: Duration = Duration::from_secs(30);

type Subscribing = BoxFuture<'static, Result<ContainerEvents, CriError>>;

/// The event stream's state.
pub(crate) enum Stream {
    /// The call is made and not yet answered (containerd answers with the first event).
    Opening(Subscribing),
    /// Events flow.
    Open(ContainerEvents),
    /// The stream failed: the PLEG relists every second until it resubscribes at `retry_at`.
    Down { retry_at: Instant },
}

/// What the stream did next.
enum Step {
    Opened(ContainerEvents),
    Event(Box<cri::ContainerEventResponse>),
    Failed(String),
    Retry,
}

impl Stream {
    /// A stream to open at once (for a restarted PLEG).
    pub(crate) fn resubscribe() -> Stream {
        Stream::Down {
            retry_at: Instant::now(),
        }
    }

    fn is_down(&self) -> bool {
        matches!(self, Stream::Down { .. })
    }

    /// Cancel-safe: every future it polls lives in `self`.
    async fn next_step(&mut self) -> Step {
        match self {
            Stream::Opening(call) => match call.await {
                Ok(events) => Step::Opened(events),
                Err(e) => Step::Failed(e.to_string()),
            },
            Stream::Open(events) => match events.next().await {
                Some(Ok(event)) => Step::Event(Box::new(event)),
                Some(Err(e)) => Step::Failed(e.to_string()),
                None => Step::Failed("the runtime ended the stream".into()),
            },
            Stream::Down { retry_at } => {
                tokio::time::sleep_until(*retry_at).await;
                Step::Retry
            }
        }
    }
}

fn subscribe(reader: RuntimeReader) -> Subscribing {
    Box::pin(async move { reader.container_events().await })
}

/// Which PLEG the runtime allows, found by subscribing once.
pub(crate) enum PlegChoice {
    /// `GetContainerEvents` is served (or held open): the evented PLEG, on this stream.
    Evented(Stream),
    /// The runtime does not implement it (containerd 1.6): the generic PLEG.
    Generic(CriError),
    /// `featureGates: {EventedPLEG: false}`: the generic PLEG, the runtime not asked.
    GateOff,
}

impl PlegChoice {
    /// The start-up line's reason for the choice.
    pub(crate) fn reason(&self) -> String {
        match self {
            PlegChoice::Evented(Stream::Down { .. }) => format!(
                "the runtime's GetContainerEvents failed at start; relisting every {} until it \
                 answers",
                crate::duration::format_go_duration(RELIST_PERIOD)
            ),
            PlegChoice::Evented(_) => format!(
                "the runtime streams container events (GetContainerEvents); relisting every {} \
                 beside them",
                crate::duration::format_go_duration(EVENTED_RELIST_PERIOD)
            ),
            PlegChoice::Generic(e) => format!(
                "the runtime does not implement GetContainerEvents ({e}); relisting every {}",
                crate::duration::format_go_duration(RELIST_PERIOD)
            ),
            PlegChoice::GateOff => format!(
                "the EventedPLEG feature gate is false; relisting every {}",
                crate::duration::format_go_duration(RELIST_PERIOD)
            ),
        }
    }

    /// The PLEG's name, kubelet's: `EventedPLEG` or `GenericPLEG`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            PlegChoice::Evented(_) => "EventedPLEG",
            PlegChoice::Generic(_) | PlegChoice::GateOff => "GenericPLEG",
        }
    }
}

/// Subscribe and wait up to [`SUBSCRIBE_PROBE`] for a refusal: `Unimplemented` chooses
/// the generic PLEG, anything else (an answer, a held call, another error) the evented one.
/// With the EventedPLEG gate off (`gate_on` false), the generic PLEG without asking.
pub(crate) async fn choose_pleg(reader: &RuntimeReader, gate_on: bool) -> PlegChoice {
    if !gate_on {
        return PlegChoice::GateOff;
    }
    let mut call = subscribe(reader.clone());
    match tokio::time::timeout(SUBSCRIBE_PROBE, &mut call).await {
        Err(_) => PlegChoice::Evented(Stream::Opening(call)),
        Ok(Ok(events)) => {
            crate::metrics::kubelet().evented_pleg_conn_successes.inc();
            PlegChoice::Evented(Stream::Open(events))
        }
        Ok(Err(e)) if e.code() == Some(tonic::Code::Unimplemented) => PlegChoice::Generic(e),
        Ok(Err(e)) => {
            crate::metrics::kubelet().evented_pleg_conn_errors.inc();
            warn!(error = %e, "Evented PLEG: subscribing to container events failed; retrying");
            PlegChoice::Evented(Stream::Down {
                retry_at: Instant::now() + RESUBSCRIBE_INITIAL,
            })
        }
    }
}

/// The evented PLEG: the generic one relisting slowly, and the event stream.
pub(crate) struct EventedPleg {
    generic: GenericPleg,
    stream: Stream,
    backoff: Duration,
    /// Stopped containers to read again for a late OOM event: pod, container, when.
    late_oom: Vec<(EventPod, String, Instant)>,
}

impl EventedPleg {
    pub(crate) fn new(generic: GenericPleg, stream: Stream) -> Self {
        EventedPleg {
            generic,
            stream,
            backoff: RESUBSCRIBE_INITIAL,
            late_oom: Vec::new(),
        }
    }

    fn relist_period(&self) -> Duration {
        if self.stream.is_down() {
            RELIST_PERIOD
        } else {
            EVENTED_RELIST_PERIOD
        }
    }

    /// Events as they come, a relist every 300 s (every second while the stream is
    /// down), and the cache's global time every 5 s, until cancelled.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        self.generic.stats.set_evented(&self.generic.events);
        let mut next_relist = Instant::now() + self.relist_period();
        let mut next_global = Instant::now() + GLOBAL_CACHE_UPDATE_PERIOD;
        loop {
            let down = self.stream.is_down();
            let next_oom_read = self.late_oom.iter().map(|(_, _, at)| *at).min();
            // Biased, the stream first: the global time moves only when no received
            // event waits to be handled.
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                step = self.stream.next_step() => {
                    if self.on_step(step).await {
                        // Down, or back up: what happened meanwhile is only in a relist.
                        next_relist = Instant::now();
                    }
                }
                () = tokio::time::sleep_until(next_relist) => {
                    self.generic.relist().await;
                    next_relist = Instant::now() + self.relist_period();
                }
                () = tokio::time::sleep_until(next_oom_read.unwrap_or(next_relist)), if next_oom_read.is_some() => {
                    self.read_late_ooms().await;
                }
                () = tokio::time::sleep_until(next_global), if !down => {
                    let now = Instant::now();
                    self.generic.cache.update_time(now.checked_sub(EVENT_LAG).unwrap_or(now));
                    next_global = now + GLOBAL_CACHE_UPDATE_PERIOD;
                }
            }
        }
    }

    /// Acts on one step of the stream; true when the stream went down or was reopened.
    async fn on_step(&mut self, step: Step) -> bool {
        let k = crate::metrics::kubelet();
        match step {
            Step::Opened(events) => {
                k.evented_pleg_conn_successes.inc();
                debug!("Evented PLEG: container event stream open");
                self.stream = Stream::Open(events);
                false
            }
            Step::Event(event) => {
                self.backoff = RESUBSCRIBE_INITIAL;
                self.on_event(*event).await;
                false
            }
            Step::Failed(reason) => {
                k.evented_pleg_conn_errors.inc();
                warn!(
                    error = %reason,
                    retryIn = %crate::duration::format_go_duration(self.backoff),
                    "Evented PLEG: the container event stream failed; relisting every second until it is back"
                );
                self.stream = Stream::Down {
                    retry_at: Instant::now() + self.backoff,
                };
                self.backoff = (self.backoff * 2).min(RESUBSCRIBE_MAX);
                true
            }
            Step::Retry => {
                info!("Evented PLEG: subscribing to container events again");
                self.stream = Stream::Opening(subscribe(self.generic.runtime.clone()));
                true
            }
        }
    }

    /// One event: read its pod again into the cache, then wake the pod's worker.
    async fn on_event(&mut self, event: cri::ContainerEventResponse) {
        let now_nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let latency = (now_nanos - event.created_at).max(0) as f64 / 1e9;
        crate::metrics::kubelet()
            .evented_pleg_conn_latency
            .observe(latency);
        let kind = cri::ContainerEventType::try_from(event.container_event_type).ok();
        let Some(pod) = RuntimeReader::event_pod(&event) else {
            tracing::trace!(containerID = %event.container_id, "Evented PLEG: event for a sandbox oxlet did not make");
            return;
        };
        debug!(
            pod = %format!("{}/{}", pod.namespace, pod.name),
            podUID = %pod.uid,
            containerID = %event.container_id,
            event = kind.map_or("unknown", |k| k.as_str_name()),
            "Evented PLEG: received a container event"
        );
        self.refresh(&pod, &event.container_id, kind).await;
        let plegs = match kind {
            Some(cri::ContainerEventType::ContainerStartedEvent) => {
                Some(EventKind::ContainerStarted)
            }
            Some(
                cri::ContainerEventType::ContainerStoppedEvent
                | cri::ContainerEventType::ContainerDeletedEvent,
            ) => Some(EventKind::ContainerDied),
            Some(cri::ContainerEventType::ContainerCreatedEvent) | None => None,
        };
        if let Some(kind) = plegs {
            self.generic.send(PodLifecycleEvent {
                uid: pod.uid,
                kind,
                container_id: event.container_id,
            });
        }
    }

    /// The stopped containers due for their second read: each pod read again, and its
    /// worker woken when the container turned `OOMKilled` since.
    async fn read_late_ooms(&mut self) {
        let now = Instant::now();
        let (due, later) = std::mem::take(&mut self.late_oom)
            .into_iter()
            .partition(|(_, _, at)| *at <= now);
        self.late_oom = later;
        for (pod, id, _) in due {
            self.refresh(&pod, &id, None).await;
            let turned = self.generic.cache.get(&pod.uid).is_some_and(|s| {
                s.containers.iter().any(|c| {
                    c.id == id && c.reason == crate::pod::TerminatedReason::OomKilled.as_str()
                })
            });
            debug!(pod = %format!("{}/{}", pod.namespace, pod.name), podUID = %pod.uid, containerID = %id, oomKilled = turned, "Evented PLEG: an exit 137 read again for the runtime's late OOM event");
            if turned {
                info!(pod = %format!("{}/{}", pod.namespace, pod.name), podUID = %pod.uid, containerID = %id, reason = "OOMKilled", "container exited: the runtime's OOM event came after its exit");
                self.generic.send(PodLifecycleEvent {
                    uid: pod.uid,
                    kind: EventKind::ContainerDied,
                    container_id: id,
                });
            }
        }
    }

    /// The pod's status read again into the cache; a container that stopped is logged
    /// with its exit code and reason, as the generic PLEG logs it, and read again later
    /// when its OOM event may still come.
    async fn refresh(&mut self, pod: &EventPod, id: &str, kind: Option<cri::ContainerEventType>) {
        let start = Instant::now();
        let read = self
            .generic
            .runtime
            .get_pod_status(&pod.uid, &pod.name, &pod.namespace)
            .await;
        match read {
            Ok(status) => {
                if kind == Some(cri::ContainerEventType::ContainerStoppedEvent)
                    && let Some(c) = status
                        .containers
                        .iter()
                        .find(|c| c.id == id && c.state == ContainerState::Exited)
                {
                    info!(pod = %format!("{}/{}", pod.namespace, pod.name), podUID = %pod.uid, container = %c.name, containerID = %c.id, exitCode = c.exit_code, reason = %c.reason, "container exited");
                    if awaits_oom_event(c, std::time::SystemTime::now()) {
                        let at = Instant::now() + OOM_EVENT_GRACE;
                        self.late_oom.push((pod.clone(), id.to_string(), at));
                    }
                }
                self.generic.cache.set(&pod.uid, status, start);
            }
            Err(e) => {
                debug!(podUID = %pod.uid, error = %e, "Evented PLEG: cannot read pod status; the next relist will");
                self.generic.cache.set_error(&pod.uid, e, start);
                self.generic.retry.insert(pod.uid.clone());
            }
        }
    }
}

/// Whether `c` exited with 137 (SIGKILL) less than [`FRESH_EXIT`] before `now` with a
/// reason other than the runtime's `OOMKilled`: its OOM event may be on its way.
fn awaits_oom_event(c: &ContainerStatus, now: std::time::SystemTime) -> bool {
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let fresh = i64::try_from(FRESH_EXIT.as_nanos()).unwrap_or(i64::MAX);
    c.state == ContainerState::Exited
        && c.exit_code == 137
        && (c.reason.is_empty() || c.reason == "Error")
        && now.saturating_sub(c.finished_at) < fresh
}

#[cfg(test)]
#[path = "evented_tests.rs"]
mod tests;
