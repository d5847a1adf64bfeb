//! What a container sees of its pod on a real containerd: downward API env values (every
//! field kind, resourceFieldRef with and without a limit and a divisor), a downwardAPI
//! volume and its update when an annotation changes (a static pod edited with the same
//! UID), a Memory emptyDir as a sized tmpfs, a readOnly mount refusing writes, and
//! nothing of the pod directory left after removal.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(30);
const UID: &str = "4a1b2c3d-0000-4000-8000-00000000d0a1";

fn manifest(annotation: &str, ro_dir: &std::path::Path) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: dw
  namespace: team
  uid: {UID}
  labels:
    app: web
  annotations:
    note: "{annotation}"
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: info
    downwardAPI:
      defaultMode: 384 # 0600
      items:
      - path: annotations
        fieldRef: {{fieldPath: metadata.annotations}}
      - path: sub/name
        fieldRef: {{fieldPath: metadata.name}}
      - path: cpu
        mode: 416 # 0640
        resourceFieldRef: {{containerName: main, resource: limits.cpu, divisor: 1m}}
  - name: mem
    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}
  - name: mem-node
    emptyDir: {{medium: Memory}}
  - name: ro
    hostPath: {{path: "{ro}", type: Directory}}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
    resources:
      requests: {{cpu: 100m, memory: 20Mi}}
      limits: {{cpu: 250m}}
    env:
    - {{name: NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: NS, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: APP, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app']"}}}}}}
    - {{name: NOTE, valueFrom: {{fieldRef: {{fieldPath: "metadata.annotations['note']"}}}}}}
    - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: POD_IPS, valueFrom: {{fieldRef: {{fieldPath: status.podIPs}}}}}}
    - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
    - {{name: HOST_IPS, valueFrom: {{fieldRef: {{fieldPath: status.hostIPs}}}}}}
    - {{name: CPU_LIMIT_M, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}}}
    - {{name: CPU_LIMIT, valueFrom: {{resourceFieldRef: {{resource: limits.cpu}}}}}}
    - {{name: CPU_REQ, valueFrom: {{resourceFieldRef: {{resource: requests.cpu}}}}}}
    - {{name: MEM_REQ_MI, valueFrom: {{resourceFieldRef: {{resource: requests.memory, divisor: 1Mi}}}}}}
    - {{name: MEM_LIMIT, valueFrom: {{resourceFieldRef: {{resource: limits.memory}}}}}}
    - {{name: MEM_LIMIT_MI, valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: 1Mi}}}}}}
    volumeMounts:
    - {{name: info, mountPath: /etc/info}}
    - {{name: mem, mountPath: /mem}}
    - {{name: mem-node, mountPath: /mem-node}}
    - {{name: ro, mountPath: /ro, readOnly: true}}
"#,
        ro = ro_dir.display()
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

async fn exec(bed: &Testbed, id: &str, cmd: &str) -> (i32, String) {
    let r = exec_sync_sh(bed, id, cmd).await;
    let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
    out.push_str(&String::from_utf8_lossy(&r.stderr));
    (r.exit_code, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downward_api_memory_empty_dir_and_read_only_mounts() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let ro = bed.base_dir().join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    write_manifest(&ox.manifests, "dw.yaml", &manifest("first", &ro));
    // Bidirectional propagation in an unprivileged container: its config error only.
    let bidi = pod_yaml(
        "bidi",
        "sleep 3600",
        "  volumes:\n  - name: d\n    emptyDir: {}\n",
    ) + "    volumeMounts:\n    - {name: d, mountPath: /d, mountPropagation: Bidirectional}\n";
    write_manifest(&ox.manifests, "bidi.yaml", &bidi);
    let pod = ox.wait_running("dw", START).await;
    assert_eq!(uid(&pod), UID, "the manifest's UID is kept");
    let id = cri_containers(&bed, UID)
        .await
        .into_iter()
        .find(|c| c.state == cri::ContainerState::ContainerRunning as i32)
        .expect("running container")
        .id;

    let (reason, message) = ox
        .wait_for("bidi CreateContainerConfigError", START, |pods| {
            waiting(find(pods, "bidi")?, "main").filter(|(r, _)| r == "CreateContainerConfigError")
        })
        .await;
    assert_eq!(reason, "CreateContainerConfigError");
    assert!(
        message
            .contains("Bidirectional mount propagation is available only to privileged containers"),
        "{message}"
    );

    // Env: every field kind.
    let (_, env) = exec(&bed, &id, "env").await;
    let get = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} missing in\n{env}"))
            .to_string()
    };
    assert_eq!(get("NAME"), "dw-testnode");
    assert_eq!(get("NS"), "team");
    assert_eq!(get("UID"), UID);
    assert_eq!(get("APP"), "web");
    assert_eq!(get("NOTE"), "first");
    assert_eq!(get("NODE"), "testnode");
    let pod_ip = get("POD_IP");
    assert!(pod_ip.parse::<std::net::IpAddr>().is_ok(), "{pod_ip}");
    assert_eq!(get("POD_IPS"), pod_ip);
    let (_, ip_inside) = exec(&bed, &id, "ip -o -4 addr show eth0 || ifconfig eth0").await;
    assert!(ip_inside.contains(&pod_ip), "{ip_inside}");
    let host_ip = get("HOST_IP");
    assert!(host_ip.parse::<std::net::IpAddr>().is_ok(), "{host_ip}");
    assert_eq!(get("HOST_IPS"), host_ip);
    assert_eq!(get("CPU_LIMIT_M"), "250");
    assert_eq!(get("CPU_LIMIT"), "1", "250m rounds up to one core");
    assert_eq!(get("CPU_REQ"), "1");
    assert_eq!(get("MEM_REQ_MI"), "20");
    // No memory limit: node allocatable (capacity less the 100Mi hard eviction default).
    let mem: i64 = get("MEM_LIMIT_MI").parse().unwrap();
    let total = (meminfo("MemTotal:") >> 20) as i64;
    assert!(
        (total - 101..=total - 99).contains(&mem),
        "{mem} Mi vs MemTotal {total} Mi"
    );

    // downwardAPI volume: the files, their modes, the ..data layout.
    let (code, files) = exec(
        &bed,
        &id,
        "grep ^note= /etc/info/annotations; grep -c config.source /etc/info/annotations; cat /etc/info/sub/name; echo; cat /etc/info/cpu; echo; \
         stat -c %a /etc/info/..data/annotations /etc/info/..data/cpu; readlink /etc/info/annotations",
    )
    .await;
    assert_eq!(code, 0, "{files}");
    assert_eq!(
        files,
        "note=\"first\"\n1\ndw-testnode\n250\n600\n640\n..data/annotations\n"
    );
    let (code, out) = exec(&bed, &id, "echo x > /etc/info/annotations").await;
    assert_ne!(code, 0, "downwardAPI volumes are read-only: {out}");

    // Memory emptyDir: a tmpfs of sizeLimit.
    let (_, mounts) = exec(&bed, &id, "grep ' /mem ' /proc/mounts").await;
    assert!(mounts.starts_with("tmpfs /mem tmpfs "), "{mounts}");
    assert!(mounts.contains("size=16384k"), "{mounts}");
    // Without sizeLimit or a pod memory limit: node allocatable (kubelet's
    // calculateEmptyDirMemorySize), in pages as the kernel shows it.
    let alloc: i64 = get("MEM_LIMIT").parse().unwrap();
    assert_eq!((alloc + (1 << 20) - 1) >> 20, mem, "bytes and Mi agree");
    let (_, mounts) = exec(&bed, &id, "grep ' /mem-node ' /proc/mounts").await;
    let want = format!("size={}k", (alloc + 4095) / 4096 * 4);
    assert!(mounts.starts_with("tmpfs /mem-node tmpfs "), "{mounts}");
    assert!(mounts.contains(&want), "{mounts} (want {want})");
    // readOnly: writes refused.
    let (code, out) = exec(&bed, &id, "touch /ro/x").await;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(!ro.join("x").exists());

    // A changed annotation, same UID: the volume follows, the container stays.
    write_manifest(&ox.manifests, "dw.yaml", &manifest("second", &ro));
    let t = Instant::now();
    loop {
        let (_, a) = exec(&bed, &id, "grep ^note= /etc/info/annotations").await;
        if a == "note=\"second\"\n" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "annotation not updated: {a}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pod_dir = ox.root.join("pods").join(UID);
    let versions: Vec<_> =
        std::fs::read_dir(pod_dir.join("volumes/kubernetes.io~downward-api/info"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..") && n != "..data")
            .collect();
    assert_eq!(versions.len(), 1, "old versions removed: {versions:?}");
    let still = cri_containers(&bed, UID).await;
    assert!(
        still
            .iter()
            .any(|c| c.id == id && c.state == cri::ContainerState::ContainerRunning as i32)
    );

    // Removal: nothing of the pod dir is left, no mount leaked.
    std::fs::remove_file(ox.manifests.join("dw.yaml")).unwrap();
    let t = Instant::now();
    while pod_dir.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "pod dir left: {}\n{}",
            pod_dir.display(),
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(pod_dir.to_str().unwrap()), "mount leaked");
}
