//! A whole round over a fake cgroup tree, a metric cache the test fills and a fake
//! evictor: which strategies act, on what, and what a stale cache changes (nothing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::advisor::ManagedPods;
use crate::cm::{CgroupFs, FakeCgroupFs, QosFile, fake_manager};
use crate::contracts::{Eviction, Evictor};
use crate::koordapi::{QosConfig, Strategies};
use crate::kuberuntime::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
use crate::metriccache::{MetricKind, Sample};
use crate::pleg::PodCache;

#[derive(Default)]
struct FakeEvictor(Mutex<Vec<(String, String)>>);

impl Evictor for FakeEvictor {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        Vec::new()
    }
    fn evict(&self, pod: Arc<Pod>, eviction: Eviction) -> bool {
        self.0
            .lock()
            .unwrap()
            .push((pod_uid(&pod).to_string(), eviction.message));
        true
    }
    fn cleaned_up(&self, _: &str) -> bool {
        true
    }
}

fn pod(uid: &str, cpu_request: Option<&str>) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(uid.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.annotations = Some([("kubernetes.io/config.source".into(), "api".into())].into());
    let requests = cpu_request.map(|c| BTreeMap::from([("cpu".to_string(), Quantity(c.into()))]));
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests,
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    Arc::new(p)
}

/// The pod labelled `koordinator.sh/qosClass: BE`.
fn koord_be(pod: Arc<Pod>) -> Arc<Pod> {
    let mut p = (*pod).clone();
    p.metadata.labels = Some([("koordinator.sh/qosClass".into(), "BE".into())].into());
    Arc::new(p)
}

struct Bed {
    qm: QosManager,
    fs: Arc<FakeCgroupFs>,
    cache: Arc<MetricCache>,
    evicted: Arc<FakeEvictor>,
    /// The runtime's view of the pods (the advisor's `ManagedPods` lists from it).
    pod_cache: Arc<PodCache>,
}

fn bed(cfg: QosConfig) -> Bed {
    let (cm, fs) = fake_manager(true);
    cm.setup().unwrap();
    let cache = Arc::new(MetricCache::default());
    let pods = Arc::new(PodManager::default());
    pods.add_or_update(pod("ls", Some("1")));
    pods.add_or_update(koord_be(pod("be-small", None)));
    pods.add_or_update(koord_be(pod("be-big", None)));
    // BestEffort by Kubernetes' class alone: not koordinator's BE.
    pods.add_or_update(pod("plain", None));
    let evicted = Arc::new(FakeEvictor::default());
    let pod_cache = Arc::new(PodCache::default());
    let cm = Arc::new(cm);
    let res = |cpu_milli, memory_bytes| NodeResources {
        cpu_milli,
        memory_bytes,
        ephemeral_storage_bytes: 0,
        pods: 110,
    };
    let qm = QosManager::new(QosDeps {
        cfg,
        updates: None,
        cache: cache.clone(),
        pods: pods.clone(),
        cm: cm.clone(),
        evictor: evicted.clone(),
        lister: Box::new(ManagedPods::new(pods, pod_cache.clone(), cm)),
        capacity: res(4000, 1000),
        allocatable: res(3800, 900),
        node: None,
        node_name: "n1".into(),
    });
    Bed {
        qm,
        fs,
        cache,
        evicted,
        pod_cache,
    }
}

fn fill(cache: &MetricCache, ts: i64, node_cpu: f64, node_mem: f64) {
    let s = |k, l: &[(&str, &str)], v| Sample::new(k, l, ts, v).unwrap();
    cache.append([
        s(MetricKind::NodeCpuUsage, &[], node_cpu),
        s(MetricKind::NodeMemoryUsage, &[], node_mem),
        s(MetricKind::PodCpuUsage, &[("pod_uid", "ls")], 1.0),
        s(MetricKind::PodCpuUsage, &[("pod_uid", "be-small")], 0.25),
        s(MetricKind::PodCpuUsage, &[("pod_uid", "be-big")], 0.25),
        s(MetricKind::PodMemoryUsage, &[("pod_uid", "ls")], 500.0),
        s(MetricKind::PodMemoryUsage, &[("pod_uid", "be-small")], 10.0),
        s(MetricKind::PodMemoryUsage, &[("pod_uid", "be-big")], 200.0),
    ]);
}

fn on(cpu: bool, mem: bool, reconcile: bool) -> QosConfig {
    QosConfig {
        enable: true,
        strategies: Strategies {
            cpu_suppress: cpu,
            memory_evict: mem,
            cgroup_reconcile: reconcile,
            cpu_evict: false,
            cpu_usage_evict: false,
        },
        cpu_suppress_policy: crate::koordapi::CpuSuppressPolicy::CfsQuota,
        ..QosConfig::default()
    }
}

const BE: &str = "root/kubepods/besteffort";
const BURSTABLE: &str = "root/kubepods/burstable";

#[test]
fn cpu_suppress_writes_the_best_effort_quota_and_skips_stale_rounds() {
    let mut b = bed(on(true, false, false));
    let now = Instant::now();
    // Nothing in the cache: no change.
    b.qm.round(10_000, now);
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, None);
    // 4 CPUs × 65 % = 2600m − LS 1000m − system max(2000 − 1500, 200) = 1100m.
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, now);
    let r = b.fs.resources(BE).unwrap();
    assert_eq!((r.cpu_quota, r.cpu_period), (Some(110_000), Some(100_000)));
    // Three seconds later the samples are stale: the quota stays.
    b.qm.round(13_000, now);
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(110_000));
    // Idle node: the increase is capped at 10 % of 400000 per round.
    fill(&b.cache, 14_000, 1.5, 100.0);
    b.qm.round(14_000, now);
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(140_000));
    assert!(
        b.evicted.0.lock().unwrap().is_empty(),
        "memory evict is off"
    );
}

#[test]
fn cpu_suppress_off_lifts_a_left_over_quota() {
    let b = bed(on(false, false, false));
    b.qm.d.cm.set_best_effort_cpu_quota(50_000).unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let fs = b.fs.clone();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(b.qm.run(cancel));
    assert_eq!(fs.resources(BE).unwrap().cpu_quota, Some(-1));
}

#[test]
fn a_new_configuration_applies_at_once_and_suppress_going_off_lifts_the_quota() {
    let mut b = bed(on(true, false, false));
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(110_000));
    let (tx, rx) = tokio::sync::watch::channel(on(true, false, false));
    b.qm.d.updates = Some(rx);
    let fs = b.fs.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async move {
        let cancel = CancellationToken::new();
        let run = tokio::spawn(b.qm.run(cancel.clone()));
        // The NodeSLO turns the thresholds off: the quota is lifted without a round.
        tx.send(on(false, false, false)).unwrap();
        let t = Instant::now();
        while fs.resources(BE).unwrap().cpu_quota != Some(-1) {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(5),
                "not lifted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        cancel.cancel();
        run.await.unwrap();
    });
}

#[test]
fn memory_evict_picks_best_effort_by_usage_then_cools_down() {
    let mut b = bed(on(false, true, false));
    let now = Instant::now();
    // 69 % of 1000 bytes: under 70 %.
    fill(&b.cache, 10_000, 1.0, 690.0);
    b.qm.round(10_000, now);
    assert!(b.evicted.0.lock().unwrap().is_empty());
    // 80 %: release 1000 × (80 − 68) % = 120 bytes: be-big (200) alone meets it.
    fill(&b.cache, 11_000, 1.0, 800.0);
    b.qm.round(11_000, now);
    let got = b.evicted.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "be-big");
    assert_eq!(
        got[0].1,
        "trigger by koordlet feature BEMemoryEvict, kill pod: be-big"
    );
    // Within the 4 s cool-down nothing more happens, even higher up.
    fill(&b.cache, 12_000, 1.0, 990.0);
    b.qm.round(12_000, now + Duration::from_secs(1));
    assert_eq!(b.evicted.0.lock().unwrap().len(), 1);
    // After it: 99 % wants 310 bytes; be-big counts as released (200), so be-small
    // goes too; the Burstable pod and the unlabelled BestEffort one never do.
    fill(&b.cache, 15_000, 1.0, 990.0);
    b.qm.round(15_000, now + Duration::from_secs(5));
    let uids: Vec<String> = b
        .evicted
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(u, _)| u.clone())
        .collect();
    assert_eq!(uids, ["be-big", "be-small"]);
}

/// The pod with koordinator's `eviction-policy` annotation listing `features`.
fn eviction_policy(pod: Arc<Pod>, features: &str) -> Arc<Pod> {
    let mut p = (*pod).clone();
    (p.metadata.annotations.get_or_insert_with(Default::default))
        .insert("koordinator.sh/eviction-policy".into(), features.into());
    Arc::new(p)
}

#[test]
fn memory_evict_honours_the_eviction_policy_and_a_gone_pod_releases_nothing_more() {
    let mut b = bed(on(false, true, false));
    // The biggest BE pod allows only CPU eviction; another allows memory eviction.
    let barred = eviction_policy(koord_be(pod("be-barred", None)), r#"["BECPUEvict"]"#);
    let listed = eviction_policy(koord_be(pod("be-listed", None)), r#"["BEMemoryEvict"]"#);
    b.qm.d.pods.add_or_update(barred);
    b.qm.d.pods.add_or_update(listed);
    let extra = |ts| {
        let s =
            |uid, v| Sample::new(MetricKind::PodMemoryUsage, &[("pod_uid", uid)], ts, v).unwrap();
        b.cache
            .append([s("be-barred", 600.0), s("be-listed", 50.0)]);
    };
    let uids = |b: &Bed| -> Vec<String> {
        let got = b.evicted.0.lock().unwrap();
        got.iter().map(|(u, _)| u.clone()).collect()
    };
    let now = Instant::now();
    // 80 %: 120 bytes to release; be-big (200) meets it, be-barred is never a victim.
    fill(&b.cache, 10_000, 1.0, 800.0);
    extra(10_000);
    b.qm.round(10_000, now);
    assert_eq!(uids(&b), ["be-big"]);
    // The next round right after the cool-down, be-big still here and still using
    // 200: it counts, nothing more goes.
    fill(&b.cache, 15_000, 1.0, 800.0);
    extra(15_000);
    b.qm.round(15_000, now + Duration::from_secs(5));
    assert_eq!(uids(&b), ["be-big"]);
    // be-big is gone, the node still at 80 %: it counts for nothing any more, so the
    // next victims in order go (be-listed 50, then be-small 10 are all that is left).
    b.qm.d.pods.remove("be-big");
    fill(&b.cache, 20_000, 1.0, 800.0);
    extra(20_000);
    b.qm.round(20_000, now + Duration::from_secs(10));
    assert_eq!(uids(&b), ["be-big", "be-listed", "be-small"]);
}

#[test]
fn cgroup_reconcile_puts_drifted_shares_back() {
    let mut b = bed(on(false, false, true));
    let drift = crate::cm::ResourceConfig {
        cpu_shares: Some(4096),
        ..Default::default()
    };
    b.fs.update(BE, &drift).unwrap();
    b.fs.update(BURSTABLE, &drift).unwrap();
    b.qm.round(10_000, Instant::now());
    assert_eq!(b.fs.resources(BE).unwrap().cpu_shares, Some(2));
    // No tracked Burstable pods: the least shares.
    assert_eq!(b.fs.resources(BURSTABLE).unwrap().cpu_shares, Some(2));
    // Nothing drifted: nothing written.
    assert!(b.qm.d.cm.reconcile_qos_shares().is_empty());
}

/// BestEffort pod and container cgroups in the fake tree, each with all of `cpus`
/// as the kernel would give them; returns their paths, top-down.
fn be_cgroups(b: &Bed, cpus: &str) -> Vec<String> {
    let mut paths = vec![BE.to_string()];
    for pod in ["podbe-big", "podbe-small"] {
        let p = format!("{BE}/{pod}");
        let c = format!("{p}/ctr1");
        b.fs.create(&c, &Default::default()).unwrap();
        paths.push(p);
        paths.push(c);
    }
    for p in &paths {
        b.fs.write_qos_file(p, QosFile::CpusetCpus, cpus).unwrap();
    }
    paths
}

/// 4 cores × 2 threads on one socket (siblings c and c+4), in the metric cache's
/// key-value store as the advisor's node info collector puts it.
fn smt_topology(cache: &MetricCache) {
    use crate::advisor::{CPU_INFO_KEY, NodeCpuInfo, Processor};
    let processor_infos = (0..8)
        .map(|c| Processor {
            cpu_id: c,
            core_id: (c % 4) as i64,
            socket_id: 0,
            node_id: 0,
            l3_id: None,
        })
        .collect();
    let info = NodeCpuInfo {
        processor_infos,
        ..Default::default()
    };
    cache.kv().set(CPU_INFO_KEY, &info).unwrap();
}

fn cpusets(b: &Bed, paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .map(|p| b.fs.qos_file(p, QosFile::CpusetCpus).unwrap_or_default())
        .collect()
}

/// The node at 0.2 cores with the LS pod idle at `ts`: 2600 − 200 = 2400m for
/// BestEffort at 65 %, 3 CPUs.
fn idle(cache: &MetricCache, ts: i64) {
    let s = |k, l: &[(&str, &str)], v| Sample::new(k, l, ts, v).unwrap();
    cache.append([
        s(MetricKind::NodeCpuUsage, &[], 0.2),
        s(MetricKind::NodeMemoryUsage, &[], 100.0),
        s(MetricKind::PodCpuUsage, &[("pod_uid", "ls")], 0.0),
    ]);
}

fn cpuset_policy() -> QosConfig {
    QosConfig {
        cpu_suppress_policy: crate::koordapi::CpuSuppressPolicy::Cpuset,
        ..on(true, false, false)
    }
}

#[test]
fn cpuset_policy_narrows_every_best_effort_cgroup_and_lifts_the_quota() {
    let mut b = bed(cpuset_policy());
    smt_topology(&b.cache);
    let paths = be_cgroups(&b, "0-7");
    b.qm.d.cm.set_best_effort_cpu_quota(50_000).unwrap();
    // Suppress 1100m (see the cfsQuota test): ⌈1.1⌉ = 2 CPUs, a sibling pair.
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0,4"; 5]);
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(-1));
    // An idle node at a 100 % threshold leaves 4000 − 200 = 3800m, 4 CPUs: growth
    // is capped at ⌈10 % of 8⌉ = 1 CPU a round.
    b.qm.d.cfg.cpu_suppress_threshold_percent = 100;
    idle(&b.cache, 11_000);
    b.qm.round(11_000, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0-1,4"; 5]);
    // The next round grows to the 4 wanted; a container narrowed from outside in
    // between gets the BestEffort set too.
    b.fs.write_qos_file(&paths[2], QosFile::CpusetCpus, "4")
        .unwrap();
    b.qm.round(11_000, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0-1,4-5"; 5]);
    b.qm.round(11_000, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0-1,4-5"; 5]);
}

#[test]
fn cpuset_writes_keep_v1_parents_around_their_children() {
    let mut b = bed(cpuset_policy());
    smt_topology(&b.cache);
    b.fs.enforce_v1_cpusets();
    let paths = be_cgroups(&b, "0-7");
    // Shrink: 8 → 2 CPUs, children first.
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0,4"; 5]);
    // Grow: 2 → 3 CPUs, parents first (written bottom-up alone, every child
    // write would be refused).
    idle(&b.cache, 11_000);
    b.qm.round(11_000, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0-1,4"; 5]);
    // The fake does refuse what v1 refuses.
    assert!(
        b.fs.write_qos_file(&paths[2], QosFile::CpusetCpus, "0-7")
            .is_err()
    );
    assert!(b.fs.write_qos_file(BE, QosFile::CpusetCpus, "0").is_err());
}

#[test]
fn switching_the_policy_puts_the_other_mechanism_back() {
    let mut b = bed(cpuset_policy());
    smt_topology(&b.cache);
    let paths = be_cgroups(&b, "0-7");
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0,4"; 5]);
    // cfsQuota: the quota is set and every BestEffort cgroup gets all CPUs back.
    b.qm.apply(on(true, false, false));
    b.qm.round(10_500, Instant::now());
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(110_000));
    assert_eq!(cpusets(&b, &paths), vec!["0-7"; 5]);
    // Back to cpuset: the quota is lifted, the set narrowed again.
    b.qm.apply(cpuset_policy());
    b.qm.round(10_500, Instant::now());
    assert_eq!(b.fs.resources(BE).unwrap().cpu_quota, Some(-1));
    assert_eq!(cpusets(&b, &paths), vec!["0,4"; 5]);
    // Suppress off: all CPUs at once, without a round.
    b.qm.apply(on(false, false, false));
    assert_eq!(cpusets(&b, &paths), vec!["0-7"; 5]);
}

#[test]
fn without_a_topology_the_online_cpus_are_used() {
    let mut b = bed(cpuset_policy());
    let dir = tempfile::tempdir().unwrap();
    let online = dir.path().join("online");
    std::fs::write(&online, "0-3\n").unwrap();
    b.qm.online_cpus = online;
    let paths = be_cgroups(&b, "0-3");
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["0-1"; 5]);
    // Without a cpuset file on the BestEffort cgroup nothing is written.
    let mut b = bed(cpuset_policy());
    b.qm.online_cpus = dir.path().join("online");
    b.fs.withhold(QosFile::CpusetCpus);
    fill(&b.cache, 10_000, 2.0, 100.0);
    b.qm.round(10_500, Instant::now());
    assert_eq!(b.fs.qos_file(BE, QosFile::CpusetCpus), None);
}

/// `pod` asking for `milli` of `kubernetes.io/batch-cpu`.
fn batch(pod: Arc<Pod>, milli: &str) -> Arc<Pod> {
    let mut p = (*pod).clone();
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.resources.get_or_insert_with(Default::default).requests = Some(BTreeMap::from([(
        "kubernetes.io/batch-cpu".to_string(),
        Quantity(milli.into()),
    )]));
    Arc::new(p)
}

/// BECPUEvict on by `policy` (satisfaction 40–60 %), with the two BE pods asking
/// 3000m and 2000m of batch CPU.
fn cpu_evict_bed(policy: crate::koordapi::CpuEvictPolicy) -> Bed {
    let mut cfg = on(false, false, false);
    cfg.strategies.cpu_evict = true;
    cfg.cpu_evict.satisfaction = Some((40, 60));
    cfg.cpu_evict.policy = policy;
    let b = bed(cfg);
    b.qm.d
        .pods
        .add_or_update(batch(koord_be(pod("be-big", None)), "3000"));
    b.qm.d
        .pods
        .add_or_update(batch(koord_be(pod("be-small", None)), "2000"));
    b
}

#[test]
fn cpu_evict_releases_batch_requests_after_its_cool_down() {
    let mut b = cpu_evict_bed(crate::koordapi::CpuEvictPolicy::EvictByRealLimit);
    let t0 = Instant::now();
    // BestEffort asked 5000m and has 1000m, all used: 20 % ≤ 40 %, release
    // 5000 × (60 − 20) % = 1999m (koordlet's float arithmetic, truncated).
    fill(&b.cache, 10_000, 2.0, 100.0);
    cpu_evict::fill_be_tier(&b.cache, 10_000, 1000.0, 5000.0, 1000.0);
    b.qm.round(10_000, t0);
    assert!(
        b.evicted.0.lock().unwrap().is_empty(),
        "koordlet's CPU evictor starts in its 20 s cool-down"
    );
    let later = t0 + cpu_evict::COOL_DOWN;
    b.qm.round(10_000, later);
    let got = b.evicted.0.lock().unwrap().clone();
    // Both used 250m: be-small's 250/2000 is the larger share, and its 2000m meets it.
    assert_eq!(
        got,
        [(
            "be-small".to_string(),
            "trigger by koordlet feature BECPUEvict, kill pod: be-small".to_string()
        )]
    );
    // Cooling down again after evicting.
    fill(&b.cache, 11_000, 2.0, 100.0);
    cpu_evict::fill_be_tier(&b.cache, 11_000, 1000.0, 5000.0, 500.0);
    b.qm.round(11_000, later + Duration::from_secs(1));
    assert_eq!(b.evicted.0.lock().unwrap().len(), 1);
}

/// The Node as the node informer reads it, sent to the manager's view.
fn read_node(
    b: &mut Bed,
    info: crate::koord::slo::NodeInfo,
) -> tokio::sync::watch::Sender<Option<crate::koord::slo::NodeInfo>> {
    let (tx, rx) = tokio::sync::watch::channel(Some(info));
    b.qm.d.node = Some(rx);
    tx
}

#[test]
fn evict_by_allocatable_fires_against_the_nodes_batch_cpu_allocatable() {
    let mut b = cpu_evict_bed(crate::koordapi::CpuEvictPolicy::EvictByAllocatable);
    // 1900m used of a real limit of 5000m (38 %): not high enough by the real limit.
    fill(&b.cache, 10_000, 2.0, 100.0);
    cpu_evict::fill_be_tier(&b.cache, 10_000, 1900.0, 5000.0, 5000.0);
    let later = Instant::now() + cpu_evict::COOL_DOWN;
    b.qm.round(10_000, later);
    assert!(
        b.evicted.0.lock().unwrap().is_empty(),
        "no Node read: no batch-cpu allocatable, nothing evicted"
    );
    // The Node's batch-cpu allocatable is 2000m: 95 % used, 40 % ≤ 40 % satisfied;
    // release 5000 × (60 − 40) % = 999m (Go's float arithmetic, truncated).
    let _tx = read_node(
        &mut b,
        crate::koord::slo::NodeInfo {
            batch_cpu: Some(2000),
            ..Default::default()
        },
    );
    b.qm.round(10_000, later);
    let got = b.evicted.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "be-small");
}

#[test]
fn the_nodes_reservation_is_kept_from_best_effort_cpus() {
    let mut b = bed(cpuset_policy());
    smt_topology(&b.cache);
    let paths = be_cgroups(&b, "0-7");
    b.qm.d.cfg.cpu_suppress_threshold_percent = 100;
    // CPUs 0 and 4 reserved: the system's floor is 2000m, so BestEffort gets
    // 4000 − 2000 = 2000m, 2 CPUs, neither of them reserved.
    let (info, dropped) = crate::koord::slo::NodeInfo::from_node(&{
        let mut n = k8s_openapi::api::core::v1::Node::default();
        n.metadata.annotations = Some(
            [(
                "node.koordinator.sh/reservation".to_string(),
                r#"{"reservedCPUs":"0,4"}"#.to_string(),
            )]
            .into(),
        );
        n
    });
    assert!(dropped.is_empty());
    let _tx = read_node(&mut b, info);
    idle(&b.cache, 11_000);
    b.qm.round(11_000, Instant::now());
    assert_eq!(cpusets(&b, &paths), vec!["1,5"; 5]);
    // Suppress off: every CPU back but the reserved ones.
    b.qm.apply(on(false, false, false));
    assert_eq!(cpusets(&b, &paths), vec!["1-3,5-7"; 5]);
}

/// Puts `pod` in the pod manager and the runtime's cache as running, with a pod
/// cgroup and container `c` (id `<uid>-c`) below it; returns the container cgroup.
fn running(b: &Bed, pod: Arc<Pod>) -> String {
    b.qm.d.pods.add_or_update(pod.clone());
    b.qm.d.cm.ensure_pod(&pod).unwrap();
    let uid = pod_uid(&pod).to_string();
    let pod_cgroup = b.qm.d.cm.pod_cgroup_path(&pod).unwrap();
    let id = format!("{uid}-c");
    let ctr = format!("{pod_cgroup}/{id}");
    b.fs.create(&ctr, &Default::default()).unwrap();
    let status = PodRuntimeStatus {
        uid: uid.clone(),
        name: uid.clone(),
        namespace: "default".into(),
        ips: Vec::new(),
        sandboxes: vec![SandboxStatus {
            id: format!("{uid}-s"),
            ready: true,
            attempt: 0,
            created_at: 1,
            ips: Vec::new(),
            host_network: false,
        }],
        containers: vec![ContainerStatus::for_test(&id, "c", ContainerState::Running)],
    };
    b.pod_cache.set(&uid, status, tokio::time::Instant::now());
    ctr
}

/// `pod` with container `c` asking for `req` and `lim` of memory.
fn with_memory(pod: Arc<Pod>, name: &str, req: &str, lim: Option<&str>) -> Arc<Pod> {
    let mut p = (*pod).clone();
    let r = p.spec.as_mut().unwrap().containers[0]
        .resources
        .get_or_insert_with(Default::default);
    r.requests
        .get_or_insert_with(Default::default)
        .insert(name.to_string(), Quantity(req.into()));
    if let Some(l) = lim {
        r.limits = Some(BTreeMap::from([(name.to_string(), Quantity(l.into()))]));
    }
    Arc::new(p)
}

fn memory_file(b: &Bed, path: &str, file: QosFile) -> String {
    b.fs.qos_file(path, file).unwrap_or_default()
}

#[test]
fn cgroup_reconcile_writes_memory_qos_at_qos_pod_and_container_level() {
    let mut cfg = on(false, false, true);
    cfg.memory_qos.ls = crate::koordapi::MemoryQosPercents {
        min: 40,
        low: 60,
        throttling: 80,
    };
    cfg.memory_qos.be = crate::koordapi::MemoryQosPercents {
        min: 0,
        low: 50,
        throttling: 0,
    };
    let mut b = bed(cfg);
    // v2 offers the files: kubepods' memory.min reads "0" before any write.
    b.fs.write_qos_file("root/kubepods", QosFile::MemoryMin, "0")
        .unwrap();
    const MI: i64 = 1 << 20;
    let ls = with_memory(pod("ls", Some("1")), "memory", "100Mi", Some("200Mi"));
    let ls_ctr = running(&b, ls);
    let be = with_memory(
        koord_be(pod("be-big", None)),
        "kubernetes.io/batch-memory",
        "64Mi",
        None,
    );
    let be_ctr = running(&b, be);
    b.qm.round(10_000, Instant::now());
    let n = |v: i64| v.to_string();
    // QoS level: the sums; kubepods (Guaranteed's level) all of them.
    assert_eq!(
        memory_file(&b, "root/kubepods", QosFile::MemoryMin),
        n(40 * MI)
    );
    assert_eq!(
        memory_file(&b, "root/kubepods", QosFile::MemoryLow),
        n(92 * MI)
    );
    assert_eq!(memory_file(&b, BURSTABLE, QosFile::MemoryLow), n(60 * MI));
    assert_eq!(memory_file(&b, BE, QosFile::MemoryLow), n(32 * MI));
    // Pod level: no memory.high.
    let ls_pod = ls_ctr.rsplit_once('/').unwrap().0;
    assert_eq!(memory_file(&b, ls_pod, QosFile::MemoryMin), n(40 * MI));
    assert_eq!(memory_file(&b, ls_pod, QosFile::MemoryHigh), "");
    // Container level: 100Mi + (200Mi − 100Mi) × 80 %; BE throttling 0 is max.
    assert_eq!(memory_file(&b, &ls_ctr, QosFile::MemoryHigh), n(180 * MI));
    assert_eq!(memory_file(&b, &be_ctr, QosFile::MemoryHigh), "max");
    assert_eq!(memory_file(&b, &be_ctr, QosFile::MemoryLow), n(32 * MI));
    // Changed from outside: put back; the rest left alone.
    b.fs.write_qos_file(&ls_ctr, QosFile::MemoryMin, "1")
        .unwrap();
    b.qm.round(10_000, Instant::now());
    assert_eq!(memory_file(&b, &ls_ctr, QosFile::MemoryMin), n(40 * MI));
}

#[test]
fn without_the_memory_qos_files_nothing_is_written() {
    let mut cfg = on(false, false, true);
    cfg.memory_qos.ls.min = 50;
    let mut b = bed(cfg);
    // cgroup v1 without Anolis: no memory.min anywhere.
    b.fs.withhold(QosFile::MemoryMin);
    let ctr = running(
        &b,
        with_memory(pod("ls", Some("1")), "memory", "100Mi", None),
    );
    b.qm.round(10_000, Instant::now());
    for f in [QosFile::MemoryMin, QosFile::MemoryLow, QosFile::MemoryHigh] {
        assert_eq!(b.fs.qos_file(&ctr, f), None);
        assert_eq!(b.fs.qos_file(BURSTABLE, f), None);
    }
    assert!(b.qm.said.contains("no-memory-qos"));
}

/// `pod` labelled `koordinator.sh/eviction-enabled: "true"` (CPUEvict's opt-in).
fn opted_in(pod: Arc<Pod>) -> Arc<Pod> {
    let mut p = (*pod).clone();
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("koordinator.sh/eviction-enabled".into(), "true".into());
    Arc::new(p)
}

#[test]
fn cpu_evict_by_usage_evicts_opted_in_pods_up_to_the_priority_threshold() {
    let mut cfg = on(false, false, false);
    cfg.strategies.cpu_usage_evict = true;
    cfg.cpu_usage_evict = Some(crate::koordapi::CpuUsageEvictConfig {
        threshold_percent: 80,
        lower_percent: 78,
        priority_threshold: 5999,
    });
    let mut b = bed(cfg);
    // be-big is batch (5500); ls is prod (9500) even opted in: never a victim.
    b.qm.d
        .pods
        .add_or_update(opted_in(koord_be(pod("be-big", None))));
    b.qm.d.pods.add_or_update(opted_in(pod("ls", Some("1"))));
    let t0 = Instant::now();
    // 3.6 of 4 cores = 90 %: release 4000 × (90 − 78) % = 480m.
    fill(&b.cache, 10_000, 3.6, 100.0);
    b.qm.round(10_000, t0);
    assert!(
        b.evicted.0.lock().unwrap().is_empty(),
        "cool-down from start"
    );
    b.qm.round(10_000, t0 + cpu_evict::COOL_DOWN);
    assert_eq!(
        b.evicted.0.lock().unwrap().clone(),
        [(
            "be-big".to_string(),
            "trigger by koordlet feature CPUEvict, kill pod: be-big".to_string()
        )]
    );
    // Under the threshold: nothing more, even after the cool-down.
    fill(&b.cache, 40_000, 2.0, 100.0);
    b.qm.round(40_000, t0 + 3 * cpu_evict::COOL_DOWN);
    assert_eq!(b.evicted.0.lock().unwrap().len(), 1);
}
