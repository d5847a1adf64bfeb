//! configMap, secret and projected volumes and env from the apiserver, on a real
//! containerd with the real oxlet binary and the in-repo test apiserver: a pod shaped as
//! a real cluster schedules it (the injected `kube-api-access-*` volume) runs with the
//! right files, modes, `..data` layout and env; a configMap change reaches the volume;
//! a missing configMap holds the container in `CreateContainerConfigError` until it is
//! created; the secret volume is a tmpfs that goes with the pod.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use serde_json::json;
use testapi::TestApiServer;

const START: Duration = Duration::from_secs(30);
const NODE: &str = "testnode";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn object<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// What the controllers put in every namespace: the `default` service account and the
/// `kube-root-ca.crt` ConfigMap.
fn namespace_objects(api: &TestApiServer) {
    api.put::<ServiceAccount>(&object(json!({
        "metadata": {"name": "default", "namespace": "default"},
    })))
    .unwrap();
    api.put::<ConfigMap>(&object(json!({
        "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\ntest-ca\n-----END CERTIFICATE-----\n"},
    })))
    .unwrap();
}

fn config_map(name: &str, data: serde_json::Value) -> ConfigMap {
    object(json!({"metadata": {"name": name, "namespace": "default"}, "data": data}))
}

/// A pod as the apiserver stores it after the ServiceAccount admission plugin: the
/// `kube-api-access-*` projected volume mounted at the service account directory.
fn cluster_pod(name: &str) -> Pod {
    object(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "serviceAccountName": "default",
            "volumes": [
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}},
                {"name": "cfg", "configMap": {"name": "app-config", "defaultMode": 0o640,
                    "items": [{"key": "app.conf", "path": "conf/app.conf", "mode": 0o400}, {"key": "color", "path": "color"}]}},
                {"name": "creds", "secret": {"secretName": "app-secret"}},
                {"name": "maybe", "configMap": {"name": "absent", "optional": true}},
            ],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "envFrom": [
                    {"prefix": "CM_", "configMapRef": {"name": "app-config"}},
                    {"secretRef": {"name": "app-secret"}},
                    {"configMapRef": {"name": "absent", "optional": true}},
                ],
                "env": [
                    {"name": "CM_color", "value": "overridden"},
                    {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "color"}}},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}},
                    {"name": "OPTIONAL", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": true}}},
                ],
                "volumeMounts": [
                    {"name": "kube-api-access-x7k2p", "mountPath": SA_DIR, "readOnly": true},
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                    {"name": "maybe", "mountPath": "/etc/maybe"},
                ],
            }],
        },
    }))
}

async fn main_container(bed: &Testbed, uid: &str) -> String {
    let cs = cri_containers(bed, uid).await;
    let c = cs
        .iter()
        .find(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        .expect("a running container");
    c.id.clone()
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

/// Polls until `check` holds, or fails with `what` and the oxlet log.
async fn eventually<T>(ox: &Oxlet, what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    ox.eventually(what, START, check).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_pod_gets_its_files_and_env_and_config_map_changes() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    namespace_objects(&api);
    api.put(&config_map(
        "app-config",
        json!({"app.conf": "level=1\n", "color": "blue", "bad key": "x"}),
    ))
    .unwrap();
    api.put::<Secret>(&object(json!({
        "metadata": {"name": "app-secret", "namespace": "default"},
        "data": {"password": "czNjcjN0", "USER": "YWRtaW4="},
    })))
    .unwrap();
    let ox = start(&bed, &api);
    let stored = api.put(&cluster_pod("app")).unwrap();
    let pod = ox.wait_api_running("app", START).await;
    let uid = uid(&pod);
    assert_eq!(Some(uid.clone()), stored.metadata.uid);
    let id = main_container(&bed, &uid).await;

    // The injected projected volume: a token bound to this pod, the CA, the namespace.
    let token = exec_sh(&bed, &id, &format!("cat {SA_DIR}/token")).await;
    assert!(token.starts_with("testapi-default-default-"), "{token}");
    let ca = exec_sh(&bed, &id, &format!("cat {SA_DIR}/ca.crt")).await;
    assert!(ca.contains("test-ca"), "{ca}");
    assert_eq!(
        exec_sh(&bed, &id, &format!("cat {SA_DIR}/namespace")).await,
        "default"
    );
    let modes = exec_sh(
        &bed,
        &id,
        &format!("stat -L -c '%n %a' {SA_DIR}/token {SA_DIR}/ca.crt /etc/cfg/conf/app.conf /etc/cfg/color /etc/creds/password"),
    )
    .await;
    assert_eq!(
        modes,
        format!(
            "{SA_DIR}/token 644\n{SA_DIR}/ca.crt 644\n/etc/cfg/conf/app.conf 400\n/etc/cfg/color 640\n/etc/creds/password 644\n"
        )
    );
    // kubelet's atomic-writer layout: user paths link into ..data, a timestamped dir.
    let layout = exec_sh(
        &bed,
        &id,
        "for l in conf color ..data; do readlink /etc/cfg/$l; done; ls -A /etc/cfg | grep -c '^\\.\\.[0-9]'",
    )
    .await;
    let lines: Vec<&str> = layout.lines().collect();
    assert_eq!(lines[..2], ["..data/conf", "..data/color"], "{layout}");
    assert!(lines[2].starts_with("..20"), "{layout}");
    assert_eq!(lines[3], "1", "{layout}");
    assert_eq!(
        exec_sh(&bed, &id, "cat /etc/cfg/conf/app.conf").await,
        "level=1\n"
    );
    assert_eq!(
        exec_sh(&bed, &id, "cat /etc/creds/password /etc/creds/USER").await,
        "s3cr3tadmin"
    );
    // The optional, missing configMap is an empty volume.
    assert_eq!(
        exec_sh(&bed, &id, "ls /etc/maybe | wc -l").await.trim(),
        "0"
    );
    // The API volumes are read-only for the container.
    assert!(
        exec_sh(&bed, &id, "touch /etc/cfg/x 2>&1 || echo refused")
            .await
            .contains("refused")
    );

    // No other local user reads a Secret or a token (kubelet's 0750 data dirs), and the
    // secret tmpfs is not world-writable. The test's own directories are opened to
    // others first, so only oxlet's stand in the way.
    assert_no_local_reader(&ox, &uid);

    // env: envFrom with its prefix, env overriding it, key refs; invalid names skipped.
    let env = exec_sh(&bed, &id, "tr '\\0' '\\n' < /proc/1/environ | sort").await;
    let env: Vec<&str> = env.lines().collect();
    for want in [
        "CM_app.conf=level=1\n",
        "CM_color=overridden",
        "FROM_CM=blue",
        "FROM_SECRET=s3cr3t",
        "USER=admin",
        "password=s3cr3t",
    ] {
        let first = want.lines().next().unwrap();
        assert!(env.contains(&first), "{first} missing from {env:?}");
    }
    assert!(!env.iter().any(|l| l.starts_with("CM_bad key")), "{env:?}");
    assert!(!env.iter().any(|l| l.starts_with("OPTIONAL=")), "{env:?}");

    // The token request was bound to the pod: one TokenRequest, answered 201.
    let requests = api.requests();
    assert!(requests.iter().any(|r| r.method == "POST"
        && r.path == "/api/v1/namespaces/default/serviceaccounts/default/token"
        && r.status == 201));

    // (b) A changed ConfigMap reaches the mounted volume within seconds.
    let changed = Instant::now();
    api.put(&config_map(
        "app-config",
        json!({"app.conf": "level=2\n", "color": "green"}),
    ))
    .unwrap();
    eventually(&ox, "the configMap change in the volume", async || {
        (exec_sh(&bed, &id, "cat /etc/cfg/conf/app.conf /etc/cfg/color").await == "level=2\ngreen")
            .then_some(())
    })
    .await;
    let took = changed.elapsed();
    eprintln!("configMap change reached the volume after {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Still one timestamped dir: the old one was removed.
    let dirs = exec_sh(&bed, &id, "ls -A /etc/cfg | grep -c '^\\.\\.[0-9]'").await;
    assert_eq!(dirs.trim(), "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_config_map_waits_then_runs_and_secret_tmpfs_goes_with_the_pod() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    namespace_objects(&api);
    api.put::<Secret>(&object(json!({
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"k": "dg=="},
    })))
    .unwrap();
    let ox = start(&bed, &api);
    let pod: Pod = object(json!({
        "metadata": {"name": "waiter", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "sec", "secret": {"secretName": "s"}}],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "env": [{"name": "LATER", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "k"}}}],
                "volumeMounts": [{"name": "sec", "mountPath": "/etc/sec"}],
            }],
        },
    }));
    let stored = api.put(&pod).unwrap();
    let pod_uid = stored.metadata.uid.clone().unwrap();
    // (c) The status the apiserver holds says why, in kubelet's words.
    let waiting = eventually(
        &ox,
        "CreateContainerConfigError in the apiserver",
        async || {
            let p: Pod = api.get("default", "waiter").ok()??;
            let s = p.status?.container_statuses?.into_iter().next()?;
            let w = s.state?.waiting?;
            (w.reason.as_deref() == Some("CreateContainerConfigError")).then_some(w)
        },
    )
    .await;
    assert_eq!(
        waiting.message.as_deref(),
        Some("configmaps \"later\" not found")
    );
    api.put(&config_map("later", json!({"k": "now"}))).unwrap();
    let running = ox.wait_api_running("waiter", START).await;
    assert_eq!(uid(&running), pod_uid);
    let id = main_container(&bed, &pod_uid).await;
    let env = exec_sh(&bed, &id, "tr '\\0' '\\n' < /proc/1/environ").await;
    assert!(env.lines().any(|l| l == "LATER=now"), "{env}");

    // (d) The secret volume is a tmpfs, on the host and in the container.
    let vol = ox
        .root
        .join("pods")
        .join(&pod_uid)
        .join("volumes/kubernetes.io~secret/sec");
    let host_mounts = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(vol.to_str().unwrap()))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let on_host = host_mounts();
    assert_eq!(on_host.len(), 1, "{on_host:?}");
    assert!(on_host[0].contains(" - tmpfs "), "{on_host:?}");
    let inside = exec_sh(&bed, &id, "grep ' /etc/sec ' /proc/self/mountinfo").await;
    assert!(inside.contains(" - tmpfs "), "{inside}");
    assert_eq!(exec_sh(&bed, &id, "cat /etc/sec/k").await, "v");
    // A changed Secret reaches the container through the same tmpfs (not a new one
    // stacked over the one the container holds).
    api.put::<Secret>(&object(json!({
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"k": "djI="},
    })))
    .unwrap();
    eventually(&ox, "the secret change in the volume", async || {
        (exec_sh(&bed, &id, "cat /etc/sec/k").await == "v2").then_some(())
    })
    .await;
    assert_eq!(host_mounts().len(), 1);

    // Deleted: the pod goes, its tmpfs is unmounted and its directory removed.
    api.remove::<Pod>("default", "waiter").unwrap();
    eventually(&ox, "the secret tmpfs unmounted", async || {
        (host_mounts().is_empty() && !vol.exists()).then_some(())
    })
    .await;
}

/// kubelet waits for a pod's volumes before its sandbox: a configMap volume whose
/// ConfigMap is missing leaves the pod ContainerCreating with no IP and a Warning
/// `FailedMount` event in the apiserver; once the ConfigMap exists the pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_config_map_volume_holds_the_sandbox_until_created() {
    use k8s_openapi::api::core::v1::Event;
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    namespace_objects(&api);
    let ox = start(&bed, &api);
    let pod: Pod = object(json!({
        "metadata": {"name": "mounter", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "v", "configMap": {"name": "x"}}],
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/v"}],
            }],
        },
    }));
    let stored = api.put(&pod).unwrap();
    let pod_uid = stored.metadata.uid.clone().unwrap();
    let event = eventually(&ox, "FailedMount event", async || {
        let events = api.list::<Event>(Some("default")).ok()?;
        events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedMount"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(r#"MountVolume.SetUp failed for volume "v" : configmap "x" not found"#)
    );
    assert_eq!(event.involved_object.uid.as_deref(), Some(pod_uid.as_str()));
    let p: Pod = api.get("default", "mounter").unwrap().unwrap();
    let status = p.status.unwrap_or_default();
    assert_eq!(status.pod_ip, None, "no sandbox, no IP");
    if let Some(cs) = status.container_statuses.as_ref().and_then(|c| c.first()) {
        let reason = cs
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone());
        assert_eq!(reason.as_deref(), Some("ContainerCreating"));
    }
    let sandboxes = (bed.cri().await)
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .unwrap()
        .into_inner()
        .items;
    let ours = |s: &cri::PodSandbox| s.metadata.as_ref().is_some_and(|m| m.uid == pod_uid);
    assert!(!sandboxes.iter().any(ours), "a sandbox was made");

    api.put(&config_map("x", json!({"k": "v"}))).unwrap();
    let running = ox.wait_api_running("mounter", START).await;
    assert_eq!(uid(&running), pod_uid);
}

/// Checks the modes of the data dirs and that user `nobody` reaches no pod file.
fn assert_no_local_reader(ox: &Oxlet, uid: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    for dir in ox.root.ancestors().skip(1) {
        if dir == std::path::Path::new("/tmp") || dir.parent().is_none() {
            break;
        }
        let m = mode(dir);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(m | 0o011)).unwrap();
    }
    let pods = ox.root.join("pods");
    let pod_dir = pods.join(uid);
    for dir in [&pods, &pod_dir, &pod_dir.join("volumes")] {
        assert_eq!(mode(dir), 0o750, "{}", dir.display());
    }
    let secret = pod_dir.join("volumes/kubernetes.io~secret/creds");
    assert_eq!(mode(&secret) & 0o002, 0, "{:o}", mode(&secret));
    let nobody = |cmd: &str| {
        std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                cmd,
            ])
            .output()
            .unwrap()
    };
    // The control: nobody can reach the root dir's parent.
    let parent = ox.root.parent().unwrap().display().to_string();
    assert!(nobody(&format!("ls {parent}")).status.success());
    let token = pod_dir.join("volumes/kubernetes.io~projected");
    for target in [
        secret.join("password").display().to_string(),
        format!("{}/*/token", token.display()),
    ] {
        let out = nobody(&format!("cat {target}"));
        assert!(!out.status.success(), "nobody read {target}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{target}: {err}");
    }
}
