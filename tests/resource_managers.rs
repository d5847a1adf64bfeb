//! kubelet's resource managers on a real containerd with the real oxlet binary:
//! the static CPU manager with CPU 0 reserved gives a Guaranteed container with
//! `cpu: 1` an exclusive CPU and everyone else the shared pool, moves the shared
//! containers' cpusets as the pool shrinks and grows (its reconcile loop), keeps both
//! across a restart (`cpu_manager_state`), and refuses a pod asking for more exclusive
//! CPUs than are free with kubelet's reason and message. Device plugins' devices
//! reach pods, the pod resources API and the Node; a DRA claim reaches its container
//! through the driver's CDI spec, and is unprepared when the pod ends.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const START: Duration = Duration::from_secs(40);
/// The reconcile loop's period in these tests (a pool change is applied within 1 s).
const RECONCILE: &str = "--cpu-manager-reconcile-period=2s";

/// The host's online CPUs, as the kernel lists them.
fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        out.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    out
}

/// A busybox pod whose container `main` sleeps with `resources` (YAML lines, indented
/// as the fields of `resources:`).
fn resource_pod(name: &str, resources: &str) -> String {
    format!(
        "{}    resources:\n{resources}",
        pod_yaml(name, "sleep 3600", "")
    )
}

/// A pod with one container `main` asking for `cpu` (and 32Mi of memory); `limits`
/// too makes it Guaranteed.
fn cpu_pod(name: &str, cpu: &str, guaranteed: bool) -> String {
    let requests = format!("      requests:\n        cpu: \"{cpu}\"\n        memory: 32Mi\n");
    let limits = if guaranteed {
        format!("      limits:\n        cpu: \"{cpu}\"\n        memory: 32Mi\n")
    } else {
        String::new()
    };
    resource_pod(name, &format!("{requests}{limits}"))
}

/// The CPUs container `main` of `pod` may run on, as its own process sees them.
async fn allowed_cpus(bed: &Testbed, pod: &Pod) -> String {
    let id = runtime_id(pod, "main");
    let out = exec_sh(bed, &id, "grep Cpus_allowed_list /proc/self/status").await;
    out.split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// Waits until `pod`'s container may run on exactly `want`.
async fn wait_allowed(bed: &Testbed, ox: &Oxlet, pod: &Pod, want: &str) {
    let t = std::time::Instant::now();
    loop {
        let got = allowed_cpus(bed, pod).await;
        if got == want {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}: Cpus_allowed_list {got}, want {want}\n{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_cpu_manager_gives_exclusive_cpus_and_the_shared_pool_follows() {
    let cpus = online_cpus();
    if cpus.len() < 2 || cpus[0] != 0 {
        eprintln!("skipped: needs CPUs 0 and 1 online, have {cpus:?}");
        return;
    }
    let all = if cpus.len() == 2 {
        "0-1".to_string()
    } else {
        format!("0-{}", cpus.len() - 1)
    };
    let bed = Testbed::start().await;
    let flags = [
        "--cpu-manager-policy=static",
        "--reserved-cpus=0",
        RECONCILE,
    ];
    let mut ox = Oxlet::start(&bed, &flags);

    // A Burstable pod first: the whole machine is the shared pool.
    write_manifest(
        &ox.manifests,
        "shared.yaml",
        &cpu_pod("shared", "100m", false),
    );
    let shared = ox.wait_running("shared", START).await;
    wait_allowed(&bed, &ox, &shared, &all).await;

    // A Guaranteed pod with a whole CPU: an exclusive one, never the reserved CPU 0;
    // the shared pod's cpuset shrinks without a restart.
    write_manifest(&ox.manifests, "excl.yaml", &cpu_pod("excl", "1", true));
    let excl = ox.wait_running("excl", START).await;
    let exclusive = allowed_cpus(&bed, &excl).await;
    assert!(
        !exclusive.contains(',') && !exclusive.contains('-') && exclusive != "0",
        "one exclusive CPU, not the reserved one: {exclusive}"
    );
    let pool: Vec<String> = (cpus.iter())
        .filter(|c| c.to_string() != exclusive)
        .map(ToString::to_string)
        .collect();
    if cpus.len() == 2 {
        wait_allowed(&bed, &ox, &shared, &pool.join(",")).await;
    }
    let state = std::fs::read_to_string(ox.root.join("cpu_manager_state")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["policyName"], "static");
    assert_eq!(state["entries"][uid(&excl)]["main"], exclusive.as_str());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ox.root.join("cpu_manager_state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // More exclusive CPUs than are free: refused at admission with kubelet's words.
    if cpus.len() == 2 {
        write_manifest(&ox.manifests, "more.yaml", &cpu_pod("more", "1", true));
        let more = ox
            .wait_for("more rejected", START, |pods| {
                find(pods, "more").filter(|p| phase(p) == "Failed").cloned()
            })
            .await;
        let status = more.status.unwrap();
        assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
        assert_eq!(
            status.message.as_deref(),
            Some(
                "Pod was rejected: Allocate failed due to not enough cpus available to satisfy request: requested=1, available=0, which is unexpected"
            )
        );
        std::fs::remove_file(ox.manifests.join("more.yaml")).unwrap();
    }

    // A restart keeps both: the exclusive CPU from the state file, the pool with it.
    let _ = ox.sigterm();
    ox.spawn(&flags);
    let excl = ox.wait_running("excl", START).await;
    assert_eq!(allowed_cpus(&bed, &excl).await, exclusive);
    if cpus.len() == 2 {
        wait_allowed(&bed, &ox, &shared, &pool.join(",")).await;
    }

    // The Guaranteed pod leaves: its CPU goes back to the pool and the shared
    // container's cpuset grows back.
    std::fs::remove_file(ox.manifests.join("excl.yaml")).unwrap();
    ox.wait_for("excl gone", START, |pods| {
        find(pods, "excl").is_none().then_some(())
    })
    .await;
    wait_allowed(&bed, &ox, &shared, &all).await;
    let state = std::fs::read_to_string(ox.root.join("cpu_manager_state")).unwrap();
    assert!(
        !state.contains(&uid(&excl)),
        "the pod's entry is gone: {state}"
    );
}

/// The pod resources API's messages this test reads (its own copy of the v1 wire
/// contract, so a mistake on oxlet's side is not made twice).
mod podresources {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Empty {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ListResponse {
        #[prost(message, repeated, tag = "1")]
        pub(super) pod_resources: Vec<PodResources>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct PodResources {
        #[prost(string, tag = "1")]
        pub(super) name: String,
        #[prost(string, tag = "2")]
        pub(super) namespace: String,
        #[prost(message, repeated, tag = "3")]
        pub(super) containers: Vec<ContainerResources>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ContainerResources {
        #[prost(string, tag = "1")]
        pub(super) name: String,
        #[prost(message, repeated, tag = "2")]
        pub(super) devices: Vec<ContainerDevices>,
        #[prost(int64, repeated, tag = "3")]
        pub(super) cpu_ids: Vec<i64>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ContainerDevices {
        #[prost(string, tag = "1")]
        pub(super) resource_name: String,
        #[prost(string, repeated, tag = "2")]
        pub(super) device_ids: Vec<String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct AllocatableResponse {
        #[prost(message, repeated, tag = "1")]
        pub(super) devices: Vec<ContainerDevices>,
        #[prost(int64, repeated, tag = "2")]
        pub(super) cpu_ids: Vec<i64>,
    }

    /// One call on the socket at `path`.
    pub(super) async fn call<Resp: prost::Message + Default + 'static>(
        path: &std::path::Path,
        method: &str,
    ) -> Resp {
        let path = path.to_path_buf();
        let channel = tonic::transport::Endpoint::from_static("http://localhost")
            .connect_with_connector(tower::service_fn(move |_: tonic::codegen::http::Uri| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }))
            .await
            .expect("connect to the pod resources socket");
        let mut client = tonic::client::Grpc::new(channel);
        client.ready().await.unwrap();
        let path = format!("/v1.PodResourcesLister/{method}").parse().unwrap();
        let codec = tonic_prost::ProstCodec::<Empty, Resp>::default();
        client
            .unary(tonic::Request::new(Empty {}), path, codec)
            .await
            .unwrap()
            .into_inner()
    }
}

/// A Guaranteed pod with a whole CPU and `widgets` devices of the test plugin.
fn widget_pod(name: &str, widgets: u32) -> String {
    let limits =
        format!("cpu: \"1\"\n        memory: 32Mi\n        example.com/widget: \"{widgets}\"\n");
    resource_pod(name, &format!("      limits:\n        {limits}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_plugins_devices_reach_pods_and_the_pod_resources_api() {
    let cpus = online_cpus();
    if cpus.len() < 2 || cpus[0] != 0 {
        eprintln!("skipped: needs CPUs 0 and 1 online, have {cpus:?}");
        return;
    }
    let bed = Testbed::start().await;
    let flags = [
        "--cpu-manager-policy=static",
        "--reserved-cpus=0",
        RECONCILE,
    ];
    let ox = Oxlet::start(&bed, &flags);
    let plugin_dir = ox.root.join("device-plugins");
    ox.poll("the registration socket", START, || {
        plugin_dir.join("kubelet.sock").exists().then_some(())
    })
    .await;
    let plugin = testapi::device_plugin::DevicePlugin::start(
        testapi::device_plugin::PluginConfig::new(&plugin_dir, "example.com/widget", 2),
    )
    .await
    .unwrap();
    let api = ox.root.join("pod-resources/kubelet.sock");
    ox.eventually("two allocatable widgets", START, async || {
        let a: podresources::AllocatableResponse =
            podresources::call(&api, "GetAllocatableResources").await;
        (a.devices.iter().map(|d| d.device_ids.len()).sum::<usize>() == 2).then_some(())
    })
    .await;

    // The pod gets its device: the plugin's mount and env, and its Allocate was asked.
    write_manifest(&ox.manifests, "gadget.yaml", &widget_pod("gadget", 1));
    let gadget = ox.wait_running("gadget", START).await;
    let id = runtime_id(&gadget, "main");
    let ids = exec_sh(&bed, &id, "echo $WIDGET_IDS")
        .await
        .trim()
        .to_string();
    assert!(plugin.device_ids().contains(&ids), "WIDGET_IDS={ids}");
    let content = exec_sh(&bed, &id, &format!("cat /widgets/{ids}")).await;
    assert_eq!(
        content,
        std::fs::read_to_string(plugin.device_file(&ids)).unwrap()
    );
    assert_eq!(plugin.allocate_calls(), 1);

    // The pod resources API lists the container's exclusive CPU and its device.
    let list: podresources::ListResponse = podresources::call(&api, "List").await;
    let p = (list.pod_resources.iter())
        .find(|p| p.name.starts_with("gadget"))
        .expect("gadget is listed");
    let main = &p.containers[0];
    assert_eq!(main.devices[0].resource_name, "example.com/widget");
    assert_eq!(main.devices[0].device_ids, std::slice::from_ref(&ids));
    assert_eq!(
        main.cpu_ids,
        [allowed_cpus(&bed, &gadget).await.parse::<i64>().unwrap()]
    );

    // The other device turns unhealthy: allocatable drops to one.
    let other = plugin.device_ids().into_iter().find(|d| *d != ids).unwrap();
    plugin.set_healthy(&other, false);
    ox.eventually("one allocatable widget", START, async || {
        let a: podresources::AllocatableResponse =
            podresources::call(&api, "GetAllocatableResources").await;
        (a.devices.iter().map(|d| d.device_ids.len()).sum::<usize>() == 1).then_some(())
    })
    .await;

    let greedy = resource_pod(
        "greedy",
        "      limits:\n        example.com/widget: \"2\"\n",
    );
    write_manifest(&ox.manifests, "greedy.yaml", &greedy);
    let refused = ox
        .wait_for("greedy rejected", START, |pods| {
            find(pods, "greedy")
                .filter(|p| phase(p) == "Failed")
                .cloned()
        })
        .await;
    let status = refused.status.unwrap();
    assert_eq!(status.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        status.message.as_deref(),
        Some(
            "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/widget. Requested: 2, Available: 0, which is unexpected"
        )
    );

    // The plugin restarts: the running pod keeps its device and its container.
    plugin.stop();
    plugin.restart().await.unwrap();
    ox.wait_logged("Device plugin connected", 2, START).await;
    let again = ox.wait_running("gadget", START).await;
    assert_eq!(
        runtime_id(&again, "main"),
        id,
        "the container was not restarted"
    );
    let list: podresources::ListResponse = podresources::call(&api, "List").await;
    let p = (list.pod_resources.iter())
        .find(|p| p.name.starts_with("gadget"))
        .unwrap();
    assert_eq!(p.containers[0].devices[0].device_ids, [ids]);

    // kubelet's resource manager metrics on /metrics, as this process recorded them.
    let (code, text) = ox.get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    let sample = |series: &str| -> f64 {
        (text.lines())
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{series} not on /metrics"))
    };
    let v1 =
        |name: &str| format!("kubelet_pod_resources_endpoint_{name}{{server_api_version=\"v1\"}}");
    let widget = "{resource_name=\"example.com/widget\"}";
    assert!(sample(&format!("kubelet_device_plugin_registration_total{widget}")) >= 2.0);
    assert_eq!(
        sample(&format!(
            "kubelet_device_plugin_alloc_duration_seconds_count{widget}"
        )),
        1.0
    );
    assert_eq!(sample(&v1("requests_list")), 2.0);
    let allocatable = sample(&v1("requests_get_allocatable"));
    assert!(allocatable >= 2.0);
    assert_eq!(sample(&v1("requests_total")), 2.0 + allocatable);
    assert!(sample("kubelet_cpu_manager_pinning_requests_total") >= 1.0);
    assert_eq!(
        sample("kubelet_cpu_manager_exclusive_cpu_allocation_count"),
        1.0
    );
    assert_eq!(
        sample("kubelet_cpu_manager_shared_pool_size_millicores"),
        ((cpus.len() - 2) * 1000) as f64,
        "every CPU but the reserved one and gadget's"
    );
    assert!(sample("kubelet_topology_manager_admission_requests_total") >= 2.0);
    assert!(sample("kubelet_topology_manager_admission_duration_ms_count") >= 2.0);
}

/// A Guaranteed pod asking for `memory` (and 100m of CPU).
fn memory_pod(name: &str, memory: &str) -> String {
    resource_pod(
        name,
        &format!("      limits:\n        cpu: 100m\n        memory: {memory}\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_memory_manager_pins_guaranteed_pods_and_refuses_what_no_node_holds() {
    let bed = Testbed::start().await;
    // The default hard eviction threshold (100Mi) is all node allocatable holds back,
    // so that is what NUMA node 0 must reserve.
    let flags = [
        "--memory-manager-policy=Static",
        "--reserved-memory=0:memory=100Mi",
    ];
    let ox = Oxlet::start(&bed, &flags);
    write_manifest(&ox.manifests, "pinned.yaml", &memory_pod("pinned", "32Mi"));
    let pinned = ox.wait_running("pinned", START).await;
    let id = runtime_id(&pinned, "main");
    let mems = exec_sh(&bed, &id, "grep Mems_allowed_list /proc/self/status").await;
    assert_eq!(mems.split_whitespace().last(), Some("0"), "{mems}");
    let state = std::fs::read_to_string(ox.root.join("memory_manager_state")).unwrap();
    assert!(state.contains(&uid(&pinned)), "{state}");

    // More memory than NUMA node 0 has: refused before the resource fit is asked.
    write_manifest(&ox.manifests, "huge.yaml", &memory_pod("huge", "4000Gi"));
    let huge = ox
        .wait_for("huge rejected", START, |pods| {
            find(pods, "huge").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    let status = huge.status.unwrap();
    let message = status.message.unwrap_or_default();
    assert_eq!(
        status.reason.as_deref(),
        Some("UnexpectedAdmissionError"),
        "{message}"
    );
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to [memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available, which is unexpected"
    );
}

const NODE: &str = "testnode";
const DRA_DRIVER: &str = "gpu.test.oxlet.dev";

/// The Node's `capacity` and `allocatable` of `resource`, as the apiserver holds them.
fn node_quantities(server: &testapi::TestApiServer, resource: &str) -> Option<(String, String)> {
    let status = server.get::<Node>("", NODE).unwrap()?.status?;
    let of = |m: Option<std::collections::BTreeMap<String, Quantity>>| {
        m?.get(resource).map(|q| q.0.clone())
    };
    Some((of(status.capacity)?, of(status.allocatable)?))
}

/// Pod `name` in the apiserver, not yet bound, whose container `main` runs `script`
/// holding the claim made from template `template`.
fn claim_pod(name: &str, template: &str, script: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "resources": {"claims": [{"name": "gpu"}]},
            }],
        },
    }))
    .unwrap()
}

/// What the scheduler does once the claims are allocated: the pod is bound to the node.
fn bind(server: &testapi::TestApiServer, name: &str) -> Pod {
    let mut pod: Pod = server.get("default", name).unwrap().unwrap();
    pod.spec.as_mut().unwrap().node_name = Some(NODE.into());
    server.put(&pod).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugins_reach_the_node_and_dra_claims_reach_containers_through_cdi() {
    use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
    use testapi::dra_driver::{DriverConfig, TestDraDriver};
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;

    // A device plugin's devices are the Node's extended resource; an unhealthy one
    // leaves allocatable, not capacity.
    let plugin_dir = ox.root.join("device-plugins");
    ox.poll("the registration socket", START, || {
        plugin_dir.join("kubelet.sock").exists().then_some(())
    })
    .await;
    let plugin = testapi::device_plugin::DevicePlugin::start(
        testapi::device_plugin::PluginConfig::new(&plugin_dir, "example.com/widget", 2),
    )
    .await
    .unwrap();
    let want = |c: &str, a: &str| Some((c.to_owned(), a.to_owned()));
    ox.poll("the Node's two widgets", START, || {
        (node_quantities(&server, "example.com/widget") == want("2", "2")).then_some(())
    })
    .await;
    plugin.set_healthy(&plugin.device_ids()[0], false);
    ox.poll("one allocatable widget on the Node", START, || {
        (node_quantities(&server, "example.com/widget") == want("2", "1")).then_some(())
    })
    .await;

    // A DRA driver registers through the plugin watcher and publishes its slice.
    let host_file = dir.path().join("gpu-0");
    std::fs::write(&host_file, "the gpu's own file\n").unwrap();
    let mut config = DriverConfig::under(&ox.root, DRA_DRIVER, NODE, &host_file, 2);
    config.cdi_dir = bed.cdi_dir().to_owned();
    let driver = TestDraDriver::start(config, Some(server.handle()))
        .await
        .unwrap();
    let (registered, error) = ox
        .poll("the driver's registration", START, || {
            driver.registration_status()
        })
        .await;
    assert!(registered, "{error}");

    // A pod whose claim the scheduler allocated runs with the CDI device's edits: the
    // file mounted and the variable set (containerd 1.6 has no CDI).
    let template: ResourceClaimTemplate = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "one", "exactly": {"deviceClassName": "gpu"}}]}}},
    }))
    .unwrap();
    server.put(&template).unwrap();
    let script = "echo \"device=$DRA_DEVICE_ONE\"; cat /var/run/dra/dev-0; sleep 3600";
    server.put(&claim_pod("trainer", "gpu", script)).unwrap();
    let claims = (server.handle())
        .allocate_claims("default", "trainer", DRA_DRIVER, NODE, &["dev-0"])
        .unwrap();
    let claim_uid = claims[0].metadata.uid.clone().unwrap();
    bind(&server, "trainer");
    let trainer = ox.wait_api_running("trainer", START).await;
    assert_eq!(driver.prepare_calls(), 1);
    let spec = bed.cdi_dir().join(format!("{DRA_DRIVER}-{claim_uid}.json"));
    assert!(spec.exists(), "the driver wrote {}", spec.display());
    if bed.containerd_release() >= (1, 7) {
        let log = ox.main_log_once(&trainer, "the gpu's own file").await;
        assert!(log.contains("device=dev-0"), "{log}");
    } else {
        eprintln!("containerd 1.6 has no CDI: the device's edits are not checked");
    }

    // The pod ends: its claim is unprepared and the driver's spec goes.
    let pods: kube::Api<Pod> = kube::Api::namespaced(client_of(&server).await, "default");
    pods.delete("trainer", &Default::default()).await.unwrap();
    ox.poll("NodeUnprepareResources", START, || {
        (driver.unprepare_calls() == 1).then_some(())
    })
    .await;
    assert!(!spec.exists());

    // A claim of a driver that never registered: the pod waits, with kubelet's event.
    let absent = "absent.test.oxlet.dev";
    server
        .put(&claim_pod("orphan", "gpu", "sleep 3600"))
        .unwrap();
    (server.handle())
        .allocate_claims("default", "orphan", absent, NODE, &["dev-9"])
        .unwrap();
    bind(&server, "orphan");
    let event = ox
        .poll("FailedPrepareDynamicResources", START, || {
            let events = server.list::<Event>(Some("default")).ok()?;
            events.into_iter().find(|e| {
                e.reason.as_deref() == Some("FailedPrepareDynamicResources")
                    && e.involved_object.name.as_deref() == Some("orphan")
            })
        })
        .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(&*format!(
            "Failed to prepare dynamic resources: prepare dynamic resources: DRA driver {absent} is not registered"
        ))
    );
    let orphan: Pod = server.get("default", "orphan").unwrap().unwrap();
    assert_eq!(phase(&orphan), "Pending");
    assert_eq!(driver.prepare_calls(), 1, "the other driver is not asked");
}
