//! The manager's cycle on synthetic readings, a fake target and fake reclaimers,
//! with a controlled clock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::*;
use crate::contracts::{PodReading, Snapshot};
use crate::contracts::{ReclaimError, Reclaimed};
use crate::contracts::{ThresholdValue, Thresholds};
use crate::eviction::signals::tests::{cgroup, snapshot};

#[derive(Default)]
struct FakeTarget {
    pods: Vec<Arc<Pod>>,
    evicted: Mutex<Vec<(String, String, i64)>>,
}

impl Evictor for FakeTarget {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }
    fn evict(&self, pod: Arc<Pod>, eviction: Eviction) -> bool {
        let name = pod.metadata.name.clone().unwrap();
        let grace = eviction
            .grace_seconds
            .expect("the eviction manager sets a grace");
        self.evicted
            .lock()
            .unwrap()
            .push((name, eviction.message, grace));
        true
    }
    fn cleaned_up(&self, _: &str) -> bool {
        true
    }
}

struct FakeReclaimer(AtomicUsize);

/// A reclaimer that says it removed a container (whose space never shows).
struct RemovingReclaimer;

impl DiskReclaimer for RemovingReclaimer {
    fn name(&self) -> &'static str {
        "removing"
    }
    fn targets(&self) -> &'static [DiskTarget] {
        &[DiskTarget::NodeFs]
    }
    fn reclaim(&self) -> BoxFuture<'_, Result<Reclaimed, ReclaimError>> {
        Box::pin(async {
            Ok(Reclaimed {
                bytes: 0,
                removed: 1,
            })
        })
    }
}

impl DiskReclaimer for FakeReclaimer {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn targets(&self) -> &'static [DiskTarget] {
        &[DiskTarget::NodeFs]
    }
    fn reclaim(&self) -> BoxFuture<'_, Result<Reclaimed, ReclaimError>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async { Ok(Reclaimed::default()) })
    }
}

#[derive(Default)]
struct FakeNotifier(AtomicU64);

impl ThresholdNotifier for FakeNotifier {
    fn set_threshold(&self, usage_bytes: u64) -> Result<(), ReclaimError> {
        self.0.store(usage_bytes, Ordering::Relaxed);
        Ok(())
    }
    fn crossed(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

fn pod(name: &str, priority: i32, grace: i64) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(name.into());
    p.spec = Some(PodSpec {
        priority: Some(priority),
        termination_grace_period_seconds: Some(grace),
        containers: vec![Container {
            name: "c".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    Arc::new(p)
}

fn pod_reading(uid: &str, t: SystemTime, working_set: u64) -> PodReading {
    PodReading {
        uid: uid.into(),
        name: uid.into(),
        namespace: "ns".into(),
        started_at: t,
        cgroup: Some(cgroup(t, working_set)),
        cgroup_path: None,
        containers: vec![],
        volumes: vec![],
    }
}

struct Bed {
    m: Manager,
    readings: Arc<LatestReadings>,
    target: Arc<FakeTarget>,
    pressure: Arc<PressureSource>,
    status: Arc<StatusView>,
    reclaimer: Arc<FakeReclaimer>,
    notifier: Arc<FakeNotifier>,
}

fn bed(hard: &[(&str, &str)], soft: &[(&str, &str)], root_dir: &str) -> Bed {
    let hard = Thresholds::parse(hard.iter().copied()).unwrap();
    let soft_t = Thresholds::parse(soft.iter().copied()).unwrap();
    let grace = soft
        .iter()
        .map(|(s, _)| (Signal::parse(s).unwrap(), Duration::from_secs(60)))
        .collect();
    let mut cfg = EvictionConfig::new(&hard, &soft_t, &grace, &BTreeMap::new());
    cfg.transition_period = Duration::from_secs(300);
    cfg.max_pod_grace_seconds = 20;
    let target = Arc::new(FakeTarget {
        pods: vec![
            pod("static-critical", 2_000_000_000, 30),
            pod("small", 0, 30),
            pod("big", 0, 5),
            pod("important", 100, 30),
        ],
        ..Default::default()
    });
    let (readings, pressure, status) = Default::default();
    let reclaimer = Arc::new(FakeReclaimer(AtomicUsize::new(0)));
    let notifier = Arc::new(FakeNotifier::default());
    let readings: Arc<LatestReadings> = readings;
    let pressure: Arc<PressureSource> = pressure;
    let status: Arc<StatusView> = status;
    let m = Manager::new(ManagerDeps {
        cfg,
        readings: readings.clone(),
        volumes: Default::default(),
        allocatable_memory: None,
        root_dir: root_dir.into(),
        reclaimers: vec![reclaimer.clone()],
        reclaim_settle: Duration::from_millis(300),
        notifiers: vec![(Signal::MemoryAvailable, notifier.clone())],
        target: target.clone(),
        pressure: pressure.clone(),
        status: status.clone(),
    });
    Bed {
        m,
        readings,
        target,
        pressure,
        status,
        reclaimer,
        notifier,
    }
}

/// A round at `secs`: the node's 8 GiB with `used` bytes in use, and the pods.
fn round(secs: u64, used: u64) -> Snapshot {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
    let mut s = snapshot(t);
    s.node.cgroup = cgroup(t, used);
    s.pods = vec![
        pod_reading("static-critical", t, 4 << 30),
        pod_reading("small", t, 1 << 20),
        pod_reading("big", t, 1 << 30),
        pod_reading("important", t, 2 << 30),
    ];
    s
}

impl Bed {
    async fn cycle(&mut self, start: Instant, secs: u64, used: u64) -> Option<String> {
        let s = round(secs, used);
        self.readings.set(s);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        self.m
            .synchronize(start + Duration::from_secs(secs), wall)
            .await
            .map(|p| p.metadata.name.clone().unwrap())
    }
}

const GI: u64 = 1 << 30;

#[tokio::test]
async fn a_hard_memory_threshold_raises_pressure_and_evicts_the_top_non_critical_pod() {
    let mut b = bed(&[("memory.available", "1Gi")], &[], "/nonexistent");
    let t0 = Instant::now();
    // 3 GiB available: nothing met, nothing said.
    assert_eq!(b.cycle(t0, 100, 5 * GI).await, None);
    assert!(!b.pressure.get().memory);
    // 512 MiB available.
    assert_eq!(
        b.cycle(t0, 101, 8 * GI - GI / 2).await.as_deref(),
        Some("big")
    );
    assert!(b.pressure.get().memory);
    let ev = b.target.evicted.lock().unwrap().clone();
    assert_eq!(
        ev.len(),
        1,
        "one eviction per cycle, the critical pod skipped"
    );
    assert_eq!(
        ev[0].1,
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "
    );
    assert_eq!(ev[0].2, 1, "hard thresholds: kubelet's immediate grace");
    let st = b.status.get();
    assert_eq!(st.conditions, ["MemoryPressure"]);
    assert_eq!(st.thresholds_met, ["memory.available<1Gi"]);
    assert_eq!(
        st.observations["memory.available"].available,
        (GI / 2) as i64
    );
    assert_eq!(st.last_eviction.as_deref(), Some("ns/big"));
    // Armed at capacity − threshold + inactive file (none here).
    assert_eq!(b.notifier.0.load(Ordering::Relaxed), 7 * GI);
}

#[tokio::test]
async fn a_soft_threshold_evicts_only_after_its_grace_with_the_capped_grace() {
    let mut b = bed(&[], &[("memory.available", "1Gi")], "/nonexistent");
    let t0 = Instant::now();
    let low = 8 * GI - GI / 2;
    assert_eq!(b.cycle(t0, 100, low).await, None);
    // The condition is True at once, before the grace.
    assert!(b.pressure.get().memory);
    assert_eq!(b.cycle(t0, 130, low).await, None);
    assert_eq!(b.cycle(t0, 161, low).await.as_deref(), Some("big"));
    // min(pod's 5 s, max 20 s).
    assert_eq!(b.target.evicted.lock().unwrap()[0].2, 5);
    // Recovering resets the grace.
    assert_eq!(b.cycle(t0, 170, 5 * GI).await, None);
    assert_eq!(b.cycle(t0, 180, low).await, None);
}

#[tokio::test]
async fn pressure_is_held_for_the_transition_period_after_the_last_met_observation() {
    let mut b = bed(&[("memory.available", "1Gi")], &[], "/nonexistent");
    let t0 = Instant::now();
    b.cycle(t0, 100, 8 * GI - GI / 2).await;
    assert!(b.pressure.get().memory);
    b.cycle(t0, 200, 5 * GI).await;
    assert!(b.pressure.get().memory, "held: 100 s < 300 s");
    assert_eq!(b.status.get().thresholds_met, Vec::<String>::new());
    b.cycle(t0, 401, 5 * GI).await;
    assert!(!b.pressure.get().memory);
    assert!(b.status.get().conditions.is_empty());
}

#[tokio::test]
async fn minimum_reclaim_keeps_a_threshold_met_until_regained() {
    let mut b = bed(&[("memory.available", "1Gi")], &[], "/nonexistent");
    b.m.d.cfg.thresholds[0].min_reclaim = Some(ThresholdValue::Quantity(GI as i64));
    let t0 = Instant::now();
    assert!(b.cycle(t0, 100, 8 * GI - GI / 2).await.is_some());
    // 1.5 GiB available: above the threshold, below threshold + 1 GiB.
    assert!(b.cycle(t0, 101, 8 * GI - 3 * GI / 2).await.is_some());
    // 2.5 GiB: resolved.
    assert_eq!(b.cycle(t0, 102, 8 * GI - 5 * GI / 2).await, None);
}

#[tokio::test]
async fn stale_or_unchanged_readings_do_not_evict() {
    let mut b = bed(&[("memory.available", "1Gi")], &[], "/nonexistent");
    let t0 = Instant::now();
    let low = 8 * GI - GI / 2;
    b.readings.set(round(100, low));
    // Read 10 s later: stale, skipped.
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(110);
    assert!(b.m.synchronize(t0, wall).await.is_none());
    assert!(!b.pressure.get().memory);
    assert!(b.cycle(t0, 120, low).await.is_some());
    // The same round again: the threshold is met but its reading is not new.
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(121);
    assert!(
        b.m.synchronize(t0 + Duration::from_secs(121), wall)
            .await
            .is_none()
    );
}

#[tokio::test]
async fn disk_pressure_reclaims_first_and_skips_eviction_when_reclaim_resolved_it() {
    // The snapshot's nodefs has 20 000 bytes available; any real filesystem more.
    let dir = tempfile::tempdir().unwrap();
    let mut b = bed(
        &[("nodefs.available", "30000")],
        &[],
        dir.path().to_str().unwrap(),
    );
    let t0 = Instant::now();
    assert_eq!(b.cycle(t0, 100, GI).await, None);
    assert_eq!(b.reclaimer.0.load(Ordering::Relaxed), 1);
    assert!(b.pressure.get().disk);
    assert!(b.target.evicted.lock().unwrap().is_empty());
    // When the re-read fails the snapshot stands: still met, a pod is evicted (no
    // volume stats: every pod is unranked, the first non-critical one goes).
    let mut b = bed(&[("nodefs.available", "30000")], &[], "/nonexistent/dir");
    assert_eq!(b.cycle(t0, 100, GI).await.as_deref(), Some("small"));
    assert_eq!(b.reclaimer.0.load(Ordering::Relaxed), 1);
    assert_eq!(
        b.target.evicted.lock().unwrap()[0].1,
        "The node was low on resource: ephemeral-storage. Threshold quantity: 30000, available: 20000. "
    );
}

/// containerd frees a removed container's snapshot in the background: after a step
/// that removed something, the filesystem is read again for the settle time before a
/// pod is evicted; after one that removed nothing, at once.
#[tokio::test]
async fn after_a_removal_the_filesystem_is_given_time_before_an_eviction() {
    let t0 = Instant::now();
    let mut b = bed(&[("nodefs.available", "30000")], &[], "/nonexistent/dir");
    let started = Instant::now();
    assert_eq!(b.cycle(t0, 100, GI).await.as_deref(), Some("small"));
    assert!(started.elapsed() < Duration::from_millis(300));
    let mut b = bed(&[("nodefs.available", "30000")], &[], "/nonexistent/dir");
    b.m.d.reclaimers.push(Arc::new(RemovingReclaimer));
    let started = Instant::now();
    assert_eq!(b.cycle(t0, 100, GI).await.as_deref(), Some("small"));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn pid_pressure_sets_its_own_condition() {
    // 194 304 pids available in the snapshot.
    let mut b = bed(&[("pid.available", "200k")], &[], "/nonexistent");
    let t0 = Instant::now();
    assert!(b.cycle(t0, 100, GI).await.is_some());
    let p = b.pressure.get();
    assert!(p.pid && !p.memory && !p.disk);
    assert_eq!(b.status.get().conditions, ["PIDPressure"]);
}

#[test]
fn the_image_fs_is_shared_when_it_has_the_root_dirs_capacity() {
    use crate::eviction::signals::Observation;
    let at = |capacity| Observation {
        available: 1,
        capacity,
        time: std::time::SystemTime::UNIX_EPOCH,
    };
    let mut obs = Observations::new();
    obs.insert(Signal::NodeFsAvailable, at(100));
    assert!(!super::shared_image_fs(&obs), "no imagefs reading");
    obs.insert(Signal::ImageFsAvailable, at(50));
    assert!(
        !super::shared_image_fs(&obs),
        "a dedicated image filesystem"
    );
    obs.insert(Signal::ImageFsAvailable, at(100));
    assert!(super::shared_image_fs(&obs));
}

/// kubelet's `addAllocatableThresholds` and its second memcg notifier: with pods'
/// allocatable enforced, the hard `memory.available` threshold also applies to the
/// `pods` system container against the kubepods limit.
#[tokio::test]
async fn pods_allocatable_has_the_copied_hard_threshold_and_its_own_notification() {
    let mut b = bed(&[("memory.available", "1Gi")], &[], "/nonexistent");
    b.m.d.cfg.enforce_pod_allocatable();
    // kubepods may use 5.5 GiB and uses 5 GiB (the snapshot's `pods` container).
    b.m.d.allocatable_memory = Some((5 * GI + GI / 2) as i64);
    let alloc = Arc::new(FakeNotifier::default());
    b.m.d
        .notifiers
        .push((Signal::AllocatableMemoryAvailable, alloc.clone()));
    let t0 = Instant::now();
    // The node has 3 GiB available: only the allocatable threshold is met.
    assert_eq!(b.cycle(t0, 100, 5 * GI).await.as_deref(), Some("big"));
    assert!(b.pressure.get().memory);
    let st = b.status.get();
    assert_eq!(st.thresholds_met, ["allocatableMemory.available<1Gi"]);
    let ev = b.target.evicted.lock().unwrap().clone();
    assert_eq!(
        ev[0].1,
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. "
    );
    // Each notifier armed on its own cgroup: the node at 8 − 1 GiB, kubepods at
    // 5.5 − 1 GiB (no inactive file in either reading).
    assert_eq!(b.notifier.0.load(Ordering::Relaxed), 7 * GI);
    assert_eq!(alloc.0.load(Ordering::Relaxed), 4 * GI + GI / 2);
}
