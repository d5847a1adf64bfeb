//! Static pods end to end on a real containerd: manifest directory → oxlet → CRI,
//! checked on `/pods` and straight through the CRI.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_running_on_host_and_pod_network() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "host.yaml",
        &pod_yaml("host", "sleep 3600", "  hostNetwork: true\n"),
    );
    write_manifest(
        &ox.manifests,
        "two.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"two","labels":{"app":"two"}},
            "spec":{"terminationGracePeriodSeconds":1,"containers":[
              {"name":"a","image":"localhost/oxlet/busybox:1","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]},
              {"name":"b","image":"localhost/oxlet/busybox:1","imagePullPolicy":"Never","command":["sh","-c","echo $(GREETING) > /tmp/x; sleep 3600"],
               "env":[{"name":"GREETING","value":"hi"}]}]}}"#,
    );
    let host = ox.wait_running("host", START).await;
    let two = ox.wait_running("two", START).await;

    // Static pod defaulting as kubelet does it.
    assert_eq!(host.metadata.namespace.as_deref(), Some("default"));
    let ann = host.metadata.annotations.clone().unwrap();
    assert_eq!(ann["kubernetes.io/config.source"], "file");
    assert_eq!(ann["kubernetes.io/config.hash"], uid(&host));
    assert!(ann.contains_key("kubernetes.io/config.seen"));
    assert_eq!(
        host.spec.as_ref().unwrap().node_name.as_deref(),
        Some("testnode")
    );

    // Status: IPs, conditions, container IDs.
    let hs = host.status.as_ref().unwrap();
    assert_eq!(hs.pod_ip, hs.host_ip, "host-network pod has the host's IP");
    let ts = two.status.as_ref().unwrap();
    let pod_ip = ts.pod_ip.clone().expect("pod-network pod has an IP");
    assert!(
        pod_ip.starts_with("10.234."),
        "IP from the bed's subnet: {pod_ip}"
    );
    for kind in [
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        let c = ts
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap();
        assert_eq!(c.status, "True", "{kind}");
    }
    assert_eq!(ts.qos_class.as_deref(), Some("BestEffort"));

    // The containers really run, with kubelet's labels, as the CRI sees them.
    let cs = cri_containers(&bed, &uid(&two)).await;
    assert_eq!(cs.len(), 2);
    for c in &cs {
        assert_eq!(c.state, RUNNING);
        assert_eq!(c.labels["io.kubernetes.pod.name"], "two-testnode");
        assert_eq!(c.labels["io.kubernetes.pod.namespace"], "default");
        assert!(c.annotations.contains_key("io.kubernetes.container.hash"));
        assert_eq!(c.annotations["io.kubernetes.container.restartCount"], "0");
        let id = &container(&two, &c.labels["io.kubernetes.container.name"]).container_id;
        assert_eq!(
            id.as_deref(),
            Some(format!("containerd://{}", c.id).as_str())
        );
    }
    let sb = cri_sandboxes(&bed, &uid(&two)).await;
    assert_eq!(sb.len(), 1);
    assert_eq!(sb[0].labels["app"], "two", "pod labels reach the sandbox");
    // Logs land in kubelet's layout.
    let log_dir = ox.logs.join(format!("default_two-testnode_{}", uid(&two)));
    assert!(
        log_dir.join("a").join("0.log").exists(),
        "{}",
        log_dir.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_manifest_replaces_pod_and_removed_manifest_cleans_up() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", ""),
    );
    let v1 = ox.wait_running("web", START).await;
    let old_uid = uid(&v1);

    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "echo v2; sleep 3600", ""),
    );
    let v2 = ox
        .wait_for("the edited pod running", START, |pods| {
            find(pods, "web")
                .filter(|p| uid(p) != old_uid && is_running(p))
                .cloned()
        })
        .await;
    assert_eq!(ox.pods().await.len(), 1, "old pod is gone from /pods");
    assert!(
        cri_sandboxes(&bed, &old_uid).await.is_empty(),
        "old sandbox removed"
    );
    assert!(
        cri_containers(&bed, &old_uid).await.is_empty(),
        "old containers removed"
    );
    assert_eq!(cri_containers(&bed, &uid(&v2)).await[0].state, RUNNING);

    std::fs::remove_file(ox.manifests.join("web.yaml")).unwrap();
    ox.wait_for("pod gone", START, |pods| pods.is_empty().then_some(()))
        .await;
    let t = std::time::Instant::now();
    while !cri_sandboxes(&bed, &uid(&v2)).await.is_empty() {
        assert!(t.elapsed() < START, "sandbox still there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cri_containers(&bed, &uid(&v2)).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_skipped_and_named() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "bad-yaml.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n",
    );
    write_manifest(
        &ox.manifests,
        "not-a-pod.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n",
    );
    write_manifest(
        &ox.manifests,
        "no-containers.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: empty\nspec:\n  containers: []\n",
    );
    std::fs::write(
        ox.manifests.join("junk.bin"),
        [0u8, 159, 146, 150, 255, 0, 1, 2],
    )
    .unwrap();
    write_manifest(
        &ox.manifests,
        "good.yaml",
        &pod_yaml("good", "sleep 3600", ""),
    );
    ox.wait_running("good", START).await;
    assert_eq!(ox.pods().await.len(), 1);
    let log = ox.log();
    for f in [
        "bad-yaml.yaml",
        "not-a-pod.yaml",
        "no-containers.yaml",
        "junk.bin",
    ] {
        assert!(log.contains(f), "log names {f}:\n{}", tail(&log, 40));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_decide_phases_and_reasons() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let cases = [
        ("never-ok", "Never", "exit 0"),
        ("never-fail", "Never", "exit 3"),
        ("onfailure-ok", "OnFailure", "exit 0"),
        ("onfailure-fail", "OnFailure", "exit 2"),
        ("always-ok", "Always", "exit 0"),
    ];
    for (name, policy, cmd) in cases {
        let extra = format!("  restartPolicy: {policy}\n");
        write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &pod_yaml(name, cmd, &extra),
        );
    }
    let term = |p: &k8s_openapi::api::core::v1::Pod| {
        let c = container(p, "main");
        c.state.as_ref().and_then(|s| s.terminated.clone())
    };
    for (name, phase_want, reason, exit) in [
        ("never-ok", "Succeeded", "Completed", 0),
        ("never-fail", "Failed", "Error", 3),
        ("onfailure-ok", "Succeeded", "Completed", 0),
    ] {
        let p = ox
            .wait_for(&format!("{name} {phase_want}"), START, |pods| {
                find(pods, name).filter(|p| phase(p) == phase_want).cloned()
            })
            .await;
        let t = term(&p).unwrap_or_else(|| panic!("{name} terminated state"));
        assert_eq!(t.exit_code, exit, "{name}");
        assert_eq!(t.reason.as_deref(), Some(reason), "{name}");
        assert_eq!(
            container(&p, "main").restart_count,
            0,
            "{name} never restarted"
        );
    }
    // Failing OnFailure and any Always container restart.
    for name in ["onfailure-fail", "always-ok"] {
        let p = ox
            .wait_for(&format!("{name} restarted"), START, |pods| {
                find(pods, name)
                    .filter(|p| container_status(p, "main").is_some_and(|c| c.restart_count >= 1))
                    .cloned()
            })
            .await;
        assert_eq!(phase(&p), "Running", "{name}");
    }
    // The terminal pods' sandboxes are stopped.
    for p in ox.pods().await {
        if matches!(phase(&p), "Succeeded" | "Failed") {
            let t = std::time::Instant::now();
            loop {
                let sb = cri_sandboxes(&bed, &uid(&p)).await;
                if sb
                    .iter()
                    .all(|s| s.state != k8s_cri::v1::PodSandboxState::SandboxReady as i32)
                {
                    break;
                }
                assert!(t.elapsed() < START, "sandbox of a finished pod still ready");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_looping_container_backs_off() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "crash.yaml",
        &pod_yaml("crash", "exit 1", ""),
    );
    let started = std::time::Instant::now();
    let p = ox
        .wait_for("CrashLoopBackOff", START, |pods| {
            find(pods, "crash")
                .filter(|p| {
                    main_waiting(p).is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                })
                .cloned()
        })
        .await;
    let c = container(&p, "main");
    let last = c
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .unwrap();
    assert_eq!(last.exit_code, 1);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    let msg = c
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(
        msg.starts_with("back-off 10s restarting failed container=main"),
        "{msg}"
    );
    // Over ~25 s a hot loop would restart dozens of times; back-off allows 0s, 10s, (20s later).
    tokio::time::sleep(Duration::from_secs(25).saturating_sub(started.elapsed())).await;
    let p = ox
        .wait_for("crash pod", START, |pods| find(pods, "crash").cloned())
        .await;
    let restarts = container(&p, "main").restart_count;
    assert!(
        (1..=3).contains(&restarts),
        "restartCount after 25s: {restarts}"
    );
    // Old dead instances are pruned: at most the running/last one and one before it.
    assert!(cri_containers(&bed, &uid(&p)).await.len() <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_and_volumes_run_in_order() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let host_dir = bed.base_dir().join("hostdata");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vols
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    emptyDir: {{}}
  - name: host
    hostPath:
      path: {host}
      type: DirectoryOrCreate
  initContainers:
  - name: prepare
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo from-init > /work/ready"]
    volumeMounts:
    - name: scratch
      mountPath: /work
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "cat /work/ready > /host/out; sleep 3600"]
    volumeMounts:
    - name: scratch
      mountPath: /work
    - name: host
      mountPath: /host
"#,
        host = host_dir.display()
    );
    write_manifest(&ox.manifests, "vols.yaml", &manifest);
    let p = ox.wait_running("vols", START).await;
    let init = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .map(|v| v[0].clone())
        .expect("init container status");
    let t = init
        .state
        .and_then(|s| s.terminated)
        .expect("init terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    let out = host_dir.join("out");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !out.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "from-init");
    let empty_dir = ox.root.join("pods").join(uid(&p));
    assert!(empty_dir.exists());
    std::fs::remove_file(ox.manifests.join("vols.yaml")).unwrap();
    ox.wait_for("pod gone", START, |pods| pods.is_empty().then_some(()))
        .await;
    let deadline = std::time::Instant::now() + START;
    while empty_dir.exists() {
        assert!(std::time::Instant::now() < deadline, "pod dir not removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_pods_rejects_the_extra_pod() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--max-pods=1"]);
    write_manifest(&ox.manifests, "a.yaml", &pod_yaml("a", "sleep 3600", ""));
    ox.wait_running("a", START).await;
    write_manifest(&ox.manifests, "b.yaml", &pod_yaml("b", "sleep 3600", ""));
    let b = ox
        .wait_for("b rejected", START, |pods| {
            find(pods, "b").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    let s = b.status.as_ref().unwrap();
    assert_eq!(s.reason.as_deref(), Some("OutOfpods"));
    assert!(
        s.message
            .as_deref()
            .unwrap()
            .starts_with("Pod was rejected:")
    );
    assert!(
        cri_sandboxes(&bed, &uid(&b)).await.is_empty(),
        "a rejected pod never starts"
    );
}
