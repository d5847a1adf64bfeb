//! Pod fields a 1.36 kubelet honours, on a real containerd: `env[].valueFrom.fileKeyRef`
//! (EnvFiles) reading what an init container wrote, `spec.hostnameOverride`,
//! `recursiveReadOnly` on a mount with a mount below it (recursive where the runtime's
//! handler says it can be, kubelet's refusal of `Enabled` where it cannot), the
//! containers' `volumeMounts` statuses, and `observedGeneration` following a spec
//! change through the test apiserver.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const NODE: &str = "testnode";
const IMAGE: &str = "localhost/oxlet/busybox:1";

/// A tmpfs mounted below a hostPath directory, unmounted when dropped.
struct SubMount(PathBuf);

impl SubMount {
    fn new(top: &Path) -> SubMount {
        let sub = top.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&sub)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs at {}", sub.display());
        SubMount(sub)
    }
}

impl Drop for SubMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn file_env(name: &str, key: &str, optional: bool) -> Value {
    json!({"name": name, "valueFrom": {"fileKeyRef": {
        "volumeName": "cfg", "path": "vars.env", "key": key, "optional": optional}}})
}

/// A static pod whose init container writes `vars.env`; `main` runs `script` with
/// `env`, the emptyDir at /cfg and the hostPath `top` read-only at /rro in `rro` mode.
fn pod(name: &str, top: &Path, rro: &str, env: Vec<Value>, script: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "hostnameOverride": "custom-host.example",
            "volumes": [
                {"name": "cfg", "emptyDir": {}},
                {"name": "host", "hostPath": {"path": top, "type": "Directory"}},
            ],
            "initContainers": [{
                "name": "writer", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "printf '# written by init\\nGREETING = hello from init \\nOTHER=x\\n' > /cfg/vars.env"],
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
            }],
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script], "env": env,
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/cfg"},
                    {"name": "host", "mountPath": "/rro", "readOnly": true, "recursiveReadOnly": rro},
                ],
            }],
        },
    })
}

const REPORT: &str = "echo \"host=$(hostname) greeting=[$GREETING] missing=${MISSING-unset}\"; \
    if touch /rro/sub/x 2>/dev/null; then echo sub=rw; else echo sub=ro; fi; \
    if touch /rro/top 2>/dev/null; then echo top=rw; else echo top=ro; fi; sleep 3600";

/// Why `main` waits, once its init container is done (until then it waits with
/// `PodInitializing`, which says nothing of `main` itself).
fn waiting_message(p: &Pod) -> Option<(String, String)> {
    let w = container_status(p, "main")?
        .state
        .as_ref()?
        .waiting
        .as_ref()?;
    let reason = w.reason.clone().filter(|r| r != "PodInitializing")?;
    Some((reason, w.message.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_files_hostname_override_recursive_read_only_and_observed_generation() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("rro");
    let _sub = SubMount::new(&top);
    let (server, ox) = start_with_apiserver(&bed, dir.path()).await;
    let supported = bed
        .default_handler_features()
        .await
        .recursive_read_only_mounts;

    let fields = pod(
        "fields",
        &top,
        "IfPossible",
        vec![
            file_env("GREETING", "GREETING", false),
            file_env("MISSING", "NOPE", true),
        ],
        REPORT,
    );
    let strict = pod("strict", &top, "Enabled", vec![], REPORT);
    let missing = pod(
        "missing",
        &top,
        "Disabled",
        vec![file_env("GREETING", "NOPE", false)],
        REPORT,
    );
    for p in [&fields, &strict, &missing] {
        let name = p["metadata"]["name"].as_str().unwrap();
        write_manifest(&ox.manifests, &format!("{name}.json"), &p.to_string());
    }
    server.put(&api_pod("gen", NODE, "sleep 3600", 1)).unwrap();
    // The env file, the host name, and the mount below the read-only top.
    let running = ox.wait_running("fields", WAIT).await;
    let log = ox.main_log_once(&running, "top=").await;
    assert!(
        log.contains("host=custom-host.example greeting=[hello from init] missing=unset"),
        "{log}"
    );
    assert!(log.contains("top=ro"), "{log}");
    let sub = if supported { "sub=ro" } else { "sub=rw" };
    assert!(
        log.contains(sub),
        "runtime supports rro: {supported}: {log}"
    );
    let mounts = serde_json::to_value(&container(&running, "main").volume_mounts).unwrap();
    let mode = if supported { "Enabled" } else { "Disabled" };
    assert_eq!(
        mounts,
        json!([
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "host", "mountPath": "/rro", "readOnly": true, "recursiveReadOnly": mode},
        ])
    );

    // `Enabled` runs recursively read-only, or is refused in kubelet's words.
    if supported {
        let strict = ox.wait_running("strict", WAIT).await;
        assert!(ox.main_log_once(&strict, "top=").await.contains("sub=ro"));
    } else {
        let (reason, message) = ox
            .wait_for("strict refused", WAIT, |pods| {
                find(pods, "strict").and_then(waiting_message)
            })
            .await;
        assert_eq!(reason, "CreateContainerConfigError");
        assert_eq!(
            message,
            "failed to resolve recursive read-only mode: volume \"host\" requested recursive read-only mode, but it is not supported by the runtime"
        );
    }
    // A key the file lacks fails the container's config, naming key and file.
    let (reason, message) = ox
        .wait_for("missing key refused", WAIT, |pods| {
            find(pods, "missing").and_then(waiting_message)
        })
        .await;
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(
        message.starts_with("environment variable key \"NOPE\" not found in file \"")
            && message.ends_with("/volumes/kubernetes.io~empty-dir/cfg/vars.env\""),
        "{message}"
    );

    // observedGeneration follows the spec: 1 at first, 2 after a spec change.
    let api: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    for generation in [1, 2] {
        if generation == 2 {
            let change = json!({"spec": {"activeDeadlineSeconds": 3600}});
            api.patch("gen", &PatchParams::default(), &Patch::Merge(&change))
                .await
                .unwrap();
        }
        let t = std::time::Instant::now();
        loop {
            let p = api.get("gen").await.unwrap();
            let status = p.status.clone().unwrap_or_default();
            let conditions = status.conditions.clone().unwrap_or_default();
            let observed = status.observed_generation == Some(generation)
                && !conditions.is_empty()
                && conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(generation));
            if p.metadata.generation == Some(generation) && observed {
                break;
            }
            assert!(
                t.elapsed() < WAIT,
                "generation {generation}: {:?}\n{}",
                p.status,
                tail(&ox.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
