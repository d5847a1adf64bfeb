//! Status and runtime semantics as kubelet's, end to end on a real containerd:
//! a manifest rewritten with its defaults spelled out is the same pod (same UID, no
//! restart), and a Failed pod reports kubelet's conditions and init-container flags.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);

/// The same pod as `pod_yaml("plain", "sleep 3600", "")`, with the defaults it leaves
/// out spelled out (API defaults, and the zero values of plain fields).
const PLAIN_EXPLICIT: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: plain
spec:
  terminationGracePeriodSeconds: 1
  hostNetwork: false
  hostPID: false
  hostIPC: false
  restartPolicy: Always
  dnsPolicy: ClusterFirst
  schedulerName: default-scheduler
  enableServiceLinks: true
  securityContext: {}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    stdin: false
    tty: false
    command: ["sh", "-c", "sleep 3600"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spelled_out_defaults_neither_change_the_uid_nor_restart() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "plain.yaml",
        &pod_yaml("plain", "sleep 3600", ""),
    );
    let before = ox.wait_running("plain", START).await;
    let main = container(&before, "main").clone();
    assert_eq!(main.restart_count, 0);

    write_manifest(&ox.manifests, "plain.yaml", PLAIN_EXPLICIT);
    // oxlet has seen the rewrite once the merger reported the (same-UID) pod again.
    let t = Instant::now();
    let seen = |log: &str| {
        log.lines()
            .filter(|l| l.contains("pod update from config") && l.contains("plain-testnode"))
            .count()
    };
    while seen(&ox.log()) < 2 {
        assert!(
            t.elapsed() < START,
            "rewrite not seen:\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give the pod's worker time to act on it (it would kill and restart at once).
    tokio::time::sleep(Duration::from_secs(3)).await;

    let pods = ox.pods().await;
    assert_eq!(pods.len(), 1, "one pod, not a replacement");
    let after = find(&pods, "plain").expect("pod still there");
    assert_eq!(uid(after), uid(&before), "UID unchanged");
    assert!(is_running(after));
    let now = container(after, "main");
    assert_eq!(now.container_id, main.container_id, "same container");
    assert_eq!(now.restart_count, 0);
    let cs = cri_containers(&bed, &uid(after)).await;
    assert_eq!(cs.len(), 1, "no second container was created");
    assert_eq!(cs[0].state, RUNNING);
    assert_eq!(
        cs[0].annotations["io.kubernetes.container.restartCount"],
        "0"
    );
    assert_eq!(cri_sandboxes(&bed, &uid(after)).await.len(), 1);
    assert!(
        !ox.log().contains("killing"),
        "nothing was killed:\n{}",
        tail(&ox.log(), 40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_pod_reports_kubelet_conditions_and_init_ready() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "fails.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: fails
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  initContainers:
  - name: setup
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exit 0"]
  containers:
  - name: zeta
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exit 3"]
  - name: alpha
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "exit 0"]
"#,
    );
    let pod = ox
        .wait_for("fails Failed", START, |pods| {
            find(pods, "fails")
                .filter(|p| phase(p) == "Failed")
                .cloned()
        })
        .await;
    let s = pod.status.as_ref().unwrap();
    let cond = |kind: &str| {
        let c = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap_or_else(|| panic!("no {kind}"));
        (c.status.clone(), c.reason.clone())
    };
    let failed = ("False".to_string(), Some("PodFailed".to_string()));
    assert_eq!(cond("Ready"), failed);
    assert_eq!(cond("ContainersReady"), failed);
    assert_eq!(cond("Initialized"), ("True".to_string(), None));
    assert_eq!(cond("PodScheduled").0, "True");

    let inits = s.init_container_statuses.as_ref().unwrap();
    assert_eq!(inits.len(), 1);
    assert!(inits[0].ready, "a completed init container is ready");
    let t = inits[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));

    let cs = s.container_statuses.as_ref().unwrap();
    let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["alpha", "zeta"], "sorted by name");
    let exit = |i: usize| {
        cs[i]
            .state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code
    };
    assert_eq!((exit(0), exit(1)), (0, 3));
    for c in cs {
        assert!(!c.ready);
        // The image as containerd reports it (its repo tag for a local image).
        assert_eq!(c.image, "localhost/oxlet/busybox:1");
        assert!(c.image_id.starts_with("sha256:"), "{}", c.image_id);
    }
    assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    assert!(s.start_time.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_pod_keeps_qos_class_and_start_time() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--max-pods=1"]);
    write_manifest(&ox.manifests, "a.yaml", &pod_yaml("a", "sleep 3600", ""));
    ox.wait_running("a", START).await;
    let burstable = pod_yaml("b", "sleep 3600", "").replace(
        "    imagePullPolicy: IfNotPresent\n",
        "    imagePullPolicy: IfNotPresent\n    resources:\n      requests:\n        cpu: 10m\n",
    );
    write_manifest(&ox.manifests, "b.yaml", &burstable);
    let b = ox
        .wait_for("b rejected", START, |pods| {
            find(pods, "b").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    let s = b.status.as_ref().unwrap();
    assert_eq!(s.reason.as_deref(), Some("OutOfpods"));
    assert_eq!(
        s.message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"
        )
    );
    assert_eq!(s.qos_class.as_deref(), Some("Burstable"));
    assert!(s.start_time.is_some(), "a rejected pod has a start time");
}
