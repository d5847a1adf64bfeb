use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::batchresource::{BATCH_CPU, BATCH_MEMORY, BatchResource};
use super::protocol::{Cause, CgroupRule, CgroupValues};
use super::rule::{HookRule, SharedRule};
use super::*;
use crate::advisor::ManagedPods;
use crate::cm::{CgroupFs, FakeCgroupFs, ResourceConfig, fake_manager};
use crate::kuberuntime::{ContainerState, ContainerStatus, PodRuntimeStatus, SandboxStatus};
use crate::pleg::PodCache;
use crate::pod::PodManager;

fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
    let m = |l: &[(&str, &str)]| {
        Some(
            l.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: m(req),
            limits: m(lim),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(qos_label: Option<&str>, containers: Vec<Container>) -> Pod {
    let mut p = Pod {
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    };
    p.metadata.name = Some("batch".into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some("u1".into());
    p.metadata.labels =
        qos_label.map(|q| [("koordinator.sh/qosClass".to_string(), q.to_string())].into());
    p
}

const QUOTA_ON: HookRule = HookRule {
    batch_cfs_quota: true,
    cpu_normalization_ratio: None,
};
const QUOTA_OFF: HookRule = HookRule {
    batch_cfs_quota: false,
    cpu_normalization_ratio: None,
};

fn values(shares: i64, quota: i64, memory: i64) -> Option<CgroupValues> {
    Some(CgroupValues {
        cpu_shares: Some(shares),
        cfs_quota: Some(quota),
        memory_limit: Some(memory),
    })
}

/// Two batch containers and one asking for no batch resource.
fn batch_pod() -> Pod {
    pod(
        Some("BE"),
        vec![
            container(
                "a",
                &[(BATCH_CPU, "500"), (BATCH_MEMORY, "64Mi")],
                &[(BATCH_CPU, "1000"), (BATCH_MEMORY, "64Mi")],
            ),
            container(
                "b",
                &[(BATCH_CPU, "250")],
                &[(BATCH_CPU, "500"), (BATCH_MEMORY, "32Mi")],
            ),
            container("plain", &[], &[]),
        ],
    )
}

#[test]
fn pod_level_sums_requests_and_limits_of_the_batch_containers() {
    let r = BatchResource;
    // 750m → 768 shares; 1500m → 150000 µs; 96 MiB. "plain" counts for nothing.
    assert_eq!(
        r.pod(&batch_pod(), QUOTA_ON).unwrap(),
        values(768, 150_000, 96 << 20)
    );
    // A limit is summed only if every batch container has one.
    let mut p = batch_pod();
    p.spec.as_mut().unwrap().containers[1] =
        container("b", &[(BATCH_CPU, "250")], &[(BATCH_MEMORY, "32Mi")]);
    assert_eq!(r.pod(&p, QUOTA_ON).unwrap(), values(768, -1, 96 << 20));
    p.spec.as_mut().unwrap().containers[1] =
        container("b", &[(BATCH_CPU, "250")], &[(BATCH_CPU, "500")]);
    assert_eq!(r.pod(&p, QUOTA_ON).unwrap(), values(768, 150_000, -1));
    // koordlet's clamps: shares in [2, 262144], quota at least 1 ms.
    let tiny = pod(
        Some("BE"),
        vec![container("a", &[(BATCH_CPU, "1")], &[(BATCH_CPU, "5")])],
    );
    assert_eq!(r.pod(&tiny, QUOTA_ON).unwrap(), values(2, 1000, -1));
    let huge = pod(
        Some("BE"),
        vec![container("a", &[(BATCH_CPU, "1000000")], &[])],
    );
    assert_eq!(r.pod(&huge, QUOTA_ON).unwrap(), values(262_144, -1, -1));
}

#[test]
fn only_be_labelled_pods_with_batch_resources_and_the_quota_follows_the_rule() {
    let r = BatchResource;
    // While CPU suppress holds BestEffort by CFS quota, the pods' quotas are lifted.
    assert_eq!(
        r.pod(&batch_pod(), QUOTA_OFF).unwrap(),
        values(768, -1, 96 << 20)
    );
    let mut unlabelled = batch_pod();
    unlabelled.metadata.labels = None;
    assert_eq!(r.pod(&unlabelled, QUOTA_ON).unwrap(), None);
    let ls = pod(Some("LS"), batch_pod().spec.unwrap().containers);
    assert_eq!(r.pod(&ls, QUOTA_ON).unwrap(), None);
    let no_batch = pod(Some("BE"), vec![container("plain", &[], &[])]);
    assert_eq!(r.pod(&no_batch, QUOTA_ON).unwrap(), None);
    let bad = pod(
        Some("BE"),
        vec![container("a", &[(BATCH_CPU, "lots")], &[])],
    );
    assert!(r.pod(&bad, QUOTA_ON).is_err());
}

#[test]
fn container_level_uses_its_own_batch_resources_or_no_limit() {
    let r = BatchResource;
    let p = batch_pod();
    let spec = &p.spec.as_ref().unwrap().containers;
    assert_eq!(
        r.container(&p, &spec[0], QUOTA_ON).unwrap(),
        values(512, 100_000, 64 << 20)
    );
    assert_eq!(
        r.container(&p, &spec[0], QUOTA_OFF).unwrap(),
        values(512, -1, 64 << 20)
    );
    assert_eq!(r.container(&p, &spec[2], QUOTA_ON).unwrap(), None);
    // Only a memory request: koordinator still sets the container, all at their floors.
    let only_mem = container("m", &[(BATCH_MEMORY, "1Gi")], &[]);
    assert_eq!(
        r.container(&p, &only_mem, QUOTA_ON).unwrap(),
        values(2, -1, -1)
    );
}

#[test]
fn the_rule_follows_enable_and_the_cfs_quota_policy_of_the_node_slo() {
    let off = QosConfig::default();
    assert_eq!(HookRule::from_config(&off), QUOTA_ON);
    // koordlet's default policy, cpuset, leaves the batch quotas on.
    let on_cpuset = QosConfig {
        enable: true,
        ..QosConfig::default()
    };
    assert_eq!(HookRule::from_config(&on_cpuset), QUOTA_ON);
    let on = QosConfig {
        cpu_suppress_policy: crate::koordapi::CpuSuppressPolicy::CfsQuota,
        ..on_cpuset
    };
    // CPU suppress's own switch plays no part (koordlet reads the NodeSLO only).
    let on_without_suppress = QosConfig {
        strategies: crate::koordapi::Strategies {
            cpu_suppress: false,
            ..Default::default()
        },
        ..on.clone()
    };
    assert_eq!(HookRule::from_config(&on), QUOTA_OFF);
    assert_eq!(HookRule::from_config(&on_without_suppress), QUOTA_OFF);
    let shared = SharedRule::new(&off);
    assert_eq!(shared.update(&off), None);
    assert_eq!(shared.update(&on), Some(QUOTA_ON));
    assert_eq!(shared.get(), QUOTA_OFF);
    assert_eq!(shared.update(&on_without_suppress), None);
}

#[test]
fn the_create_stage_sends_no_limit_as_unset_and_the_update_stage_as_minus_one() {
    let (cm, _) = fake_manager(true);
    let set = HookSet::new(&QosConfig::default(), Arc::new(cm));
    let hooks = set.runtime_hooks();
    let p = batch_pod();
    let b = container("b", &[(BATCH_CPU, "250")], &[]);
    let mut config = cri::ContainerConfig {
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(cri::LinuxContainerResources {
                cpu_shares: 2,
                memory_limit_in_bytes: 5,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    hooks.pre_create(&p, &b, &mut config);
    let r = config.linux.unwrap().resources.unwrap();
    assert_eq!(
        (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
        (256, 0, 0)
    );
    let mut r = cri::LinuxContainerResources::default();
    let a = &p.spec.as_ref().unwrap().containers[0];
    hooks.pre_update(&p, a, &mut r);
    assert_eq!(
        (
            r.cpu_shares,
            r.cpu_quota,
            r.cpu_period,
            r.memory_limit_in_bytes
        ),
        (512, 100_000, 100_000, 64 << 20)
    );
    let mut r = cri::LinuxContainerResources::default();
    hooks.pre_update(&p, &b, &mut r);
    assert_eq!((r.cpu_quota, r.memory_limit_in_bytes), (-1, -1));
}

/// A BE pod running with containers "a" and "b", its cgroups made as the container
/// manager and the runtime make them; the reconciler over it.
struct Node {
    fs: Arc<FakeCgroupFs>,
    set: HookSet,
    reconciler: reconciler::HookReconciler,
    pod_cgroup: String,
}

fn node(cfg: &QosConfig) -> Node {
    node_with(cfg, batch_pod())
}

fn node_with(cfg: &QosConfig, p: Pod) -> Node {
    let (cm, fs) = fake_manager(true);
    let cm = Arc::new(cm);
    let p = Arc::new(p);
    cm.ensure_pod(&p).unwrap();
    let pod_cgroup = cm.pod_cgroup_path(&p).unwrap();
    let pods = Arc::new(PodManager::default());
    pods.add_or_update(p.clone());
    let cache = Arc::new(PodCache::default());
    let mut status = PodRuntimeStatus {
        uid: "u1".into(),
        name: "batch".into(),
        namespace: "default".into(),
        ips: Vec::new(),
        sandboxes: vec![SandboxStatus {
            id: "s1".into(),
            ready: true,
            attempt: 0,
            created_at: 1,
            ips: Vec::new(),
            host_network: false,
        }],
        containers: Vec::new(),
    };
    for (id, name) in [("ca", "a"), ("cb", "b"), ("cp", "plain")] {
        status
            .containers
            .push(ContainerStatus::for_test(id, name, ContainerState::Running));
        fs.create(&format!("{pod_cgroup}/{id}"), &ResourceConfig::default())
            .unwrap();
    }
    cache.set("u1", status, Instant::now());
    let set = HookSet::new(cfg, cm.clone());
    let lister = ManagedPods::new(pods.clone(), cache, cm);
    let reconciler = set.reconciler(pods, Box::new(lister));
    Node {
        fs,
        set,
        reconciler,
        pod_cgroup,
    }
}

impl Node {
    fn limits(&self, rel: &str) -> (Option<u64>, Option<i64>, Option<i64>) {
        let path = if rel.is_empty() {
            self.pod_cgroup.clone()
        } else {
            format!("{}/{rel}", self.pod_cgroup)
        };
        let r = self.fs.resources(&path).unwrap();
        (r.cpu_shares, r.cpu_quota, r.memory_limit)
    }
}

#[test]
fn the_reconciler_sets_pod_and_containers_then_writes_nothing_while_right() {
    let n = node(&QosConfig::default());
    // pod: 3 values; a and b: 3 each; "plain" is left alone.
    assert_eq!(n.reconciler.reconcile(Cause::Drift), 9);
    assert_eq!(n.limits(""), (Some(768), Some(150_000), Some(96 << 20)));
    assert_eq!(n.limits("ca"), (Some(512), Some(100_000), Some(64 << 20)));
    assert_eq!(n.limits("cb"), (Some(256), Some(50_000), Some(32 << 20)));
    assert_eq!(n.limits("cp"), (None, None, None));
    assert_eq!(n.reconciler.reconcile(Cause::Drift), 0);
    // A hand edit of the pod's shares and a container's quota: both put back, and
    // only they are written.
    let edit = |path: String, res: ResourceConfig| n.fs.update(&path, &res).unwrap();
    edit(
        n.pod_cgroup.clone(),
        ResourceConfig {
            cpu_shares: Some(1024),
            ..Default::default()
        },
    );
    edit(
        format!("{}/ca", n.pod_cgroup),
        ResourceConfig {
            cpu_quota: Some(-1),
            ..Default::default()
        },
    );
    assert_eq!(n.reconciler.reconcile(Cause::Drift), 2);
    assert_eq!(n.limits("").0, Some(768));
    assert_eq!(n.limits("ca").1, Some(100_000));
}

#[test]
fn a_memory_limit_the_kernel_rounded_to_its_page_is_right_as_it_is() {
    let mut odd = batch_pod();
    odd.spec.as_mut().unwrap().containers[0] = container("a", &[], &[(BATCH_MEMORY, "100000001")]);
    let n = node_with(&QosConfig::default(), odd);
    n.reconciler.reconcile(Cause::Drift);
    assert_eq!(n.limits("ca").2, Some(100_000_001));
    let rounded = 100_000_001 - 100_000_001 % 4096;
    let path = format!("{}/ca", n.pod_cgroup);
    let res = ResourceConfig {
        memory_limit: Some(rounded),
        ..Default::default()
    };
    n.fs.update(&path, &res).unwrap();
    assert_eq!(n.reconciler.reconcile(Cause::Drift), 0);
}

#[test]
fn a_rule_change_lifts_and_restores_the_quotas_at_once() {
    let n = node(&QosConfig::default());
    n.reconciler.reconcile(Cause::Drift);
    let on = QosConfig {
        enable: true,
        cpu_suppress_policy: crate::koordapi::CpuSuppressPolicy::CfsQuota,
        ..QosConfig::default()
    };
    assert!(n.reconciler.take_config(&on));
    assert!(!n.reconciler.take_config(&on), "no change, nothing to do");
    // The hook points read the same rule.
    let mut r = cri::LinuxContainerResources::default();
    let p = batch_pod();
    n.set
        .runtime_hooks()
        .pre_update(&p, &p.spec.as_ref().unwrap().containers[0], &mut r);
    assert_eq!(r.cpu_quota, -1);
    assert_eq!(n.reconciler.reconcile(Cause::RuleChanged), 3);
    assert_eq!(n.limits("").1, Some(-1));
    assert_eq!((n.limits("ca").1, n.limits("cb").1), (Some(-1), Some(-1)));
    assert!(n.reconciler.take_config(&QosConfig::default()));
    assert_eq!(n.reconciler.reconcile(Cause::RuleChanged), 3);
    assert_eq!(n.limits("").1, Some(150_000));
}

#[test]
fn the_nodes_cpu_normalization_ratio_scales_limited_batch_quotas() {
    let r = BatchResource;
    let scaled = HookRule {
        cpu_normalization_ratio: Some(1.5),
        ..QUOTA_ON
    };
    // 150000 µs / 1.5 = 100000; a container's 100000 (1000m) / 1.5, rounded up.
    assert_eq!(
        r.pod(&batch_pod(), scaled).unwrap(),
        values(768, 100_000, 96 << 20)
    );
    let spec = batch_pod().spec.unwrap().containers;
    let c = r
        .container(&batch_pod(), &spec[0], scaled)
        .unwrap()
        .unwrap();
    let plain = r
        .container(&batch_pod(), &spec[0], QUOTA_ON)
        .unwrap()
        .unwrap();
    let want = (plain.cfs_quota.unwrap() as f64 / 1.5).ceil() as i64;
    assert_eq!(c.cfs_quota, Some(want));
    // No limit stays unlimited; a ratio of 1 or less changes nothing; nor does it
    // while CPU suppress lifts the quotas.
    assert_eq!(
        r.pod(
            &batch_pod(),
            HookRule {
                cpu_normalization_ratio: Some(0.8),
                ..QUOTA_ON
            }
        )
        .unwrap(),
        r.pod(&batch_pod(), QUOTA_ON).unwrap()
    );
    assert_eq!(
        r.pod(
            &batch_pod(),
            HookRule {
                cpu_normalization_ratio: Some(1.5),
                ..QUOTA_OFF
            }
        )
        .unwrap()
        .unwrap()
        .cfs_quota,
        Some(-1)
    );
    // The shared rule takes a change of 0.01 or more, and keeps the ratio through
    // a NodeSLO change.
    let shared = SharedRule::new(&QosConfig::default());
    assert_eq!(shared.update_ratio(None), None);
    assert_eq!(shared.update_ratio(Some(1.5)), Some(QUOTA_ON));
    assert_eq!(shared.update_ratio(Some(1.505)), None);
    assert!(shared.update_ratio(Some(1.52)).is_some());
    let on = QosConfig {
        enable: true,
        cpu_suppress_policy: crate::koordapi::CpuSuppressPolicy::CfsQuota,
        ..QosConfig::default()
    };
    assert!(shared.update(&on).is_some());
    assert_eq!(shared.get().cpu_normalization_ratio, Some(1.52));
    assert!(shared.update_ratio(None).is_some());
}

#[test]
fn the_sandbox_stage_writes_the_pod_cgroup() {
    let n = node(&QosConfig::default());
    n.set.runtime_hooks().pre_run_pod_sandbox(&batch_pod());
    assert_eq!(n.limits(""), (Some(768), Some(150_000), Some(96 << 20)));
    assert_eq!(
        n.limits("ca"),
        (None, None, None),
        "containers come at create"
    );
}

/// A rule for the QoS level only: the reconciler puts it on the BestEffort cgroup.
struct BestEffortShares;

impl CgroupRule for BestEffortShares {
    fn name(&self) -> &'static str {
        "test-qos"
    }
    fn kube_qos(&self, class: crate::cm::QosClass, _: HookRule) -> Option<CgroupValues> {
        (class == crate::cm::QosClass::BestEffort).then_some(CgroupValues {
            cpu_shares: Some(3),
            ..Default::default()
        })
    }
    fn pod(
        &self,
        _: &Pod,
        _: HookRule,
    ) -> Result<Option<CgroupValues>, crate::kuberuntime::HookError> {
        Ok(None)
    }
    fn container(
        &self,
        _: &Pod,
        _: &Container,
        _: HookRule,
    ) -> Result<Option<CgroupValues>, crate::kuberuntime::HookError> {
        Ok(None)
    }
}

#[test]
fn the_qos_level_is_reconciled_too() {
    let (cm, fs) = fake_manager(true);
    cm.setup().unwrap();
    let cm = Arc::new(cm);
    let mut set = HookSet::new(&QosConfig::default(), cm.clone());
    set.rules = vec![Arc::new(BestEffortShares)];
    let pods = Arc::new(PodManager::default());
    let lister = ManagedPods::new(pods.clone(), Arc::new(PodCache::default()), cm.clone());
    let r = set.reconciler(pods, Box::new(lister));
    assert_eq!(r.reconcile(Cause::Drift), 1);
    let be = cm.qos_cgroup_path(crate::cm::QosClass::BestEffort).unwrap();
    assert_eq!(fs.resources(&be).unwrap().cpu_shares, Some(3));
    assert_eq!(r.reconcile(Cause::Drift), 0);
}
