//! The resize against the fake runtime (and a fake cgroup tree for the pod cgroup):
//! in place or restart per policy, the order of pod cgroup and container updates,
//! nothing to do once actuated, a container without an actuated entry, and the
//! refused memory decrease.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, ContainerResizePolicy, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::hooks::{HookError, RuntimeHook, RuntimeHooks};
use super::resize::{Amounts, ResizeActions, compute_resize};
use super::types::PodRuntimeStatus;
use crate::cri::support::{FakeNode, pod};
use crate::kuberuntime::SyncError;
use k8s_cri::v1 as cri;

const MI: i64 = 1 << 20;

fn guaranteed(cpu: &str, memory: &str) -> ResourceRequirements {
    let list = BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
    ]);
    ResourceRequirements {
        requests: Some(list.clone()),
        limits: Some(list),
        ..Default::default()
    }
}

/// The pod `web` with its containers at `cpu` and `memory`, each with `policy`
/// for memory (None: no resizePolicy).
fn sized(names: &[&str], cpu: &str, memory: &str, memory_policy: Option<&str>) -> Pod {
    let mut p = pod("web", &[], names, "Always");
    for c in &mut p.spec.as_mut().unwrap().containers {
        c.resources = Some(guaranteed(cpu, memory));
        c.resize_policy = memory_policy.map(|policy| {
            vec![ContainerResizePolicy {
                resource_name: "memory".into(),
                restart_policy: policy.into(),
            }]
        });
    }
    p
}

fn main_of(p: &mut Pod) -> &mut Container {
    &mut p.spec.as_mut().unwrap().containers[0]
}

async fn status(node: &FakeNode) -> PodRuntimeStatus {
    (node.manager)
        .get_pod_status("uid-web", "web", "default")
        .await
        .unwrap()
}

fn resources_of(node: &FakeNode, container: &str) -> cri::LinuxContainerResources {
    let id = node.fake.container_id("web", container).unwrap();
    node.fake.container_resources(&id).unwrap()
}

#[tokio::test]
async fn a_cpu_limit_changes_in_place_once_and_then_nothing_is_left_to_do() {
    let node = FakeNode::new();
    let mut p = sized(&["main"], "500m", "64Mi", None);
    node.sync(&p).await.unwrap();
    assert_eq!(resources_of(&node, "main").cpu_quota, 50_000);

    // Actuated == allocated: a sync does nothing.
    let outcome = node.sync(&p).await.unwrap();
    assert!(!outcome.acted);

    main_of(&mut p).resources = Some(guaranteed("1", "64Mi"));
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("UpdateContainerResources"),
        ["web/main"],
        "one in-place update"
    );
    let r = resources_of(&node, "main");
    assert_eq!(
        (r.cpu_quota, r.cpu_shares, r.memory_limit_in_bytes),
        (100_000, 1024, 64 * MI)
    );
    assert_eq!(node.fake.container_count("web", "main"), 1, "not restarted");
    let st = status(&node).await;
    assert_eq!(st.latest("main").unwrap().restart_count, 0);
    // The runtime reports what it was given, for containerStatuses[].resources.
    let reported = st.latest("main").unwrap().resources.unwrap();
    assert_eq!(
        (reported.cpu_limit_milli(), reported.memory_limit()),
        (Some(1000), Some(64 * MI))
    );

    // Applied once: the next syncs (and a restarted manager reading the state back)
    // call nothing.
    assert!(!node.sync(&p).await.unwrap().acted);
    let restarted = FakeNode::manager_over(&node.fake, &node.dir);
    restarted.sync_pod(&p, &status(&node).await).await.unwrap();
    assert_eq!(node.fake.calls_of("UpdateContainerResources").len(), 1);
}

#[tokio::test]
async fn restart_container_policy_restarts_once_with_the_new_limit() {
    let node = FakeNode::new();
    let mut p = sized(&["main"], "500m", "64Mi", Some("RestartContainer"));
    node.sync(&p).await.unwrap();
    main_of(&mut p).resources = Some(guaranteed("500m", "128Mi"));
    node.sync(&p).await.unwrap();
    assert!(node.fake.calls_of("UpdateContainerResources").is_empty());
    assert_eq!(
        node.fake.container_count("web", "main"),
        2,
        "killed and started again"
    );
    let st = status(&node).await;
    assert_eq!(st.latest("main").unwrap().restart_count, 1);
    assert_eq!(resources_of(&node, "main").memory_limit_in_bytes, 128 * MI);
    // The cpu, whose policy is NotRequired, changes in place.
    main_of(&mut p).resources = Some(guaranteed("1", "128Mi"));
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("UpdateContainerResources").len(), 1);
    assert_eq!(node.fake.container_count("web", "main"), 2);
}

#[tokio::test]
async fn a_container_without_an_actuated_entry_goes_by_what_the_runtime_reports() {
    let node = FakeNode::new();
    let mut p = sized(&["main"], "500m", "64Mi", Some("RestartContainer"));
    node.sync(&p).await.unwrap();
    // A container started before the state was kept: the runtime's report says the
    // same as the allocation, so nothing is done.
    let state = crate::allocation::ResourceState::open(
        node.dir.path(),
        crate::allocation::ACTUATED_STATE_FILE,
    )
    .unwrap();
    state.remove_pod("uid-web").unwrap();
    let fresh = FakeNode::manager_over(&node.fake, &node.dir);
    let st = status(&node).await;
    assert!(!fresh.sync_pod(&p, &st).await.unwrap().acted);
    // A changed cpu limit is compared against the report and updated in place.
    main_of(&mut p).resources = Some(guaranteed("250m", "64Mi"));
    fresh.sync_pod(&p, &st).await.unwrap();
    assert_eq!(node.fake.calls_of("UpdateContainerResources").len(), 1);
    assert_eq!(resources_of(&node, "main").cpu_quota, 25_000);
}

#[test]
fn decreases_are_ordered_before_increases_and_policies_pick_restart() {
    let p = sized(&["up", "down"], "500m", "64Mi", None);
    let node_status = |cpu: &[(&str, i64)]| PodRuntimeStatus {
        sandboxes: vec![],
        containers: cpu
            .iter()
            .map(|(name, _)| super::types::ContainerStatus {
                ..super::types::ContainerStatus::for_test(
                    &format!("id-{name}"),
                    name,
                    super::types::ContainerState::Running,
                )
            })
            .collect(),
        ..Default::default()
    };
    let st = node_status(&[("up", 0), ("down", 0)]);
    let actuated = |name: &str| {
        Some(match name {
            "up" => guaranteed("250m", "64Mi"),
            _ => guaranteed("1", "64Mi"),
        })
    };
    let mut actions = super::actions::PodActions::default();
    compute_resize(&p, &st, &actuated, &mut actions);
    let names: Vec<_> = actions.resize.cpu.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["down", "up"], "the decrease first");
    assert!(actions.resize.memory.is_empty() && actions.resize.update_pod);
    assert!(actions.kill.is_empty() && actions.start.is_empty());

    // Equal by value (1 == 1000m) is nothing to do.
    let same = |_: &str| Some(guaranteed("500m", "64Mi"));
    let mut none = super::actions::PodActions::default();
    compute_resize(&p, &st, &same, &mut none);
    assert_eq!(none.resize, ResizeActions::default());

    // RestartContainer for memory: killed with kubelet's message and started again.
    let mut q = sized(&["up", "down"], "500m", "128Mi", Some("RestartContainer"));
    q.spec.as_mut().unwrap().containers[0].resources = Some(guaranteed("500m", "64Mi"));
    let mut restart = super::actions::PodActions::default();
    compute_resize(&q, &st, &same, &mut restart);
    assert_eq!(restart.kill.len(), 1);
    assert_eq!(restart.kill[0].2, "Container down resize requires restart");
    assert_eq!(restart.start, [1]);
    assert!(restart.resize.update_pod && restart.resize.memory.is_empty());

    // Nothing known of what it runs with (no entry, a runtime that reports nothing):
    // updated in place, the call being idempotent, never restarted on a guess.
    let mut unknown = super::actions::PodActions::default();
    compute_resize(&q, &st, &|_| None, &mut unknown);
    assert!(unknown.kill.is_empty() && unknown.start.is_empty());
    let names: Vec<_> = unknown
        .resize
        .memory
        .iter()
        .map(|u| u.name.as_str())
        .collect();
    // An unknown limit counts as none: each new one is a decrease, put first.
    assert_eq!(names, ["down", "up"]);
    assert_eq!(unknown.resize.cpu.len(), 2);
}

#[test]
fn amounts_keep_other_resources_and_default_requests_to_limits() {
    let mut base = guaranteed("1", "64Mi");
    base.limits
        .as_mut()
        .unwrap()
        .insert("ephemeral-storage".into(), Quantity("1Gi".into()));
    let a = Amounts {
        cpu_request_milli: 250,
        cpu_limit_milli: 500,
        memory_request: 0,
        memory_limit: 32 * MI,
    };
    let r = a.apply_to(Some(&base));
    let limits = r.limits.unwrap();
    assert_eq!(limits["cpu"].0, "500m");
    assert_eq!(limits["memory"].0, (32 * MI).to_string());
    assert_eq!(limits["ephemeral-storage"].0, "1Gi");
    assert!(!r.requests.unwrap().contains_key("memory"));
    let only_limits = ResourceRequirements {
        limits: guaranteed("2", "1Gi").limits,
        ..Default::default()
    };
    let a = Amounts::of(Some(&only_limits));
    assert_eq!((a.cpu_request_milli, a.memory_request), (2000, 1 << 30));
}

/// The pod cgroup's (cpu quota, memory limit) each time a container update was sent.
type Seen = Arc<Mutex<Vec<(Option<i64>, Option<i64>)>>>;

/// Records the pod cgroup's cpu quota and memory limit when a container update is sent.
struct SeesPodCgroup {
    cm: Arc<crate::cm::ContainerManager>,
    seen: Seen,
}

impl RuntimeHook for SeesPodCgroup {
    fn name(&self) -> &'static str {
        "sees-pod-cgroup"
    }
    fn pre_update_container_resources(
        &self,
        pod: &Pod,
        _: &Container,
        _: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        let (_, now) = self.cm.pod_cgroup_limits(pod).unwrap().unwrap();
        self.seen
            .lock()
            .unwrap()
            .push((now.cpu_quota, now.memory_limit));
        Ok(false)
    }
}

#[tokio::test]
async fn the_pod_cgroup_grows_before_its_containers_and_shrinks_after_them() {
    let node = FakeNode::new();
    let (cm, fs) = crate::cm::fake_manager(true);
    let cm = Arc::new(cm);
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let hook = SeesPodCgroup {
        cm: cm.clone(),
        seen: seen.clone(),
    };
    let manager = FakeNode::manager_over(&node.fake, &node.dir)
        .with_pod_cgroups(cm.clone())
        .with_runtime_hooks(RuntimeHooks::new(vec![Arc::new(hook)]));
    let mut p = sized(&["main"], "500m", "64Mi", None);
    cm.ensure_pod(&p).unwrap();
    manager.sync_pod(&p, &status(&node).await).await.unwrap();

    // Up: the pod cgroup already has the new limits when the container is updated.
    main_of(&mut p).resources = Some(guaranteed("1", "128Mi"));
    manager.sync_pod(&p, &status(&node).await).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Some(50_000), Some(128 * MI)),
            (Some(100_000), Some(128 * MI))
        ],
        "memory then cpu, each after the pod cgroup's grew"
    );
    seen.lock().unwrap().clear();

    // Down: the containers shrink first, the pod cgroup after them.
    main_of(&mut p).resources = Some(guaranteed("250m", "32Mi"));
    manager.sync_pod(&p, &status(&node).await).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Some(100_000), Some(128 * MI)),
            (Some(100_000), Some(32 * MI))
        ],
    );
    let (_, now) = cm.pod_cgroup_limits(&p).unwrap().unwrap();
    assert_eq!(
        (now.cpu_quota, now.memory_limit, now.cpu_shares),
        (Some(25_000), Some(32 * MI), Some(256))
    );
    drop(fs);
}

#[tokio::test]
async fn a_memory_limit_below_usage_is_refused_with_kubelets_message_and_kept() {
    let node = FakeNode::new();
    let (cm, fs) = crate::cm::fake_manager(true);
    let cm = Arc::new(cm);
    let manager = FakeNode::manager_over(&node.fake, &node.dir).with_pod_cgroups(cm.clone());
    let mut p = sized(&["main"], "500m", "64Mi", None);
    cm.ensure_pod(&p).unwrap();
    manager.sync_pod(&p, &status(&node).await).await.unwrap();
    let id = node.fake.container_id("web", "main").unwrap();
    node.fake.set_memory_usage(&id, (40 * MI) as u64);
    let pod_path = cm.pod_cgroup_path(&p).unwrap();
    fs.set_memory_usage(&pod_path, (41 * MI) as u64);

    main_of(&mut p).resources = Some(guaranteed("500m", "20Mi"));
    let e = manager
        .sync_pod(&p, &status(&node).await)
        .await
        .unwrap_err();
    assert!(matches!(e, SyncError::Resize(_)));
    assert_eq!(
        e.resize_error().unwrap(),
        format!(
            "cannot decrease memory limits: [attempting to set pod memory limit ({}) below current usage ({}), attempting to set container \"main\" memory limit ({}) below current usage ({})]",
            20 * MI,
            41 * MI,
            20 * MI,
            40 * MI
        )
    );
    assert!(node.fake.calls_of("UpdateContainerResources").is_empty());
    assert_eq!(resources_of(&node, "main").memory_limit_in_bytes, 64 * MI);
    let (_, now) = cm.pod_cgroup_limits(&p).unwrap().unwrap();
    assert_eq!(now.memory_limit, Some(64 * MI), "the old limit stays");

    // Once the usage is below, the next sync applies it.
    node.fake.set_memory_usage(&id, (10 * MI) as u64);
    fs.set_memory_usage(&pod_path, (11 * MI) as u64);
    manager.sync_pod(&p, &status(&node).await).await.unwrap();
    assert_eq!(resources_of(&node, "main").memory_limit_in_bytes, 20 * MI);
    let (_, now) = cm.pod_cgroup_limits(&p).unwrap().unwrap();
    assert_eq!(now.memory_limit, Some(20 * MI));
}

#[tokio::test]
async fn a_sidecar_resizes_in_place_and_a_regular_init_container_never() {
    let node = FakeNode::new();
    let mut p = pod("web", &["sidecar"], &["main"], "Always");
    let spec = p.spec.as_mut().unwrap();
    let sidecar = &mut spec.init_containers.as_mut().unwrap()[0];
    sidecar.restart_policy = Some("Always".into());
    sidecar.resources = Some(guaranteed("100m", "32Mi"));
    spec.containers[0].resources = Some(guaranteed("500m", "64Mi"));
    node.sync(&p).await.unwrap();
    node.sync(&p).await.unwrap();
    assert!(node.fake.container_id("web", "main").is_some());

    let spec = p.spec.as_mut().unwrap();
    spec.init_containers.as_mut().unwrap()[0].resources = Some(guaranteed("200m", "32Mi"));
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("UpdateContainerResources"),
        ["web/sidecar"]
    );
    assert_eq!(resources_of(&node, "sidecar").cpu_quota, 20_000);
    assert_eq!(node.fake.container_count("web", "sidecar"), 1);

    // A regular init container is never resized: it has run to its end.
    let st = status(&node).await;
    let mut q = sized(&["main"], "500m", "64Mi", None);
    q.spec.as_mut().unwrap().init_containers = Some(vec![Container {
        name: "sidecar".into(),
        resources: Some(guaranteed("1", "32Mi")),
        ..Default::default()
    }]);
    let mut actions = super::actions::PodActions::default();
    compute_resize(&q, &st, &|_| None, &mut actions);
    assert!(actions.resize.cpu.is_empty() && actions.kill.is_empty());
}
