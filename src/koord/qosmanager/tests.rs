//! A whole round over a fake cgroup tree, a metric cache the test fills and a fake
//! evictor: which strategies act, on what, and what a stale cache changes (nothing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::config::{QosConfig, Strategies};
use super::*;
use crate::cm::{CgroupFs, FakeCgroupFs, fake_manager};
use crate::contracts::{Eviction, Evictor};
use crate::koord::metriccache::{MetricKind, Sample};

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
        pods,
        cm: Arc::new(cm),
        evictor: evicted.clone(),
        capacity: res(4000, 1000),
        allocatable: res(3800, 900),
        node_name: "n1".into(),
    });
    Bed {
        qm,
        fs,
        cache,
        evicted,
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
        },
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
    assert!(
        got[0].1.contains("node memory usage 80%") && got[0].1.contains("threshold 70%"),
        "{}",
        got[0].1
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
