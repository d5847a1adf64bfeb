//! Path safety end to end on a real containerd: pod input that tries to escape its
//! directories (a subPath symlink pointing out of its volume, a UID naming another place)
//! is refused, nothing outside is touched, and removing a pod never deletes through the
//! subPath bind mounts oxlet made.

mod agent;
mod common;

use std::path::Path;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(30);

/// A pod with one volume and a main container mounting `sub_path` of it at /x.
fn sub_path_pod(name: &str, volume: &str, sub_path: &str, init: &str, command: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
{volume}{init}  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{command}"]
    volumeMounts:
    - name: data
      mountPath: /x
      subPath: {sub_path}
"#
    )
}

fn host_volume(path: &Path, type_: &str) -> String {
    format!(
        "    hostPath:\n      path: {}\n      type: {type_}\n",
        path.display()
    )
}

/// The waiting (reason, message) of container `name`, once it has one.
fn waiting(p: &Pod, name: &str) -> Option<(String, String)> {
    let s = p.status.as_ref()?.container_statuses.as_ref()?;
    let w = s
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?;
    Some((w.reason.clone()?, w.message.clone().unwrap_or_default()))
}

async fn wait_config_error(ox: &Oxlet, pod: &str) -> (Pod, String) {
    ox.wait_for(
        &format!("{pod} CreateContainerConfigError"),
        START,
        |pods| {
            let p = find(pods, pod)?;
            match waiting(p, "main")? {
                (r, m) if r == "CreateContainerConfigError" => Some((p.clone(), m)),
                _ => None,
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_path_symlinks_out_of_a_volume_never_reach_a_container() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let victim = bed.base_dir().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), b"precious").unwrap();

    // hostPath volume holding a symlink out of it, planted before the pod starts.
    let host_vol = bed.base_dir().join("hostvol");
    std::fs::create_dir_all(host_vol.join("inner")).unwrap();
    std::os::unix::fs::symlink(&victim, host_vol.join("escape")).unwrap();
    write_manifest(
        &ox.manifests,
        "hp.yaml",
        &sub_path_pod(
            "hp",
            &host_volume(&host_vol, "Directory"),
            "escape",
            "",
            "touch /x/pwned; sleep 3600",
        ),
    );
    // emptyDir: the pod itself plants the link (init container), then mounts it.
    let init = format!(
        r#"  initContainers:
  - name: plant
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["ln", "-s", "{}", "/d/escape"]
    volumeMounts:
    - name: data
      mountPath: /d
"#,
        victim.display()
    );
    write_manifest(
        &ox.manifests,
        "ed.yaml",
        &sub_path_pod(
            "ed",
            "    emptyDir: {}\n",
            "escape",
            &init,
            "touch /x/pwned; sleep 3600",
        ),
    );
    // A good subPath in the same hostPath volume works, and one pod's error stops no other.
    write_manifest(
        &ox.manifests,
        "good.yaml",
        &sub_path_pod(
            "good",
            &host_volume(&host_vol, "Directory"),
            "inner",
            "",
            "echo ok > /x/ok; sleep 3600",
        ),
    );
    // A hostPath type check that fails is a per-pod error too.
    write_manifest(
        &ox.manifests,
        "typed.yaml",
        &sub_path_pod(
            "typed",
            &host_volume(&victim.join("keep"), "Directory"),
            "a",
            "",
            "sleep 3600",
        ),
    );

    let good = ox.wait_running("good", START).await;
    for pod in ["hp", "ed"] {
        let (p, msg) = wait_config_error(&ox, pod).await;
        assert!(
            msg.contains("volume \"data\"") && msg.contains("subPath \"escape\""),
            "{pod}: message names volume and subPath: {msg}"
        );
        // The container was never created in the runtime.
        let names: Vec<String> = cri_containers(&bed, &uid(&p))
            .await
            .into_iter()
            .filter_map(|c| c.metadata.map(|m| m.name))
            .collect();
        assert!(!names.contains(&"main".to_string()), "{pod}: {names:?}");
    }
    let (_, msg) = wait_config_error(&ox, "typed").await;
    assert!(
        msg.contains("hostPath type check failed") && msg.contains("is not a directory"),
        "{msg}"
    );

    let ok = host_vol.join("inner/ok");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ok.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&ok).unwrap().trim(), "ok");
    let pods_dir = ox.root.join("pods");
    let subpath_mount = pods_dir
        .join(uid(&good))
        .join("volume-subpaths/data/main/0");
    assert!(
        subpath_mount.join("ok").exists(),
        "bound under volume-subpaths"
    );
    assert!(!victim.join("pwned").exists(), "nothing written outside");

    // Removing the pods detaches the subPath mounts and never deletes through them.
    for f in ["hp.yaml", "ed.yaml", "good.yaml", "typed.yaml"] {
        std::fs::remove_file(ox.manifests.join(f)).unwrap();
    }
    ox.wait_for("pods gone", START, |pods| pods.is_empty().then_some(()))
        .await;
    let deadline = std::time::Instant::now() + START;
    while pods_dir.join(uid(&good)).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "pod dir not removed\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(pods_dir.to_str().unwrap()),
        "no mount left below {}",
        pods_dir.display()
    );
    assert_eq!(std::fs::read_to_string(&ok).unwrap().trim(), "ok");
    assert_eq!(std::fs::read(victim.join("keep")).unwrap(), b"precious");
    assert!(!victim.join("pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_uids_are_manifest_errors_and_touch_nothing() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    // Where `<root>/pods/../../x` would land, and an absolute victim.
    let climbed = ox.root.join("pods/../../x");
    let absolute = bed.base_dir().join("victim");
    for dir in [&climbed, &absolute] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("keep"), b"precious").unwrap();
    }
    let with_uid = |name: &str, uid: &str| {
        with_metadata(&pod_yaml(name, "sleep 3600", ""), &format!("uid: {uid:?}"))
    };
    write_manifest(&ox.manifests, "climb.yaml", &with_uid("climb", "../../x"));
    write_manifest(
        &ox.manifests,
        "abs.yaml",
        &with_uid("abs", absolute.to_str().unwrap()),
    );
    write_manifest(&ox.manifests, "good.yaml", &with_uid("good", "good-uid"));
    let good = ox.wait_running("good", START).await;
    assert_eq!(uid(&good), "good-uid");
    assert_eq!(ox.pods().await.len(), 1, "only the good pod is admitted");
    let log = ox.log();
    for f in ["climb.yaml", "abs.yaml"] {
        assert!(
            log.lines()
                .any(|l| l.contains(f) && l.contains("metadata.uid")),
            "log names {f} and metadata.uid:\n{}",
            tail(&log, 40)
        );
    }
    // Removing the good pod removes its own directory, and nothing else.
    std::fs::remove_file(ox.manifests.join("good.yaml")).unwrap();
    ox.wait_for("pod gone", START, |pods| pods.is_empty().then_some(()))
        .await;
    for dir in [&climbed, &absolute] {
        assert_eq!(std::fs::read(dir.join("keep")).unwrap(), b"precious");
    }
}
