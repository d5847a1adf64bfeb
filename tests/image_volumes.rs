//! Image volumes (`volumes[].image`, beta and on by default since 1.35) on a real
//! containerd: on 2.1 and newer the image is pulled with the volume's pull policy and
//! mounted read-only into the container; older runtimes cannot mount an image, and the
//! container says why instead of starting without its volume.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Whether the test bed's containerd mounts images (2.1 and newer).
fn mounts_images() -> bool {
    let bin = std::env::var("OXLET_TEST_CONTAINERD").unwrap_or_else(|_| "containerd".into());
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text
        .split_whitespace()
        .nth(2)
        .unwrap_or("")
        .trim_start_matches('v');
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    eprintln!("containerd {version}");
    (major, minor) >= (2, 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_volume_is_mounted_read_only_where_the_runtime_can() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "imgvol"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "tools", "image": {
                "reference": "localhost/oxlet/busybox:1", "pullPolicy": "IfNotPresent"}}],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1", "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "test -x /tools/bin/busybox && echo found; \
                    touch /tools/x 2>/dev/null && echo tools=rw || echo tools=ro; sleep 3600"],
                "volumeMounts": [{"name": "tools", "mountPath": "/tools"}],
            }],
        },
    });
    write_manifest(&ox.manifests, "imgvol.json", &pod.to_string());
    if mounts_images() {
        let running = ox.wait_running("imgvol", WAIT).await;
        let log = ox.main_log_once(&running, "tools=").await;
        assert!(log.contains("found") && log.contains("tools=ro"), "{log}");
    } else {
        let (reason, message) = ox
            .wait_for("imgvol refused", WAIT, |pods| {
                let w = container_status(find(pods, "imgvol")?, "main")?
                    .state
                    .as_ref()?
                    .waiting
                    .as_ref()?;
                let reason = w.reason.clone()?;
                (reason != "ContainerCreating")
                    .then(|| (reason, w.message.clone().unwrap_or_default()))
            })
            .await;
        eprintln!("refused: {reason}: {message}");
        assert_eq!(reason, "CreateContainerError", "{message}");
    }
}
