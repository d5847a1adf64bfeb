use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio_util::sync::CancellationToken;

use super::api;
use super::manager::STOP_GRACE;
use super::server::{is_extended_resource_name, validate_register};
use super::*;
use crate::topology::{HintProvider as _, NumaMask};

const WIDGET: &str = "example.com/widget";

fn pod(uid: &str, init: &[(&str, i64, bool)], containers: &[(&str, i64)]) -> Pod {
    let c = |name: &str, n: i64, sidecar: bool| {
        let mut v = serde_json::json!({"name": name, "image": "busybox",
            "resources": {"limits": {WIDGET: n.to_string()}}});
        if sidecar {
            v["restartPolicy"] = "Always".into();
        }
        v
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid},
        "spec": {
            "initContainers": init.iter().map(|(n, k, s)| c(n, *k, *s)).collect::<Vec<_>>(),
            "containers": containers.iter().map(|(n, k)| c(n, *k, false)).collect::<Vec<_>>(),
        }
    }))
    .unwrap()
}

fn container<'a>(p: &'a Pod, name: &str) -> &'a Container {
    let s = p.spec.as_ref().unwrap();
    s.init_containers
        .iter()
        .flatten()
        .chain(&s.containers)
        .find(|c| c.name == name)
        .unwrap()
}

fn device(id: &str, healthy: bool, numa: Option<i64>) -> api::Device {
    api::Device {
        id: id.into(),
        health: if healthy { api::HEALTHY } else { "Unhealthy" }.into(),
        topology: numa.map(|n| api::TopologyInfo {
            nodes: vec![api::NumaNode { id: n }],
        }),
    }
}

/// A manager with a connected-looking endpoint for `WIDGET` and these devices.
fn manager_with(dir: &Path, devices: Vec<api::Device>) -> Arc<DeviceManager> {
    let m = DeviceManager::new(dir, vec![0, 1], crate::tasks::Tasks::new()).unwrap();
    m.fake_endpoint(WIDGET);
    m.update_devices(WIDGET, devices);
    m
}

#[test]
fn registration_is_validated_as_kubelet_does() {
    assert!(is_extended_resource_name("example.com/widget"));
    assert!(is_extended_resource_name("nvidia.com/gpu"));
    assert!(!is_extended_resource_name("widget"), "no domain");
    assert!(!is_extended_resource_name("kubernetes.io/widget"), "native");
    assert!(!is_extended_resource_name("requests.example.com/w"));
    assert!(
        !is_extended_resource_name("Example.com/w"),
        "upper-case domain"
    );
    let ok = api::RegisterRequest {
        version: "v1beta1".into(),
        endpoint: "w.sock".into(),
        resource_name: WIDGET.into(),
        options: None,
    };
    assert!(validate_register(&ok).is_ok());
    let old = api::RegisterRequest {
        version: "v1alpha".into(),
        ..ok.clone()
    };
    assert_eq!(
        validate_register(&old).unwrap_err().to_string(),
        "requested API version \"v1alpha\" is not supported by kubelet. Supported versions are [\"v1beta1\"]"
    );
    let bad = api::RegisterRequest {
        resource_name: "widget".into(),
        ..ok.clone()
    };
    assert_eq!(
        validate_register(&bad).unwrap_err().to_string(),
        "the ResourceName \"widget\" is invalid"
    );
    let escape = api::RegisterRequest {
        endpoint: "../x.sock".into(),
        ..ok
    };
    assert!(validate_register(&escape).is_err());
}

#[test]
fn unhealthy_devices_lower_allocatable_and_a_gone_plugin_is_removed_after_grace() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager_with(
        dir.path(),
        vec![
            device("a", true, None),
            device("b", true, None),
            device("c", false, None),
        ],
    );
    let r = m.resources();
    assert_eq!(r.capacity[WIDGET], 3);
    assert_eq!(r.allocatable[WIDGET], 2);
    // The stream ends: everything unhealthy, the resource kept at zero for the grace.
    m.disconnect(WIDGET, None, Instant::now());
    let r = m.resources();
    assert_eq!((r.capacity[WIDGET], r.allocatable[WIDGET]), (3, 0));
    let since = m.stopped_since(WIDGET).unwrap();
    let r = m.resources_at(since + STOP_GRACE - Duration::from_secs(1));
    assert!(r.removed.is_empty());
    let r = m.resources_at(since + STOP_GRACE);
    assert_eq!(r.removed, vec![WIDGET.to_string()]);
    assert!(!r.capacity.contains_key(WIDGET));
    assert!(m.resources().removed.is_empty(), "reported once");
}

#[test]
fn devices_are_chosen_on_the_affinity_and_errors_speak_kubelets_words() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager_with(
        dir.path(),
        vec![
            device("n0-a", true, Some(0)),
            device("n1-a", true, Some(1)),
            device("n1-b", true, Some(1)),
            device("bad", false, Some(0)),
        ],
    );
    let p = pod("u1", &[], &[("app", 2)]);
    let hints = m.container_hints(&p, container(&p, "app"));
    let preferred: Vec<_> = hints[WIDGET].iter().filter(|h| h.preferred).collect();
    assert_eq!(
        preferred.len(),
        1,
        "only node 1 alone holds two free devices"
    );
    assert_eq!(preferred[0].numa_affinity, Some(NumaMask::of([1])));
    m.allocate(&p, container(&p, "app"), Some(NumaMask::of([1])))
        .unwrap();
    let held = m
        .state()
        .pod_devices
        .get("u1", "app", WIDGET)
        .unwrap()
        .ids();
    assert_eq!(
        held,
        BTreeSet::from(["n1-a".to_string(), "n1-b".to_string()])
    );
    let p2 = pod("u2", &[], &[("app", 2)]);
    let err = m.allocate(&p2, container(&p2, "app"), None).unwrap_err();
    assert_eq!(err.reason, "UnexpectedAdmissionError");
    assert_eq!(
        err.message,
        "Allocate failed due to requested number of devices unavailable for example.com/widget. Requested: 2, Available: 1, which is unexpected"
    );
    m.update_devices(WIDGET, vec![device("x", false, None)]);
    let p3 = pod("u3", &[], &[("app", 1)]);
    let err = m.allocate(&p3, container(&p3, "app"), None).unwrap_err();
    assert!(err.message.contains(
        "no healthy devices present; cannot allocate unhealthy devices example.com/widget"
    ));
    // Stale pods free their devices.
    m.remove_stale(&BTreeSet::new());
    assert!(m.state().allocated.values().all(BTreeSet::is_empty));
}

#[test]
fn an_init_containers_devices_are_reused_but_a_sidecars_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager_with(
        dir.path(),
        (0..3)
            .map(|i| device(&format!("d{i}"), true, None))
            .collect(),
    );
    let p = pod(
        "u1",
        &[("init", 2, false), ("side", 1, true)],
        &[("app", 2)],
    );
    for c in ["init", "side", "app"] {
        m.allocate(&p, container(&p, c), None).unwrap();
    }
    let st = m.state();
    let ids = |c: &str| st.pod_devices.get("u1", c, WIDGET).unwrap().ids();
    // The sidecar takes one of the init container's devices and keeps it; the app
    // reuses the other and gets one more.
    assert!(ids("side").is_subset(&ids("init")));
    assert!(
        ids("side").is_disjoint(&ids("app")),
        "the sidecar keeps its own"
    );
    let later: BTreeSet<String> = ids("side").union(&ids("app")).cloned().collect();
    assert!(
        ids("init").is_subset(&later),
        "nothing the init container held is lost"
    );
    assert_eq!(st.allocated[WIDGET].len(), 3);
}

/// Waits until `f` holds (the plugin and the manager talk over real sockets).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

fn start(
    dir: &Path,
) -> (
    Arc<DeviceManager>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let m = DeviceManager::new(dir, vec![0], crate::tasks::Tasks::new()).unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (m, c) = (Arc::clone(&m), cancel.clone());
        async move { m.run(c).await.unwrap() }
    });
    (m, cancel, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_plugin_end_to_end() {
    use testapi::device_plugin::{DevicePlugin, PluginConfig};
    let series = [
        format!("kubelet_device_plugin_registration_total{{resource_name=\"{WIDGET}\"}}"),
        format!("kubelet_device_plugin_alloc_duration_seconds_count{{resource_name=\"{WIDGET}\"}}"),
    ];
    let before: Vec<f64> = series.iter().map(|s| crate::metrics::sample(s)).collect();
    let delta = |i: usize| crate::metrics::sample(&series[i]) - before[i];
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join(DEVICE_PLUGINS_DIR);
    let (m, cancel, task) = start(&plugins);
    let sock = plugins.join(KUBELET_SOCKET);
    until("kubelet.sock", || sock.exists()).await;
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let mut config = PluginConfig::new(&plugins, WIDGET, 3);
    config.pre_start_required = true;
    let plugin = DevicePlugin::start(config).await.unwrap();
    until("the devices", || {
        m.resources().allocatable.get(WIDGET) == Some(&3)
    })
    .await;

    // Admit a pod: pick, then Allocate over the socket.
    let p = pod("u1", &[], &[("app", 1)]);
    m.allocate(&p, container(&p, "app"), None).unwrap();
    assert_eq!(plugin.allocate_calls(), 0, "no RPC under admission's lock");
    m.complete_allocation(&p).await.unwrap();
    assert_eq!(plugin.allocate_calls(), 1);
    assert!(delta(0) >= 1.0, "the plugin's Register is counted");
    assert!(delta(1) >= 1.0, "its Allocate call is timed");
    let opts = m.run_options("u1", "app").unwrap();
    let id = &m.container_devices("u1", "app")[0].device_ids[0];
    assert_eq!(opts.mounts[0].container_path, format!("/widgets/{id}"));
    assert_eq!(Path::new(&opts.mounts[0].host_path), plugin.device_file(id));
    assert_eq!(opts.envs["WIDGET_IDS"], *id);
    m.pre_start("u1", "app").await.unwrap();
    assert_eq!(plugin.pre_start_calls(), 1);

    // A device turns unhealthy: allocatable drops, capacity stays.
    let mut changes = m.changes();
    plugin.set_healthy("widget-2", false);
    until("the health change", || {
        m.resources().allocatable.get(WIDGET) == Some(&2)
    })
    .await;
    assert_eq!(m.resources().capacity[WIDGET], 3);
    // The change is told after the state holds it: wait for the word, not just the state.
    tokio::time::timeout(Duration::from_secs(5), changes.changed())
        .await
        .expect("the health change is told")
        .unwrap();

    // The plugin restarts: the pod keeps its device, the devices come back healthy.
    plugin.stop();
    until("the plugin gone", || {
        m.resources().allocatable.get(WIDGET) == Some(&0)
    })
    .await;
    plugin.set_healthy("widget-2", true);
    plugin.restart().await.unwrap();
    until("re-registration", || {
        m.resources().allocatable.get(WIDGET) == Some(&3)
    })
    .await;
    assert_eq!(m.run_options("u1", "app").unwrap(), opts);

    // The manager restarts: the checkpoint gives the pod its device back.
    cancel.cancel();
    task.await.unwrap();
    let body = std::fs::read_to_string(plugins.join("kubelet_internal_checkpoint")).unwrap();
    assert!(body.contains("\"PodUID\":\"u1\""), "{body}");
    let (m2, cancel2, task2) = start(&plugins);
    assert_eq!(m2.run_options("u1", "app").unwrap(), opts);
    assert_eq!(
        m2.resources().capacity.get(WIDGET),
        Some(&0),
        "at zero until the plugin is back"
    );
    until("kubelet.sock again", || {
        plugins.join(KUBELET_SOCKET).exists()
    })
    .await;
    plugin.restart().await.unwrap();
    until("re-registration", || {
        m2.resources().allocatable.get(WIDGET) == Some(&3)
    })
    .await;
    let p2 = pod("u2", &[], &[("app", 3)]);
    let err = m2.allocate(&p2, container(&p2, "app"), None).unwrap_err();
    assert!(
        err.message.contains("Requested: 3, Available: 2"),
        "{}",
        err.message
    );
    cancel2.cancel();
    task2.await.unwrap();
    plugin.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_registered_through_the_plugin_watcher() {
    use testapi::device_plugin::{DevicePlugin, PluginConfig};
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join(DEVICE_PLUGINS_DIR);
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let (m, cancel, task) = start(&plugins);
    until("kubelet.sock", || plugins.join(KUBELET_SOCKET).exists()).await;
    let mut watcher = crate::pluginwatcher::PluginWatcher::new(&registry);
    m.handle_watched_plugins(&mut watcher);
    let watching = tokio::spawn(watcher.run(cancel.clone()));

    let mut config = PluginConfig::new(&plugins, WIDGET, 2);
    config.registry_dir = Some(registry);
    let plugin = DevicePlugin::start(config).await.unwrap();
    until("the devices", || {
        m.resources().allocatable.get(WIDGET) == Some(&2)
    })
    .await;
    assert_eq!(plugin.registration_statuses(), vec![(true, String::new())]);
    plugin.stop();
    until("the deregistration", || {
        m.resources().allocatable.get(WIDGET) == Some(&0)
    })
    .await;
    assert_eq!(
        m.resources().capacity[WIDGET],
        2,
        "kept for the grace period"
    );
    cancel.cancel();
    task.await.unwrap();
    watching.await.unwrap();
}
