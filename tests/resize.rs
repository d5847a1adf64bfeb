//! In-place pod resize on a real containerd, with the real oxlet binary in cluster mode
//! against the in-repo test apiserver: a pod's cpu limit goes up and down and its
//! container's and pod's cgroups follow without a restart; a memory limit goes up; a
//! memory limit below what the container holds is refused (the old limit stays, no
//! OOM kill); `resizePolicy: RestartContainer` restarts the container once with the
//! new limit; and a SIGKILLed oxlet, started again, applies nothing twice (its
//! `actuated_pods_state` read back).

mod agent;
mod common;

use std::path::PathBuf;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(40);
const NODE: &str = "testnode";
const MI: i64 = 1 << 20;
/// The line oxlet logs (at -v=2) for each in-place container update it sends.
const RESIZE_LINE: &str = "resizing container in place";

/// A Guaranteed pod whose container `main` holds `shm_mib` MiB in /dev/shm, with an
/// optional memory `resizePolicy`.
fn resizable_pod(
    name: &str,
    cpu: &str,
    memory: &str,
    shm_mib: u32,
    memory_policy: Option<&str>,
) -> Pod {
    let script = format!("dd if=/dev/zero of=/dev/shm/fill bs=1M count={shm_mib} && sleep 3600");
    let mut c = json!({
        "name": "main", "image": "localhost/oxlet/busybox:1",
        "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
        "resources": {
            "requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory},
        },
    });
    if let Some(policy) = memory_policy {
        c["resizePolicy"] = json!([{"resourceName": "memory", "restartPolicy": policy}]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [c]},
    }))
    .unwrap()
}

/// The resize request through the `pods/resize` subresource (the one way a real
/// apiserver takes it): container `main`'s requests and limits set to `cpu`/`memory`.
async fn resize(api: &TestApiServer, name: &str, cpu: &str, memory: &str) {
    let list = json!({"cpu": cpu, "memory": memory});
    let patch = json!({"spec": {"containers": [
        {"name": "main", "resources": {"requests": list, "limits": list}}
    ]}});
    resize_with(api, name, patch).await;
}

/// Sends `patch` (strategic merge) to the pod's `resize` subresource.
async fn resize_with(api: &TestApiServer, name: &str, patch: serde_json::Value) {
    let pods: Api<Pod> = Api::namespaced(client_of(api).await, "default");
    resize_pod(&pods, name, patch).await;
}

fn cgroup_v2() -> bool {
    rustix::fs::statfs("/sys/fs/cgroup").is_ok_and(|s| s.f_type == 0x6367_7270)
}

/// The pod cgroup's file: v1 `<controller>/<root>/kubepods[/<qos>]/pod<uid>/<v1 file>`,
/// v2 `<root>/kubepods[/<qos>]/pod<uid>/<v2 file>`, below the pod's QoS class.
fn pod_file(ox: &Oxlet, uid: &str, controller: &str, v1: &str, v2: &str) -> PathBuf {
    let at = |rel: &str, file: &str| {
        if cgroup_v2() {
            PathBuf::from("/sys/fs/cgroup")
                .join(ox.cgroup_root.trim_start_matches('/'))
                .join(rel)
                .join(file)
        } else {
            ox.cgroup_file(controller, &format!("{rel}/{file}"))
        }
    };
    let file = if cgroup_v2() { v2 } else { v1 };
    ["", "burstable/", "besteffort/"]
        .map(|qos| format!("kubepods/{qos}pod{uid}"))
        .into_iter()
        .map(|rel| at(&rel, file))
        .find(|p| p.exists())
        .unwrap_or_else(|| at(&format!("kubepods/pod{uid}"), file))
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_string()
}

/// (cpu quota, memory limit) of the pod cgroup; -1 for none.
fn pod_limits(ox: &Oxlet, uid: &str) -> (i64, i64) {
    let quota = read(&pod_file(ox, uid, "cpu", "cpu.cfs_quota_us", "cpu.max"));
    let memory = read(&pod_file(
        ox,
        uid,
        "memory",
        "memory.limit_in_bytes",
        "memory.max",
    ));
    (
        number(quota.split_whitespace().next().unwrap()),
        number(&memory),
    )
}

fn number(text: &str) -> i64 {
    match text {
        "max" => -1,
        t => t
            .parse::<i64>()
            .map(|v| if v > 1 << 62 { -1 } else { v })
            .unwrap(),
    }
}

/// (cpu quota, memory limit) the container's own cgroup has, read inside it (its
/// cgroup is the root of its /sys/fs/cgroup view).
async fn container_limits(bed: &Testbed, id: &str) -> (i64, i64) {
    let out = if cgroup_v2() {
        exec_sh(
            bed,
            id,
            "cut -d' ' -f1 /sys/fs/cgroup/cpu.max; cat /sys/fs/cgroup/memory.max",
        )
        .await
    } else {
        exec_sh(
            bed,
            id,
            "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes",
        )
        .await
    };
    let mut lines = out.lines();
    (number(lines.next().unwrap()), number(lines.next().unwrap()))
}

/// Polls until `check` holds, or fails with `what` and the oxlet log.
async fn eventually<T>(ox: &Oxlet, what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    ox.eventually(what, START, check).await
}

/// Waits until the container and the pod cgroup have `want` (cpu quota, memory limit).
async fn wait_limits(bed: &Testbed, ox: &Oxlet, uid: &str, id: &str, want: (i64, i64)) {
    eventually(ox, &format!("limits {want:?}"), async || {
        let (c, p) = (container_limits(bed, id).await, pod_limits(ox, uid));
        (c == want && p == want).then_some(())
    })
    .await;
}

/// The running instance of `main` and its restart count, from oxlet's pod status.
async fn running_main(ox: &Oxlet, name: &str) -> (String, i32) {
    let pod = ox.wait_api_running(name, START).await;
    let s = container(&pod, "main");
    (runtime_id(&pod, "main"), s.restart_count)
}

/// The (cpu quota, memory limit) the runtime reports for container `id` (CRI
/// `ContainerStatus.resources.linux`, what oxlet reads back for the pod status's
/// `containerStatuses[].resources`); None when it reports no resources.
async fn reported_limits(bed: &Testbed, id: &str) -> Option<(i64, i64)> {
    let mut c = bed.cri().await;
    let status = c
        .container_status(k8s_cri::v1::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status?;
    let linux = status.resources?.linux?;
    Some((linux.cpu_quota, linux.memory_limit_in_bytes))
}

fn start(bed: &Testbed, api: &TestApiServer) -> Oxlet {
    Oxlet::start(
        bed,
        &[
            &format!("--kubeconfig={}", api.kubeconfig().display()),
            "--sync-frequency=1s",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_and_memory_resize_in_place_once_and_a_decrease_below_usage_is_refused() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let mut ox = start(&bed, &api);
    api.put(&resizable_pod("web", "500m", "128Mi", 40, None))
        .unwrap();
    let pod = ox.wait_api_running("web", START).await;
    let uid = uid(&pod);
    let id = runtime_id(&pod, "main");
    wait_limits(&bed, &ox, &uid, &id, (50_000, 128 * MI)).await;

    // The cpu limit up, then down: both cgroups follow, the container is not restarted.
    resize(&api, "web", "1", "128Mi").await;
    wait_limits(&bed, &ox, &uid, &id, (100_000, 128 * MI)).await;
    resize(&api, "web", "250m", "128Mi").await;
    wait_limits(&bed, &ox, &uid, &id, (25_000, 128 * MI)).await;
    // The memory limit up.
    resize(&api, "web", "250m", "256Mi").await;
    wait_limits(&bed, &ox, &uid, &id, (25_000, 256 * MI)).await;
    assert_eq!(running_main(&ox, "web").await, (id.clone(), 0));
    // The status says what the runtime runs and what was granted, and the resize is over.
    let p = ox
        .poll("the status reports the new resources", START, || {
            api.get::<Pod>("default", "web").unwrap().filter(|p| {
                let c = container_status(p, "main");
                let limits = c.and_then(|c| c.resources.as_ref()?.limits.clone());
                limits.is_some_and(|l| l["cpu"].0 == "250m" && l["memory"].0 == "256Mi")
                    && pod_condition(p, "PodResizeInProgress").is_none()
            })
        })
        .await;
    let granted = container(&p, "main").allocated_resources.clone().unwrap();
    assert_eq!(
        (granted["cpu"].0.as_str(), granted["memory"].0.as_str()),
        ("250m", "256Mi")
    );
    let sent = ox.log().matches(RESIZE_LINE).count();
    assert_eq!(
        sent,
        3,
        "one update per change (cpu twice, memory once)\n{}",
        tail(&ox.log(), 60)
    );

    // SIGKILL between two syncs, then a new start: the actuated state is read back and
    // nothing is applied again.
    let state = std::fs::read_to_string(ox.root.join("actuated_pods_state")).unwrap();
    assert!(state.contains(&uid), "{state}");
    ox.kill9();
    ox.spawn(&[
        &format!("--kubeconfig={}", api.kubeconfig().display()),
        "--sync-frequency=1s",
    ]);
    ox.wait_up(START).await;
    ox.wait_api_running("web", START).await;
    let read_back = "read back the resources the runtime was last given";
    let line = ox
        .log()
        .lines()
        .rfind(|l| l.contains(read_back))
        .map(str::to_string);
    assert!(
        line.as_deref().is_some_and(|l| l.contains("pods=1")),
        "{line:?}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        ox.log().matches(RESIZE_LINE).count(),
        sent,
        "nothing sent again after the restart"
    );
    assert_eq!(running_main(&ox, "web").await, (id.clone(), 0));

    // Below what it holds (40 MiB in /dev/shm): refused, the limit stays, no OOM kill.
    resize(&api, "web", "250m", "20Mi").await;
    eventually(&ox, "the refusal", async || {
        ox.log()
            .contains("cannot decrease memory limits: ")
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(container_limits(&bed, &id).await, (25_000, 256 * MI));
    assert_eq!(pod_limits(&ox, &uid), (25_000, 256 * MI));
    assert_eq!(
        running_main(&ox, "web").await,
        (id.clone(), 0),
        "still the same, never OOM-killed"
    );
    // The refusal is the resize's condition (reason Error), with kubelet's message.
    let p = ox
        .poll("PodResizeInProgress with reason Error", START, || {
            api.get::<Pod>("default", "web").unwrap().filter(|p| {
                pod_condition(p, "PodResizeInProgress").is_some_and(|c| {
                    c.reason.as_deref() == Some("Error")
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.starts_with("cannot decrease memory limits: "))
                })
            })
        })
        .await;
    assert_eq!(
        pod_condition(&p, "PodResizeInProgress")
            .unwrap()
            .observed_generation,
        p.metadata.generation
    );
    let log = ox.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("cannot decrease memory limits"))
        .unwrap();
    assert!(
        refusal.contains(&format!(
            "attempting to set container \\\"main\\\" memory limit ({}) below current usage (",
            20 * MI
        )) || refusal.contains(&format!(
            "attempting to set container \"main\" memory limit ({}) below current usage (",
            20 * MI
        )),
        "{refusal}"
    );
    assert!(
        refusal.contains(&format!(
            "attempting to set pod memory limit ({}) below current usage (",
            20 * MI
        )),
        "{refusal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_container_policy_restarts_once_with_the_new_memory_limit() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let ox = start(&bed, &api);
    api.put(&resizable_pod(
        "web",
        "500m",
        "64Mi",
        1,
        Some("RestartContainer"),
    ))
    .unwrap();
    let pod = ox.wait_api_running("web", START).await;
    let (uid, first) = (uid(&pod), runtime_id(&pod, "main"));
    wait_limits(&bed, &ox, &uid, &first, (50_000, 64 * MI)).await;

    resize(&api, "web", "500m", "96Mi").await;
    let (second, restarts) = eventually(&ox, "the restart", async || {
        let (id, restarts) = running_main(&ox, "web").await;
        (id != first).then_some((id, restarts))
    })
    .await;
    assert_eq!(restarts, 1);
    wait_limits(&bed, &ox, &uid, &second, (50_000, 96 * MI)).await;
    assert!(
        !ox.log().contains(RESIZE_LINE),
        "no in-place update for a restart"
    );

    // The cpu (NotRequired) changes in place: no second restart.
    resize(&api, "web", "1", "96Mi").await;
    wait_limits(&bed, &ox, &uid, &second, (100_000, 96 * MI)).await;
    assert_eq!(running_main(&ox, "web").await, (second.clone(), 1));
    // containerd 1.6.20, 1.7 and 2.x all report the resources, the update's included.
    assert_eq!(
        reported_limits(&bed, &second).await,
        Some((100_000, 96 * MI)),
        "containerd {:?}",
        bed.containerd_release()
    );
}

/// A pod with resources of its own (`spec.resources`) and none on its container: its
/// pod cgroup follows a resize of them, the container runs on, and the status reports
/// the pod's grant and what its cgroup was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_level_resize_changes_the_pod_cgroup_only() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let ox = start(&bed, &api);
    let mut pod = api_pod("shared", NODE, "sleep 3600", 1);
    pod.spec.as_mut().unwrap().resources = Some(
        serde_json::from_value(json!({
            "requests": {"cpu": "200m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"},
        }))
        .unwrap(),
    );
    api.put(&pod).unwrap();
    let pod = ox.wait_api_running("shared", START).await;
    let (uid, id) = (uid(&pod), runtime_id(&pod, "main"));
    eventually(&ox, "the pod cgroup at 500m", async || {
        (pod_limits(&ox, &uid) == (50_000, 128 * MI)).then_some(())
    })
    .await;

    resize_with(
        &api,
        "shared",
        json!({"spec": {"resources": {"limits": {"cpu": "1", "memory": "256Mi"}}}}),
    )
    .await;
    eventually(&ox, "the pod cgroup at 1 CPU and 256Mi", async || {
        (pod_limits(&ox, &uid) == (100_000, 256 * MI)).then_some(())
    })
    .await;
    let p = ox
        .poll("the pod's resources reported", START, || {
            api.get::<Pod>("default", "shared").unwrap().filter(|p| {
                let s = p.status.as_ref();
                let limits = s.and_then(|s| s.resources.as_ref()?.limits.clone());
                limits.is_some_and(|l| l["memory"].0 == "256Mi")
                    && pod_condition(p, "PodResizeInProgress").is_none()
            })
        })
        .await;
    let granted = p
        .status
        .as_ref()
        .unwrap()
        .allocated_resources
        .clone()
        .unwrap();
    assert_eq!(granted["cpu"].0, "200m");
    assert_eq!(running_main(&ox, "shared").await, (id, 0));
}
