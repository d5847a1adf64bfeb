//! Security contexts on a real containerd: what a container's processes are (`id`,
//! `/proc/1/status`), what they may do (read-only root, capabilities, seccomp), the
//! runAsNonRoot check against the image's user, Localhost seccomp profiles kept inside
//! `<root-dir>/seccomp`, fsGroup on emptyDir volumes, and `runtimeClassName` as the
//! runtime handler.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(30);

/// A one-container busybox pod that sleeps; `pod_extra` goes into the pod's spec
/// (two spaces deep), `container_extra` into the container (four spaces deep).
fn sleeper(name: &str, pod_extra: &str, container_extra: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
{pod_extra}  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
{container_extra}"#
    )
}

/// Runs `cmd` in the pod's `main` container: (exit code, stdout + stderr).
async fn exec(bed: &Testbed, pod: &Pod, cmd: &[&str]) -> (i32, String) {
    let id = container(pod, "main").container_id.clone().unwrap();
    let id = id.split_once("://").map_or(id.as_str(), |(_, i)| i);
    let mut c = bed.cri().await;
    let r = c
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(ToString::to_string).collect(),
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let out = String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr);
    (r.exit_code, out)
}

/// One field of the container's `/proc/1/status`.
async fn status_field(bed: &Testbed, pod: &Pod, field: &str) -> String {
    proc_status_field(bed, pod, "1", field).await
}

/// One field of `/proc/<pid>/status` as the container sees it (`self`: the exec'd
/// process, which runs with the container's security context).
async fn proc_status_field(bed: &Testbed, pod: &Pod, pid: &str, field: &str) -> String {
    let path = format!("/proc/{pid}/status");
    let (code, text) = exec(bed, pod, &["cat", &path]).await;
    assert_eq!(code, 0, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {text}"))
        .trim()
        .to_string()
}

fn has_cap(cap_eff: &str, bit: u32) -> bool {
    u64::from_str_radix(cap_eff, 16).unwrap() & (1 << bit) != 0
}

const CAP_CHOWN: u32 = 0;
const CAP_KILL: u32 = 5;
const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;

/// The waiting (reason, message) of the pod's `main` container once it has one.
async fn waiting(ox: &Oxlet, name: &str) -> (String, String) {
    ox.wait_for(
        &format!("{name} waiting with a config error"),
        START,
        |pods| {
            let p = find(pods, name)?;
            let w = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .state
                .as_ref()?
                .waiting
                .clone()?;
            let reason = w.reason.unwrap_or_default();
            (reason != "ContainerCreating").then(|| (reason, w.message.unwrap_or_default()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_groups_read_only_root_capabilities_and_no_new_privs_reach_the_container() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let ids = sleeper(
        "ids",
        "  securityContext:\n    runAsUser: 1234\n    runAsGroup: 5678\n    supplementalGroups: [9000]\n    fsGroup: 7000\n    seccompProfile: {type: RuntimeDefault}\n  volumes:\n  - name: data\n    emptyDir: {}\n",
        "    securityContext:\n      readOnlyRootFilesystem: true\n      allowPrivilegeEscalation: false\n    volumeMounts:\n    - {name: data, mountPath: /data}\n",
    );
    let caps = sleeper(
        "caps",
        "",
        "    securityContext:\n      allowPrivilegeEscalation: true\n      seccompProfile: {type: Unconfined}\n      capabilities: {add: [NET_ADMIN], drop: [NET_RAW, CHOWN]}\n",
    );
    let shared = sleeper("shared", "  shareProcessNamespace: true\n", "");
    let host = sleeper(
        "host",
        "  hostPID: true\n",
        "    securityContext: {privileged: true}\n",
    );
    write_manifest(&ox.manifests, "ids.yaml", &ids);
    write_manifest(&ox.manifests, "caps.yaml", &caps);
    write_manifest(&ox.manifests, "shared.yaml", &shared);
    write_manifest(&ox.manifests, "host.yaml", &host);
    let ids = ox.wait_running("ids", START).await;
    let caps = ox.wait_running("caps", START).await;
    let shared = ox.wait_running("shared", START).await;
    let host = ox.wait_running("host", START).await;

    // shareProcessNamespace: the sandbox's process is PID 1 and the container sees it
    // beside itself; its own namespace (caps) holds only the container's process.
    let sleeps = |out: &str| out.lines().filter(|l| l.contains("sleep")).count();
    let (_, out) = exec(&bed, &shared, &["ps"]).await;
    assert_eq!(sleeps(&out), 2, "{out}");
    let (_, out) = exec(&bed, &caps, &["ps"]).await;
    assert_eq!(sleeps(&out), 1, "{out}");
    // hostPID: the node's PID 1; privileged: every capability, no seccomp filter.
    let (_, out) = exec(&bed, &host, &["cat", "/proc/1/cmdline"]).await;
    let node_init = std::fs::read_to_string("/proc/1/cmdline").unwrap();
    assert_eq!(out, node_init);
    let last_cap: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cap_eff = status_field(&bed, &host, "CapEff").await;
    assert!((0..=last_cap).all(|b| has_cap(&cap_eff, b)), "{cap_eff}");
    assert_eq!(status_field(&bed, &host, "Seccomp").await, "0");
    // Without seccompDefault, no profile asked for is Unconfined; the sandbox's
    // process (PID 1 of a shared namespace) always runs RuntimeDefault, as kubelet asks.
    assert_eq!(
        proc_status_field(&bed, &shared, "self", "Seccomp").await,
        "0"
    );
    assert_eq!(status_field(&bed, &shared, "Seccomp").await, "2");

    // runAsUser, runAsGroup, then fsGroup and supplementalGroups as extra groups.
    let (code, id) = exec(&bed, &ids, &["id"]).await;
    assert_eq!(code, 0, "{id}");
    assert!(id.starts_with("uid=1234 gid=5678"), "{id}");
    let groups = id.split("groups=").nth(1).unwrap_or("");
    for g in ["7000", "9000"] {
        assert!(groups.contains(g), "group {g} missing: {id}");
    }
    // The root filesystem refuses writes; the fsGroup-owned emptyDir takes them.
    let (code, out) = exec(&bed, &ids, &["touch", "/x"]).await;
    assert_ne!(code, 0, "wrote to a read-only root: {out}");
    assert!(out.contains("Read-only file system"), "{out}");
    let (code, out) = exec(
        &bed,
        &ids,
        &["sh", "-c", "touch /data/f && stat -c '%g %A' /data /data/f"],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "7000 drwxrwsrwx", "{out}");
    assert!(
        lines[1].starts_with("7000 "),
        "setgid dir gives new files its group: {out}"
    );
    // allowPrivilegeEscalation: false is no_new_privs; RuntimeDefault is seccomp filter mode.
    assert_eq!(status_field(&bed, &ids, "NoNewPrivs").await, "1");
    assert_eq!(status_field(&bed, &ids, "Seccomp").await, "2");

    // Root container: dropped capabilities are gone, added ones present, the runtime's
    // other defaults (e.g. KILL) kept; Unconfined and escalation allowed.
    let cap_eff = status_field(&bed, &caps, "CapEff").await;
    assert!(!has_cap(&cap_eff, CAP_NET_RAW), "NET_RAW in {cap_eff}");
    assert!(!has_cap(&cap_eff, CAP_CHOWN), "CHOWN in {cap_eff}");
    assert!(
        has_cap(&cap_eff, CAP_NET_ADMIN),
        "no NET_ADMIN in {cap_eff}"
    );
    assert!(has_cap(&cap_eff, CAP_KILL), "no KILL in {cap_eff}");
    assert_eq!(status_field(&bed, &caps, "Seccomp").await, "0");
    assert_eq!(status_field(&bed, &caps, "NoNewPrivs").await, "0");
    let (code, out) = exec(&bed, &caps, &["chown", "1:1", "/tmp"]).await;
    assert_ne!(code, 0, "chown worked without CAP_CHOWN: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_seccomp_profiles_and_runtime_handlers_as_kubelet() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--seccomp-default"]);
    // A Localhost profile that refuses mkdir, where kubelet looks for it.
    let seccomp_dir = ox.root.join("seccomp/profiles");
    std::fs::create_dir_all(&seccomp_dir).unwrap();
    std::fs::write(
        seccomp_dir.join("no-mkdir.json"),
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    // A profile outside the seccomp dir must never be used, even if it exists.
    std::fs::write(
        ox.root.join("outside.json"),
        r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
    )
    .unwrap();

    let manifests = [
        (
            "nonroot",
            sleeper(
                "nonroot",
                "  securityContext:\n    runAsNonRoot: true\n",
                "",
            ),
        ),
        ("defaulted", sleeper("defaulted", "", "")),
        (
            "local",
            sleeper(
                "local",
                "",
                "    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: profiles/no-mkdir.json}\n",
            ),
        ),
        (
            "escape",
            sleeper(
                "escape",
                "",
                "    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: ../outside.json}\n",
            ),
        ),
        (
            "unnamed",
            sleeper(
                "unnamed",
                "  securityContext:\n    seccompProfile: {type: Localhost}\n",
                "",
            ),
        ),
        (
            "apparmor",
            sleeper(
                "apparmor",
                "  securityContext:\n    appArmorProfile: {type: RuntimeDefault}\n",
                "",
            ),
        ),
        ("runc", sleeper("runc", "  runtimeClassName: runc\n", "")),
        (
            "nosuch",
            sleeper("nosuch", "  runtimeClassName: nosuch\n", ""),
        ),
    ];
    for (name, text) in &manifests {
        write_manifest(&ox.manifests, &format!("{name}.yaml"), text);
    }

    // runAsNonRoot with the busybox image (no user: root), in kubelet's words.
    let (reason, message) = waiting(&ox, "nonroot").await;
    let pods = ox.pods().await;
    let p = find(&pods, "nonroot").unwrap();
    assert_eq!(reason, "CreateContainerConfigError");
    assert_eq!(
        message,
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot-testnode_default({})\", container: main)",
            uid(p)
        )
    );

    // seccompDefault: no profile asked for is RuntimeDefault.
    let defaulted = ox.wait_running("defaulted", START).await;
    assert_eq!(status_field(&bed, &defaulted, "Seccomp").await, "2");
    let (code, _) = exec(&bed, &defaulted, &["mkdir", "/tmp/d"]).await;
    assert_eq!(code, 0);

    // The Localhost profile is the one in <root-dir>/seccomp: mkdir is refused.
    let local = ox.wait_running("local", START).await;
    assert_eq!(status_field(&bed, &local, "Seccomp").await, "2");
    let (code, out) = exec(&bed, &local, &["mkdir", "/tmp/d"]).await;
    assert_ne!(code, 0, "mkdir allowed under the no-mkdir profile: {out}");

    // Outside the seccomp dir, or unnamed: a config error naming the field, never unconfined.
    let (reason, message) = waiting(&ox, "escape").await;
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(
        message.starts_with(
            "securityContext.seccompProfile: localhostProfile \"../outside.json\" must stay inside"
        ),
        "{message}"
    );
    let (reason, message) = waiting(&ox, "unnamed").await;
    assert_eq!(reason, "CreateContainerConfigError");
    assert_eq!(
        message,
        "spec.securityContext.seccompProfile: localhostProfile must be set if seccompProfile type is Localhost."
    );
    for name in ["nonroot", "escape", "unnamed"] {
        let pods = ox.pods().await;
        let p = find(&pods, name).unwrap();
        assert!(
            cri_containers(&bed, &uid(p)).await.is_empty(),
            "{name}: a container was created"
        );
    }

    // AppArmor asked for on a host without it is refused by the runtime, never run
    // unconfined (kubelet blocks the pod at soft admission instead).
    if !std::path::Path::new("/sys/kernel/security/apparmor").exists() {
        let (reason, message) = waiting(&ox, "apparmor").await;
        assert_eq!(reason, "CreateContainerError", "{message}");
        assert!(message.contains("apparmor is not supported"), "{message}");
    }

    // runtimeClassName is the handler: the configured runc runs the pod, an unknown
    // one fails RunPodSandbox with the runtime's message and the pod waits.
    ox.wait_running("runc", START).await;
    let t = std::time::Instant::now();
    let log = loop {
        let log = ox.log();
        if log.contains("FailedCreatePodSandBox") && log.contains("nosuch") {
            break log;
        }
        assert!(
            t.elapsed() < START,
            "no FailedCreatePodSandBox:\n{}",
            tail(&log, 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let line = log
        .lines()
        .find(|l| l.contains("FailedCreatePodSandBox") && l.contains("nosuch"))
        .unwrap();
    assert!(
        line.contains(r#"no runtime for \"nosuch\" is configured"#)
            || line.contains(r#"no runtime for "nosuch" is configured"#),
        "{line}"
    );
    let pods = ox.pods().await;
    let p = find(&pods, "nosuch").unwrap();
    assert_eq!(phase(p), "Pending");
    assert!(cri_sandboxes(&bed, &uid(p)).await.is_empty());
}
