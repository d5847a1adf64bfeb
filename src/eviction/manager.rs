//! The eviction manager's loop (kubelet's `managerImpl.synchronize`): every period,
//! or when the memory notification fires, observe the signals, decide which
//! thresholds are met (soft ones after their grace, kept met until minimum reclaim
//! is regained), hold the pressure conditions for the transition period, reclaim
//! node-level disk first, then evict at most one pod and wait for its cleanup.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::locks::ReadWriteLocked as _;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::config::{EvictionConfig, Threshold};
use super::messages::eviction_message;
use super::rank::{DiskSources, explain, pod_stats, rank};
use super::reclaim::ThresholdNotifier;
use super::signals::{Observations, fresh, fs_signals, observe};
use crate::contracts::Signal;
use crate::contracts::{DiskReclaimer, DiskTarget, Eviction, Evictor};
use crate::contracts::{LatestReadings, Snapshot};
use crate::pod::is_critical;
use crate::pod::pod_uid;
use crate::stats::VolumeUsage;
use crate::status::{Pressure, PressureSource};

/// kubelet's `evictionMonitoringPeriod`.
const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// kubelet's `podCleanupTimeout` and its poll.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
const CLEANUP_POLL: Duration = Duration::from_secs(1);
/// kubelet's `immediateEvictionGracePeriodSeconds`, for hard thresholds.
const IMMEDIATE_GRACE_SECONDS: i64 = 1;

/// After a memcg notification, how long to wait for readings newer than it, and how
/// often to look.
const NOTIFIED_READINGS_WAIT: Duration = Duration::from_secs(3);
const NOTIFIED_READINGS_POLL: Duration = Duration::from_millis(100);

/// After a reclaim step removed something, how long its space may take to show
/// (containerd's snapshot garbage collection), and how often to look.
pub(crate) const RECLAIM_SETTLE: Duration = Duration::from_secs(3);
const RECLAIM_SETTLE_POLL: Duration = Duration::from_millis(250);

/// How often a manager without readings yet looks for the first ones.
const FIRST_READINGS_POLL: Duration = Duration::from_secs(1);

/// The period; `OXLET_TEST_EVICTION_PERIOD_MS` shortens it for tests.
pub(crate) fn monitoring_period() -> Duration {
    std::env::var("OXLET_TEST_EVICTION_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(MONITORING_PERIOD, Duration::from_millis)
}

/// What `/debug/eviction` serves (kubelet has no such endpoint).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    /// The pressure conditions now True.
    pub conditions: Vec<&'static str>,
    /// The last observation of each signal.
    pub observations: BTreeMap<String, super::signals::Observation>,
    /// The thresholds met in the last cycle, as `signal<value`.
    pub thresholds_met: Vec<String>,
    /// The last pod evicted, `ns/name`.
    pub last_eviction: Option<String>,
}

/// The shared view of [`Status`].
#[derive(Debug, Default)]
pub(crate) struct StatusView(RwLock<Status>);

impl StatusView {
    pub(crate) fn get(&self) -> Status {
        self.0.read_locked().clone()
    }
    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.0.write_locked());
    }
}

/// What the manager is built from.
pub(crate) struct ManagerDeps {
    pub cfg: EvictionConfig,
    pub readings: Arc<LatestReadings>,
    pub volumes: Arc<VolumeUsage>,
    /// The pods' allocatable memory, when `allocatableMemory.available` is observed.
    pub allocatable_memory: Option<i64>,
    /// `--root-dir`: its filesystem is re-read after disk reclaim.
    pub root_dir: PathBuf,
    pub reclaimers: Vec<Arc<dyn DiskReclaimer>>,
    /// How long space freed by a reclaim step may take to show ([`RECLAIM_SETTLE`]).
    pub reclaim_settle: Duration,
    /// kubelet's memcg notifiers: one for `memory.available` (the root cgroup) and,
    /// with pods' allocatable enforced, one for `allocatableMemory.available` (kubepods).
    pub notifiers: Vec<(Signal, Arc<dyn ThresholdNotifier>)>,
    pub target: Arc<dyn Evictor>,
    pub pressure: Arc<PressureSource>,
    pub status: Arc<StatusView>,
}

/// The manager and what it remembers between cycles.
pub(crate) struct Manager {
    d: ManagerDeps,
    /// Thresholds (indices into the config) met and acted on last cycle.
    met: Vec<usize>,
    /// Thresholds met (before grace) last cycle, for the crossing log.
    seen: HashSet<usize>,
    first_observed: HashMap<usize, Instant>,
    /// Memory, disk, PID: when last observed under pressure.
    last_pressure: [Option<Instant>; 3],
    last_obs: Observations,
    /// Thresholds met last cycle only because of their minimum reclaim (logged once).
    held_for_reclaim: HashSet<usize>,
}

/// Whether the image filesystem is the root dir's (the same capacity: the readings
/// carry no device number).
fn shared_image_fs(obs: &Observations) -> bool {
    match (
        obs.get(&Signal::NodeFsAvailable),
        obs.get(&Signal::ImageFsAvailable),
    ) {
        (Some(n), Some(i)) => n.capacity == i.capacity,
        _ => false,
    }
}

/// Whether images live on a filesystem of their own (a capacity other than the root
/// dir's); without both readings, they are taken to share it, which counts more.
fn dedicated_image_fs(obs: &Observations) -> bool {
    match (
        obs.get(&Signal::NodeFsAvailable),
        obs.get(&Signal::ImageFsAvailable),
    ) {
        (Some(n), Some(i)) => n.capacity != i.capacity,
        _ => false,
    }
}

/// kubelet's `thresholdsMet`: a threshold is met when its amount (plus minimum
/// reclaim, when enforced) is above what is available.
fn met(
    thresholds: &[Threshold],
    which: impl IntoIterator<Item = usize>,
    obs: &Observations,
    min_reclaim: bool,
) -> Vec<usize> {
    which
        .into_iter()
        .filter(|&i| {
            let t = &thresholds[i];
            let Some(o) = obs.get(&t.signal) else {
                return false;
            };
            let mut amount = t.value.amount(o.capacity);
            if min_reclaim {
                amount += t.min_reclaim.map_or(0, |m| m.amount(o.capacity));
            }
            amount > o.available
        })
        .collect()
}

/// Which condition a signal drives (0 memory, 1 disk, 2 PID).
fn condition_of(signal: Signal) -> usize {
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => 0,
        Signal::PidAvailable => 2,
        _ => 1,
    }
}

const CONDITIONS: [&str; 3] = ["MemoryPressure", "DiskPressure", "PIDPressure"];

/// Which filesystem a disk signal is about.
fn disk_target(signal: Signal) -> Option<DiskTarget> {
    match signal {
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => Some(DiskTarget::NodeFs),
        Signal::ImageFsAvailable
        | Signal::ImageFsInodesFree
        | Signal::ContainerFsAvailable
        | Signal::ContainerFsInodesFree => Some(DiskTarget::ImageFs),
        _ => None,
    }
}

/// How many ranked pods the `-v=2` ranking line names (the rest are counted).
const RANKING_LOGGED: usize = 20;

fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

impl Manager {
    pub(crate) fn new(d: ManagerDeps) -> Self {
        Manager {
            d,
            met: Vec::new(),
            seen: HashSet::new(),
            first_observed: HashMap::new(),
            last_pressure: [None; 3],
            last_obs: Observations::new(),
            held_for_reclaim: HashSet::new(),
        }
    }

    /// One cycle (kubelet's `synchronize`): observe the signals, find the thresholds
    /// met, set the node's conditions, then evict at most one pod; the pod evicted, if any.
    pub(crate) async fn synchronize(&mut self, now: Instant, wall: SystemTime) -> Option<Arc<Pod>> {
        let Some(snapshot) = self.d.readings.get().filter(|s| fresh(s, wall)) else {
            debug!("eviction manager: no recent readings, skipping the cycle");
            return None;
        };
        let obs = observe(&snapshot, self.d.allocatable_memory);
        let now_met = self.thresholds_met(&obs);
        self.record_observed_at(now, &now_met);
        let held = self.update_node_conditions(now);
        let actionable = self.actionable_thresholds(now, &now_met, &obs);
        self.met = actionable.clone();
        self.last_obs = obs.clone();
        self.publish_status(held, &obs, &now_met);
        self.arm_notifiers(&snapshot);
        // kubelet's localStorageEviction comes before the thresholds: a pod over its
        // emptyDir, container or pod ephemeral-storage limit goes whatever the pressure.
        if let Some(pod) = self.local_storage_evictions(&snapshot, dedicated_image_fs(&obs)) {
            return Some(pod);
        }
        // Memory first, as kubelet's byEvictionPriority.
        let ts = &self.d.cfg.thresholds;
        let chosen = *actionable
            .iter()
            .min_by_key(|i| condition_of(ts[**i].signal) != 0)?;
        let t = ts[chosen];
        if let Some(target) = disk_target(t.signal)
            && self.reclaim(target, &obs).await
        {
            return None;
        }
        self.rank_and_evict(t, &obs, &snapshot)
    }

    /// kubelet's `thresholdsMet`, twice: the thresholds crossed now, and those acted on
    /// last cycle that stay met until their minimum reclaim is available (sorted);
    /// each newly held or newly crossed one is logged.
    fn thresholds_met(&mut self, obs: &Observations) -> Vec<usize> {
        let ts = &self.d.cfg.thresholds;
        let mut now_met = met(ts, 0..ts.len(), obs, false);
        let mut held_for_reclaim = HashSet::new();
        for i in met(ts, self.met.iter().copied(), obs, true) {
            if !now_met.contains(&i) {
                now_met.push(i);
                held_for_reclaim.insert(i);
            }
        }
        for &i in &held_for_reclaim {
            if !self.held_for_reclaim.contains(&i) {
                let t = &ts[i];
                let o = &obs[&t.signal];
                let needed =
                    t.value.amount(o.capacity) + t.min_reclaim.map_or(0, |m| m.amount(o.capacity));
                info!(signal = %t.signal, threshold = %t.value, observed = o.available, needed, "eviction manager: threshold no longer crossed, but still met until its minimum reclaim is available");
            }
        }
        self.held_for_reclaim = held_for_reclaim;
        now_met.sort_unstable();
        for &i in &now_met {
            if !self.seen.contains(&i) {
                let t = &ts[i];
                let o = &obs[&t.signal];
                info!(signal = %t.signal, threshold = %t.value, observed = o.available, hard = t.is_hard(),
                    "eviction manager: threshold crossed: {} {} < {} ({})", t.signal, t.signal.readable(o.available),
                    t.signal.readable(t.value.amount(o.capacity)), if t.is_hard() { "hard, acted on now" } else { "soft, acted on after its grace period" });
            }
        }
        self.seen = now_met.iter().copied().collect();
        now_met
    }

    /// kubelet's `thresholdsFirstObservedAt` and `nodeConditionsLastObservedAt`: when
    /// each met threshold was first seen met, and when each condition last had pressure.
    fn record_observed_at(&mut self, now: Instant, now_met: &[usize]) {
        let ts = &self.d.cfg.thresholds;
        self.first_observed.retain(|i, _| now_met.contains(i));
        for &i in now_met {
            self.first_observed.entry(i).or_insert(now);
            self.last_pressure[condition_of(ts[i].signal)] = Some(now);
        }
    }

    /// kubelet's `nodeConditionsObservedSince`: a pressure condition stays True for the
    /// transition period after its last pressure. Sets them; memory, disk, PID held.
    fn update_node_conditions(&self, now: Instant) -> [bool; 3] {
        let period = self.d.cfg.transition_period;
        let held = self
            .last_pressure
            .map(|t| t.is_some_and(|t| now.duration_since(t) < period));
        let before = self.d.pressure.get();
        let pressure = Pressure {
            memory: held[0],
            disk: held[1],
            pid: held[2],
        };
        if pressure != before {
            info!(
                memory = pressure.memory,
                disk = pressure.disk,
                pid = pressure.pid,
                "eviction manager: node pressure conditions changed"
            );
        }
        self.d.pressure.set(pressure);
        held
    }

    /// kubelet's `thresholdsMetGracePeriod` and `thresholdsUpdatedStats`: the met
    /// thresholds past their grace, and with a reading newer than last cycle's.
    fn actionable_thresholds(
        &self,
        now: Instant,
        now_met: &[usize],
        obs: &Observations,
    ) -> Vec<usize> {
        let ts = &self.d.cfg.thresholds;
        now_met
            .iter()
            .copied()
            .filter(|i| {
                let grace = ts[*i].grace.unwrap_or_default();
                self.first_observed
                    .get(i)
                    .is_some_and(|t| now.duration_since(*t) >= grace)
            })
            .filter(|i| {
                let s = ts[*i].signal;
                self.last_obs.get(&s).is_none_or(|l| l.time != obs[&s].time)
            })
            .collect()
    }

    /// Updates what `/debug/eviction` serves: the conditions held, the observations
    /// and the thresholds met this cycle.
    fn publish_status(&self, held: [bool; 3], obs: &Observations, now_met: &[usize]) {
        let ts = &self.d.cfg.thresholds;
        self.d.status.update(|s| {
            s.conditions = CONDITIONS
                .iter()
                .zip(held)
                .filter(|(_, h)| *h)
                .map(|(c, _)| *c)
                .collect();
            s.observations = obs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            s.thresholds_met = now_met
                .iter()
                .map(|i| format!("{}<{}", ts[*i].signal, ts[*i].value))
                .collect();
        });
    }

    /// kubelet's rank-then-evict for the threshold acted on: the active pods ranked for
    /// its signal, and the first that is not critical and was running evicted.
    fn rank_and_evict(
        &self,
        t: Threshold,
        obs: &Observations,
        snapshot: &Snapshot,
    ) -> Option<Arc<Pod>> {
        let sources = DiskSources::of(t.signal, dedicated_image_fs(obs));
        let stats = pod_stats(snapshot, &self.d.volumes, sources);
        let ranked = rank(t.signal, &self.d.target.active_pods(), &stats);
        if ranked.is_empty() {
            info!(signal = %t.signal, "eviction manager: no pods to evict");
            return None;
        }
        info!(signal = %t.signal, ranking = %explain(&ranked, RANKING_LOGGED), "eviction manager: pods ranked for eviction");
        let amount = obs.get(&t.signal).map_or(0, |o| t.value.amount(o.capacity));
        let available = obs.get(&t.signal).map_or(0, |o| o.available);
        let crossed = format!(
            "{} {} < {}",
            t.signal,
            t.signal.readable(available),
            t.signal.readable(amount)
        );
        let of = ranked.len();
        for (place, r) in ranked.into_iter().enumerate() {
            let usage = r.usage.map_or("no stats".into(), |u| t.signal.readable(u));
            let rank = format!(
                "ranked {} of {of} (usage {usage}, request {}, priority {})",
                place + 1,
                t.signal.readable(r.request),
                r.priority
            );
            let pod = r.pod;
            let uid = pod_uid(&pod).to_string();
            if is_critical(&pod) {
                info!(pod = %pod_ref(&pod), podUID = %uid, cause = %crossed, "eviction manager: not evicting a critical pod, {rank}");
                continue;
            }
            let grace = self.eviction_grace(t, &pod);
            let (message, annotations) =
                eviction_message(t.signal, amount, obs, &pod, stats.get(&uid));
            info!(pod = %pod_ref(&pod), podUID = %uid, cause = %crossed, message = %message, gracePeriod = grace,
                "eviction manager: evicting pod: {crossed}, {rank}; grace {grace}s");
            if self.d.target.evict(
                pod.clone(),
                Eviction {
                    message,
                    annotations,
                    grace_seconds: Some(grace),
                },
            ) {
                crate::metrics::evicted(t.signal.as_str());
                let name = pod_ref(&pod);
                self.d.status.update(|s| s.last_eviction = Some(name));
                return Some(pod);
            }
        }
        None
    }

    /// The grace period an eviction gives: kubelet's immediate one for a hard
    /// threshold, else the pod's own capped at `evictionMaxPodGracePeriod`.
    fn eviction_grace(&self, t: Threshold, pod: &Pod) -> i64 {
        if t.is_hard() {
            IMMEDIATE_GRACE_SECONDS
        } else {
            let own = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            own.min(self.d.cfg.max_pod_grace_seconds)
        }
    }

    /// Evicts every pod over a local storage limit (kubelet's `localStorageEviction`),
    /// with the immediate grace; the first one evicted, if any. A container's writable
    /// layer comes from the advisor's `rootfs` reading; it counts against a container
    /// only when the image filesystem is not `dedicated`.
    fn local_storage_evictions(
        &self,
        snapshot: &crate::contracts::Snapshot,
        dedicated: bool,
    ) -> Option<Arc<Pod>> {
        use super::local_storage::{
            IMMEDIATE_GRACE_SECONDS as LOCAL_GRACE, WritableLayers, violations,
        };
        let mut layers = WritableLayers::default();
        for p in &snapshot.pods {
            let per_pod = layers.0.entry(p.uid.clone()).or_default();
            for c in &p.containers {
                if let Some(fs) = &c.rootfs {
                    per_pod.insert(c.name.clone(), fs.used_bytes);
                }
            }
        }
        let pods = self.d.target.active_pods();
        let mut first = None;
        for v in violations(&pods, &self.d.volumes, &layers, dedicated) {
            let Some(pod) = pods.iter().find(|p| pod_uid(p) == v.pod_uid) else {
                continue;
            };
            if is_critical(pod) {
                info!(pod = %pod_ref(pod), podUID = %v.pod_uid, message = %v.message, "eviction manager: a critical pod is over a local storage limit; not evicted");
                continue;
            }
            info!(pod = %pod_ref(pod), podUID = %v.pod_uid, cause = %v.message, gracePeriod = LOCAL_GRACE, "eviction manager: evicting pod over its local storage limit; grace {LOCAL_GRACE}s");
            if self.d.target.evict(
                pod.clone(),
                Eviction {
                    grace_seconds: Some(LOCAL_GRACE),
                    ..Eviction::new(v.message.clone())
                },
            ) {
                crate::metrics::evicted(v.kind.signal());
                let name = pod_ref(pod);
                self.d.status.update(|s| s.last_eviction = Some(name));
                first.get_or_insert_with(|| pod.clone());
            }
        }
        first
    }

    /// Runs the disk reclaimers for `target`, then re-reads the filesystem; true
    /// when no threshold is met any more (kubelet's `reclaimNodeLevelResources`).
    async fn reclaim(&self, target: DiskTarget, obs: &Observations) -> bool {
        // Without a dedicated image filesystem the images live on nodefs too, and
        // kubelet reclaims both for either signal (`buildSignalToNodeReclaimFuncs`).
        let shared = shared_image_fs(obs);
        let steps: Vec<_> = self
            .d
            .reclaimers
            .iter()
            .filter(|r| {
                r.targets().contains(&target)
                    || (shared && r.targets().contains(&DiskTarget::ImageFs))
            })
            .collect();
        if steps.is_empty() {
            return false;
        }
        let mut removed_any = false;
        for r in steps {
            match r.reclaim().await {
                Ok(done) => {
                    removed_any |= done.removed > 0 || done.bytes > 0;
                    info!(
                        step = r.name(),
                        bytes = done.bytes,
                        removed = done.removed,
                        "eviction manager: reclaimed node-level resources"
                    );
                }
                Err(e) => warn!(error = %e, "eviction manager: reclaim step failed"),
            }
        }
        // The advisor refreshes filesystems every 10 s: re-read the root dir's now.
        // The image filesystem keeps the last round's reading. containerd frees a
        // removed container's snapshot in its background garbage collection, so when
        // something was removed the filesystem is read again for a moment before an
        // eviction is decided on (kubelet's re-read after reclaim).
        let started = Instant::now();
        loop {
            let after = self.reread_root_fs(obs, shared).await;
            let still = met(
                &self.d.cfg.thresholds,
                self.met.iter().copied(),
                &after,
                true,
            );
            if still.is_empty() {
                info!("eviction manager: node-level resources reclaimed, no eviction needed");
                return true;
            }
            if !removed_any || started.elapsed() >= self.d.reclaim_settle {
                return false;
            }
            tokio::time::sleep(RECLAIM_SETTLE_POLL).await;
        }
    }

    /// `obs` with the root dir's filesystem read now (and the image filesystem's, when
    /// it is the same one).
    async fn reread_root_fs(&self, obs: &Observations, shared: bool) -> Observations {
        let mut after = obs.clone();
        let root = self.d.root_dir.clone();
        if let Ok(Some(fs)) =
            tokio::task::spawn_blocking(move || crate::contracts::FsReading::of(&root)).await
        {
            fs_signals(
                &mut after,
                Some(&fs),
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
            );
            if shared {
                fs_signals(
                    &mut after,
                    Some(&fs),
                    Signal::ImageFsAvailable,
                    Signal::ImageFsInodesFree,
                );
            }
        }
        after
    }

    /// Re-arms each memory notification at kubelet's value: capacity − threshold +
    /// the cgroup's inactive file pages, in usage terms (the root cgroup for
    /// `memory.available`, the `pods` system container for the allocatable signal).
    fn arm_notifiers(&self, snapshot: &crate::contracts::Snapshot) {
        for (signal, n) in &self.d.notifiers {
            let node = &snapshot.node;
            let reading = match signal {
                Signal::AllocatableMemoryAvailable => {
                    let pods = node.system_containers.iter().find(|c| c.name == "pods");
                    let capacity = self
                        .d
                        .allocatable_memory
                        .and_then(|a| u64::try_from(a).ok());
                    pods.and_then(|c| c.cgroup.memory).zip(capacity)
                }
                _ => node.cgroup.memory.map(|m| (m, node.memory_capacity_bytes)),
            };
            let Some((mem, capacity)) = reading else {
                continue;
            };
            let available = capacity.saturating_sub(mem.working_set_bytes);
            // The largest threshold is crossed first: the lowest usage to be told at.
            let at = self
                .d
                .cfg
                .thresholds
                .iter()
                .filter(|t| t.signal == *signal)
                .map(|t| {
                    super::memcg::usage_threshold(
                        available,
                        mem.working_set_bytes,
                        mem.usage_bytes,
                        t.value,
                    )
                })
                .min();
            let Some(at) = at else { continue };
            if let Err(e) = n.set_threshold(at) {
                warn!(signal = %signal, error = %e, "eviction manager: cannot arm the memory threshold notification");
            }
        }
    }

    /// Cycles until cancelled; after an eviction, waits for the pod's cleanup.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let period = monitoring_period();
        loop {
            let evicted = self.synchronize(Instant::now(), SystemTime::now()).await;
            if let Some(pod) = evicted {
                let uid = pod_uid(&pod).to_string();
                let deadline = Instant::now() + CLEANUP_TIMEOUT;
                while !self.d.target.cleaned_up(&uid) && Instant::now() < deadline {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(CLEANUP_POLL) => {}
                    }
                }
                if !self.d.target.cleaned_up(&uid) {
                    info!(pod = %pod_ref(&pod), podUID = %uid, "eviction manager: timed out waiting for the pod to be cleaned up");
                }
            }
            let waits: Vec<_> = self.d.notifiers.iter().map(|(_, n)| n.crossed()).collect();
            let crossed = async {
                if waits.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures::future::select_all(waits).await;
            };
            // Until the advisor's first round, look again soon: the notifiers are armed
            // from readings, and a period's wait would leave them unarmed that long.
            let wait = if self.d.readings.get().is_none() {
                period.min(FIRST_READINGS_POLL)
            } else {
                period
            };
            let notified = tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => false,
                () = crossed => true,
            };
            if notified {
                // The readings come every second: the cycle the kernel asks for must
                // see one taken after the crossing, or it would see the old usage.
                let at = SystemTime::now();
                debug!(
                    "eviction manager: memory threshold notification; waiting for fresh readings"
                );
                let deadline = Instant::now() + NOTIFIED_READINGS_WAIT;
                while Instant::now() < deadline
                    && self
                        .d
                        .readings
                        .get()
                        .is_none_or(|s| s.node.cgroup.time < at)
                {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(NOTIFIED_READINGS_POLL) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
