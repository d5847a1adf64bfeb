//! The pod lifecycle event generator: relists the runtime every second, diffs each
//! container's state against the previous relist, refreshes the pod cache for pods
//! that changed, and sends ContainerStarted / ContainerDied / ContainerRemoved events.

mod cache;
mod evented;

use crate::locks::Locked as _;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub(crate) use cache::{InspectError, PodCache};
pub(crate) use evented::{EventedPleg, PlegChoice, Stream, choose_pleg};

use crate::kuberuntime::RuntimeReader;
use crate::kuberuntime::{ContainerState, PodRuntimeStatus, RuntimePod};

/// kubelet's relist period.
pub(crate) const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// PLEG is unhealthy when no relist succeeded for this long.
pub(crate) const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Capacity of the event channel; events beyond it are dropped (and counted).
pub(crate) const EVENT_CHANNEL_CAPACITY: usize = 1000;

/// kubelet's PLEG event types, by their kubelet names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names, reason = "kubelet's names")]
pub(crate) enum EventKind {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
}

impl EventKind {
    /// kubelet's name of the event type.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventKind::ContainerStarted => "ContainerStarted",
            EventKind::ContainerDied => "ContainerDied",
            EventKind::ContainerRemoved => "ContainerRemoved",
        }
    }
}

/// One lifecycle event of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodLifecycleEvent {
    pub uid: String,
    pub kind: EventKind,
    pub container_id: String,
}

/// A container's (or sandbox's) state as seen by one relist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

/// Every container and sandbox of one listed pod with its state. A pod holds a
/// handful, so a vector of borrowed IDs beats a map of cloned ones (this runs for
/// every pod, twice, every second).
fn pod_states(pod: &RuntimePod) -> Vec<(&str, PlegState)> {
    let containers = pod.containers.iter().map(|c| {
        let s = match c.state {
            ContainerState::Running => PlegState::Running,
            ContainerState::Exited => PlegState::Exited,
            // CRI "created" counts as unknown, as in kubelet.
            _ => PlegState::Unknown,
        };
        (c.id.as_str(), s)
    });
    let sandboxes = pod.sandboxes.iter().map(|s| {
        let st = if s.ready {
            PlegState::Running
        } else {
            PlegState::Exited
        };
        (s.id.as_str(), st)
    });
    containers.chain(sandboxes).collect()
}

/// Events for one container moving from `old` to `new` (kubelet's `generateEvents`).
fn events_for(uid: &str, id: &str, old: PlegState, new: PlegState) -> Vec<PodLifecycleEvent> {
    if old == new {
        return Vec::new();
    }
    let ev = |kind| PodLifecycleEvent {
        uid: uid.to_string(),
        kind,
        container_id: id.to_string(),
    };
    match new {
        PlegState::Running => vec![ev(EventKind::ContainerStarted)],
        PlegState::Exited => vec![ev(EventKind::ContainerDied)],
        PlegState::Unknown => Vec::new(),
        PlegState::NonExistent => match old {
            PlegState::Exited => vec![ev(EventKind::ContainerRemoved)],
            _ => vec![
                ev(EventKind::ContainerDied),
                ev(EventKind::ContainerRemoved),
            ],
        },
    }
}

/// Diffs two relists into events.
fn diff(
    old: &HashMap<String, RuntimePod>,
    new: &HashMap<String, RuntimePod>,
) -> Vec<PodLifecycleEvent> {
    let mut events = Vec::new();
    for (uid, pod) in new {
        let o = old.get(uid).map(pod_states).unwrap_or_default();
        diff_pod(uid, &o, &pod_states(pod), &mut events);
    }
    for (uid, pod) in old.iter().filter(|(uid, _)| !new.contains_key(*uid)) {
        diff_pod(uid, &pod_states(pod), &[], &mut events);
    }
    events
}

/// One pod's events: each ID's state before and now, absent counting as NonExistent.
fn diff_pod(
    uid: &str,
    old: &[(&str, PlegState)],
    new: &[(&str, PlegState)],
    events: &mut Vec<PodLifecycleEvent>,
) {
    let state_in = |v: &[(&str, PlegState)], id: &str| {
        v.iter()
            .find(|(i, _)| *i == id)
            .map_or(PlegState::NonExistent, |(_, s)| *s)
    };
    for (id, now) in new {
        events.extend(events_for(uid, id, state_in(old, id), *now));
    }
    for (id, before) in old
        .iter()
        .filter(|(id, _)| !new.iter().any(|(i, _)| i == id))
    {
        events.extend(events_for(uid, id, *before, PlegState::NonExistent));
    }
}

/// True when a cached pod status shows exactly the containers and sandboxes (and
/// their states) that a listing found.
fn consistent(cached: &PodRuntimeStatus, listed: &RuntimePod) -> bool {
    let containers = cached.containers.len() == listed.containers.len()
        && listed.containers.iter().all(|l| {
            cached
                .containers
                .iter()
                .any(|c| c.id == l.id && c.state == l.state)
        });
    let sandboxes = cached.sandboxes.len() == listed.sandboxes.len()
        && listed.sandboxes.iter().all(|l| {
            cached
                .sandboxes
                .iter()
                .any(|s| s.id == l.id && s.ready == l.ready)
        });
    containers && sandboxes
}

/// Logs each container that died in this relist, with its exit code and reason.
fn log_exits(events: &[PodLifecycleEvent], uid: &str, pod: &RuntimePod, status: &PodRuntimeStatus) {
    for ev in events
        .iter()
        .filter(|e| e.uid == uid && e.kind == EventKind::ContainerDied)
    {
        if let Some(c) = status.containers.iter().find(|c| c.id == ev.container_id) {
            info!(pod = %pod.pod_ref(), podUID = %uid, container = %c.name, containerID = %c.id, exitCode = c.exit_code, reason = %c.reason, "container exited");
        }
    }
}

/// kubelet's per-relist gauges: pods with a ready sandbox, containers by state.
fn running_metrics(pods: &[RuntimePod]) {
    let mut states: HashMap<&'static str, i64> = HashMap::new();
    for c in pods.iter().flat_map(|p| &p.containers) {
        let state = match c.state {
            ContainerState::Created => "created",
            ContainerState::Running => "running",
            ContainerState::Exited => "exited",
            ContainerState::Unknown => "unknown",
        };
        *states.entry(state).or_default() += 1;
    }
    let running = pods
        .iter()
        .filter(|p| p.sandboxes.iter().any(|s| s.ready))
        .count();
    crate::metrics::kubelet().set_running(running, &states);
}

/// Relist timing, for health, metrics and benchmarks.
#[derive(Debug, Default)]
pub(crate) struct PlegStats {
    /// Duration of the last relist, in nanoseconds.
    pub last_relist_nanos: AtomicU64,
    pub relists: AtomicU64,
    pub discarded_events: AtomicU64,
    last_success: Mutex<Option<Instant>>,
    /// 1 while the evented PLEG runs (its relist is slow, so its threshold is longer).
    evented: AtomicU8,
    /// The event channel, whose being full makes the evented PLEG unhealthy.
    channel: Mutex<Option<mpsc::WeakSender<PodLifecycleEvent>>>,
}

impl PlegStats {
    /// Health is judged as the evented PLEG's from now on: a relist within
    /// [`evented::EVENTED_RELIST_THRESHOLD`], and room in `channel`.
    fn set_evented(&self, channel: &mpsc::Sender<PodLifecycleEvent>) {
        *self.channel.locked() = Some(channel.downgrade());
        self.evented.store(1, Ordering::Relaxed);
    }

    /// How long without a successful relist makes the PLEG unhealthy.
    fn relist_threshold(&self) -> Duration {
        if self.evented.load(Ordering::Relaxed) == 1 {
            evented::EVENTED_RELIST_THRESHOLD
        } else {
            RELIST_THRESHOLD
        }
    }

    /// kubelet's PLEG health check (the generic one's, with the evented PLEG's longer
    /// threshold and its full-channel check when that runs); like kubelet's it also
    /// publishes when the PLEG was last seen active (`kubelet_pleg_last_seen_seconds`).
    pub(crate) fn healthy(&self) -> Result<(), PlegUnhealthy> {
        let full = self
            .channel
            .locked()
            .as_ref()
            .and_then(mpsc::WeakSender::upgrade);
        if let Some(tx) = full.filter(|tx| tx.capacity() == 0) {
            return Err(PlegUnhealthy::ChannelFull(tx.max_capacity()));
        }
        let last = *self.last_success.locked();
        if let Some(t) = last {
            let at = std::time::SystemTime::now() - t.elapsed();
            if let Ok(unix) = at.duration_since(std::time::UNIX_EPOCH) {
                crate::metrics::kubelet()
                    .pleg_last_seen
                    .set(unix.as_secs() as f64);
            }
        }
        let threshold = self.relist_threshold();
        match last {
            None => Err(PlegUnhealthy::NeverRelisted),
            Some(t) if t.elapsed() > threshold => Err(PlegUnhealthy::Stale {
                ago: t.elapsed(),
                threshold: crate::duration::format_go_duration(threshold),
            }),
            Some(_) => Ok(()),
        }
    }
}

/// Why the PLEG is unhealthy (kubelet's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlegUnhealthy {
    #[error("pleg has yet to be successful")]
    NeverRelisted,
    #[error("pleg was last seen active {ago:?} ago; threshold is {threshold}")]
    Stale { ago: Duration, threshold: String },
    #[error("EventedPLEG: pleg event channel capacity is full with {0} events")]
    ChannelFull(usize),
}

/// The generic (relisting) PLEG.
pub(crate) struct GenericPleg {
    runtime: RuntimeReader,
    cache: Arc<PodCache>,
    events: mpsc::Sender<PodLifecycleEvent>,
    stats: Arc<PlegStats>,
    previous: HashMap<String, RuntimePod>,
    /// Pods whose status read failed; retried on the next relist.
    retry: HashSet<String>,
}

impl GenericPleg {
    pub(crate) fn new(
        runtime: RuntimeReader,
        cache: Arc<PodCache>,
        events: mpsc::Sender<PodLifecycleEvent>,
        stats: Arc<PlegStats>,
    ) -> Self {
        GenericPleg {
            runtime,
            cache,
            events,
            stats,
            previous: HashMap::new(),
            retry: HashSet::new(),
        }
    }

    /// Relists every second until cancelled.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RELIST_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => self.relist().await,
            }
        }
    }

    /// One relist: list, diff, refresh the cache of changed pods, send events.
    pub(crate) async fn relist(&mut self) {
        let start = Instant::now();
        let k = crate::metrics::kubelet();
        if let Some(prev) = *self.stats.last_success.locked() {
            k.pleg_relist_interval
                .observe(start.duration_since(prev).as_secs_f64());
        }
        let pods = match self.runtime.get_pods().await {
            Ok(p) => p,
            Err(e) => {
                k.pleg_relist_duration
                    .observe(start.elapsed().as_secs_f64());
                warn!(error = %e, "PLEG relist failed");
                return;
            }
        };
        *self.stats.last_success.locked() = Some(start);
        running_metrics(&pods);
        let current: HashMap<String, RuntimePod> =
            pods.into_iter().map(|p| (p.uid.clone(), p)).collect();
        let events = diff(&self.previous, &current);
        let mut changed: HashSet<String> = events.iter().map(|e| e.uid.clone()).collect();
        changed.extend(self.retry.drain());
        for uid in &changed {
            let Some(pod) = current.get(uid) else {
                // Gone from the runtime: kubelet's `updateCache` forgets it (a reader
                // then gets an empty status once this relist's time is set below).
                self.cache.delete(uid);
                continue;
            };
            // A worker that just acted stored what it caused; when that matches this
            // listing there is nothing new to inspect.
            if let (Some(listed), Some(cached)) = (current.get(uid), self.cache.get(uid))
                && consistent(&cached, listed)
            {
                log_exits(&events, uid, listed, &cached);
                continue;
            }
            match self
                .runtime
                .get_pod_status(uid, &pod.name, &pod.namespace)
                .await
            {
                Ok(status) => {
                    log_exits(&events, uid, pod, &status);
                    self.cache.set(uid, status, start);
                }
                Err(e) => {
                    // kubelet's `Relist`: this pod's events are held back and its old
                    // record kept, so the next relist finds the same changes again.
                    warn!(pod = %pod.pod_ref(), podUID = %uid, error = %e, "PLEG: ignoring events for pod: cannot read its status; the next relist inspects it again");
                    self.cache.set_error(uid, e, start);
                    self.retry.insert(uid.clone());
                }
            }
        }
        self.cache.update_time(start);
        let mut records = current;
        for uid in &self.retry {
            match self.previous.remove(uid) {
                Some(old) => records.insert(uid.clone(), old),
                None => records.remove(uid),
            };
        }
        self.previous = records;
        for ev in events {
            if ev.kind == EventKind::ContainerRemoved || self.retry.contains(&ev.uid) {
                continue;
            }
            self.send(ev);
        }
        let took = start.elapsed();
        k.pleg_relist_duration.observe(took.as_secs_f64());
        self.stats
            .last_relist_nanos
            .store(took.as_nanos() as u64, Ordering::Relaxed);
        self.stats.relists.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(
            pods = self.previous.len(),
            tookUs = took.as_micros() as u64,
            "PLEG relist"
        );
    }

    /// One event to the sync loop; when the channel is full it is dropped and counted,
    /// as kubelet drops it.
    fn send(&self, ev: PodLifecycleEvent) {
        if self.events.try_send(ev).is_err() {
            self.stats.discarded_events.fetch_add(1, Ordering::Relaxed);
            crate::metrics::kubelet().pleg_discard_events.inc();
        }
    }

    /// The pods found by the last relist (for housekeeping).
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Vec<RuntimePod> {
        self.previous.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::{RuntimeContainer, RuntimeSandbox};

    fn pod(uid: &str, containers: &[(&str, ContainerState)]) -> (String, RuntimePod) {
        (
            uid.to_string(),
            RuntimePod {
                uid: uid.into(),
                sandboxes: vec![RuntimeSandbox {
                    id: format!("sb-{uid}"),
                    ready: true,
                    attempt: 0,
                    created_at: 0,
                }],
                containers: containers
                    .iter()
                    .map(|(id, s)| RuntimeContainer {
                        id: id.to_string(),
                        sandbox_id: format!("sb-{uid}"),
                        name: id.to_string(),
                        state: *s,
                        hash: 0,
                        created_at: 0,
                    })
                    .collect(),
                ..Default::default()
            },
        )
    }

    fn kinds(mut evs: Vec<PodLifecycleEvent>) -> Vec<(String, EventKind)> {
        evs.sort_by(|a, b| a.container_id.cmp(&b.container_id));
        evs.into_iter().map(|e| (e.container_id, e.kind)).collect()
    }

    #[test]
    fn diff_generates_kubelet_events() {
        let old = HashMap::from([pod(
            "u",
            &[
                ("a", ContainerState::Running),
                ("b", ContainerState::Running),
                ("c", ContainerState::Exited),
            ],
        )]);
        let new = HashMap::from([pod(
            "u",
            &[
                ("a", ContainerState::Exited),
                ("b", ContainerState::Running),
                ("d", ContainerState::Running),
            ],
        )]);
        assert_eq!(
            kinds(diff(&old, &new)),
            vec![
                ("a".into(), EventKind::ContainerDied),
                ("c".into(), EventKind::ContainerRemoved),
                ("d".into(), EventKind::ContainerStarted),
            ]
        );
    }

    #[test]
    fn vanished_running_container_dies_then_is_removed() {
        let old = HashMap::from([pod("u", &[("a", ContainerState::Running)])]);
        let new = HashMap::new();
        let evs = kinds(diff(&old, &new));
        assert!(evs.contains(&("a".into(), EventKind::ContainerDied)));
        assert!(evs.contains(&("a".into(), EventKind::ContainerRemoved)));
        assert!(evs.contains(&("sb-u".into(), EventKind::ContainerRemoved)));
    }

    #[test]
    fn cached_status_matching_the_listing_is_consistent() {
        use crate::kuberuntime::{ContainerStatus, SandboxStatus};
        let (_, listed) = pod("u", &[("a", ContainerState::Running)]);
        let c = |state| ContainerStatus::for_test("a", "a", state);
        let mut cached = PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                id: "sb-u".into(),
                ready: true,
                attempt: 0,
                created_at: 0,
                ips: vec![],
                host_network: false,
            }],
            containers: vec![c(ContainerState::Running)],
            ..Default::default()
        };
        assert!(consistent(&cached, &listed));
        cached.containers[0] = c(ContainerState::Exited);
        assert!(
            !consistent(&cached, &listed),
            "a state change needs inspection"
        );
        cached.containers.clear();
        assert!(
            !consistent(&cached, &listed),
            "a new container needs inspection"
        );
    }

    #[test]
    fn created_state_is_not_an_event() {
        let old = HashMap::new();
        let new = HashMap::from([pod("u", &[("a", ContainerState::Created)])]);
        let evs = kinds(diff(&old, &new));
        assert_eq!(evs, vec![("sb-u".into(), EventKind::ContainerStarted)]);
    }
}

#[cfg(test)]
mod relist_tests;
