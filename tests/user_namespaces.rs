//! User namespaces (`hostUsers: false`, GA in 1.36) on a real containerd. Where the
//! runtime's handler says it supports them (containerd 2.x with runc 1.2 or newer; the
//! test bed's containerd 2 runs runc 1.3), each such pod gets its own block of 65536
//! host IDs: its processes are root inside and an unprivileged host ID outside, the block
//! is kept in `<pods>/<uid>/userns` (kubelet's file, root-only), two pods never share a
//! block, and a file the pod's root makes in its volume is root's inside. Where the
//! handler does not support them (containerd 1.x, runc 1.1), the pod gets no sandbox and
//! kubelet's reason.

mod agent;
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const IMAGE: &str = "localhost/oxlet/busybox:1";
const BLOCK: u64 = 65536;

/// What the container says of itself: its UID, its UID map, and who owns the file it made.
const REPORT: &str = "touch /data/made; \
    echo \"uid=$(id -u) map=[$(cat /proc/self/uid_map | xargs)] owner=$(stat -c %u /data/made)\"; \
    sleep 3600";

fn pod(name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "hostUsers": false,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", REPORT],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
        },
    })
    .to_string()
}

/// The host PID of a container's first process (containerd's verbose status info).
async fn container_pid(bed: &Testbed, p: &Pod) -> i64 {
    let id = container_status(p, "main")
        .and_then(|c| c.container_id.clone())
        .expect("a container ID");
    let id = id.trim_start_matches("containerd://").to_string();
    let resp = bed
        .cri()
        .await
        .container_status(cri::ContainerStatusRequest {
            container_id: id,
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value =
        serde_json::from_str(&resp.info["info"]).expect("verbose container info is JSON");
    info["pid"].as_i64().expect("container info has a pid")
}

/// The real UID of a host process (`Uid:` in its status).
fn host_uid(pid: i64) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The (first host ID, length) of a pod's `uid=0 map=[0 H L] owner=0` line.
fn report(log: &str) -> (u64, u64) {
    let line = (log.lines())
        .find_map(|l| l.find("uid=").map(|at| &l[at..]))
        .expect(log);
    assert!(line.starts_with("uid=0 map=[0 "), "root inside: {line}");
    assert!(
        line.ends_with("] owner=0"),
        "the volume's file is root's: {line}"
    );
    let map = line.split('[').nth(1).unwrap().split(']').next().unwrap();
    let nums: Vec<u64> = map.split_whitespace().map(|n| n.parse().unwrap()).collect();
    (nums[1], nums[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_host_users_is_root_inside_and_unprivileged_outside() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    ox.spawn(&["-v=2"]);
    ox.wait_up(Duration::from_secs(30)).await;
    let supported = bed.default_handler_features().await.user_namespaces;
    for name in ["one", "two"] {
        write_manifest(&ox.manifests, &format!("{name}.json"), &pod(name));
    }

    if !supported {
        ox.wait_logged(
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces",
            1,
            WAIT,
        )
        .await;
        let pods = ox.pods().await;
        let one = find(&pods, "one").expect("the pod is known");
        assert!(cri_sandboxes(&bed, &uid(one)).await.is_empty());
        assert!(!ox.root.join("pods").join(uid(one)).join("userns").exists());
        return;
    }

    let mut firsts = Vec::new();
    for name in ["one", "two"] {
        let p = ox.wait_running(name, WAIT).await;
        let (first, length) = report(&ox.main_log_once(&p, "owner=").await);
        assert_eq!(length, BLOCK);
        assert!(first >= BLOCK && first % BLOCK == 0, "block at {first}");
        // Outside, the container's root is the block's first ID.
        assert_eq!(host_uid(container_pid(&bed, &p).await), first);
        // kubelet's file in the pod's directory, root's alone.
        let file = ox.root.join("pods").join(uid(&p)).join("userns");
        let kept: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let mapping = json!([{"hostId": first, "containerId": 0, "length": BLOCK}]);
        assert_eq!(
            kept,
            json!({"uidMappings": mapping, "gidMappings": mapping})
        );
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
        firsts.push(first);
    }
    assert_ne!(firsts[0], firsts[1], "each pod has its own block");

    // A pod gone frees its file with its directory.
    let pods = ox.pods().await;
    let one_dir = ox.root.join("pods").join(uid(find(&pods, "one").unwrap()));
    std::fs::remove_file(ox.manifests.join("one.json")).unwrap();
    let t = std::time::Instant::now();
    while one_dir.exists() {
        assert!(t.elapsed() < WAIT, "{} still there", one_dir.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
