//! Hooks and termination against real containerd: postStart and preStop effects in a
//! hostPath, a failing postStart (PostStartHookError, restarts), the grace period of a
//! container that ignores SIGTERM, termination messages from the file and from the
//! log, and activeDeadlineSeconds.

mod agent;
mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);
const IMAGE: &str = "localhost/oxlet/busybox:1";

/// Waits until the pod's CRI containers are all not running (or gone).
async fn wait_stopped(bed: &Testbed, uid: &str, timeout: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let cs = cri_containers(bed, uid).await;
        if cs.iter().all(|c| c.state != RUNNING) {
            return t.elapsed();
        }
        assert!(t.elapsed() < timeout, "containers of {uid} still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_start_and_pre_stop_leave_their_files() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let out = bed.base_dir().join("hook-out");
    std::fs::create_dir_all(&out).unwrap();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hooks
spec:
  terminationGracePeriodSeconds: 5
  volumes:
  - name: out
    hostPath:
      path: {out}
      type: Directory
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
    volumeMounts:
    - name: out
      mountPath: /out
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo started > /out/post"]
      preStop:
        exec:
          command: ["sh", "-c", "echo stopping > /out/pre"]
"#,
        out = out.display()
    );
    write_manifest(&ox.manifests, "hooks.yaml", &manifest);
    let p = ox.wait_running("hooks", START).await;
    // postStart ran before the container was reported as started.
    assert_eq!(
        std::fs::read_to_string(out.join("post")).unwrap_or_default(),
        "started\n",
        "{}",
        tail(&ox.log(), 40)
    );
    assert!(!out.join("pre").exists());
    std::fs::remove_file(ox.manifests.join("hooks.yaml")).unwrap();
    wait_stopped(&bed, &uid(&p), START).await;
    assert_eq!(
        std::fs::read_to_string(out.join("pre")).unwrap_or_default(),
        "stopping\n",
        "{}",
        tail(&ox.log(), 40)
    );
    assert!(ox.log().contains("running preStop hook"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_post_start_kills_and_restarts_the_container() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: badhook
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo nope; exit 3"]
"#
    );
    write_manifest(&ox.manifests, "badhook.yaml", &manifest);
    let seen: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let restarts = ox
        .wait_for("a restart after PostStartHookError", START, |pods| {
            let p = find(pods, "badhook")?;
            let c = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
            if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                seen.lock().unwrap().push((
                    w.reason.clone().unwrap_or_default(),
                    w.message.clone().unwrap_or_default(),
                ));
            }
            let saw = seen
                .lock()
                .unwrap()
                .iter()
                .any(|(r, _)| r == "PostStartHookError");
            (c.restart_count >= 1 && saw).then_some(c.restart_count)
        })
        .await;
    assert!(restarts >= 1);
    let seen = seen.into_inner().unwrap();
    let (_, msg) = seen
        .iter()
        .find(|(r, _)| r == "PostStartHookError")
        .unwrap();
    assert!(
        msg.starts_with("Exec lifecycle hook ([sh -c echo nope; exit 3]) for Container \"main\" in Pod \"badhook-testnode_default(")
            && msg.contains("exited with 3")
            && msg.contains("message: \"nope\\n\""),
        "{msg}"
    );
    let log = ox.log();
    assert!(log.contains("FailedPostStartHook"), "{}", tail(&log, 40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_ignoring_sigterm_is_killed_after_its_grace_period() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: stubborn
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]
"#
    );
    write_manifest(&ox.manifests, "stubborn.yaml", &manifest);
    let p = ox.wait_running("stubborn", START).await;
    let removed = Instant::now();
    std::fs::remove_file(ox.manifests.join("stubborn.yaml")).unwrap();
    wait_stopped(&bed, &uid(&p), START).await;
    let took = removed.elapsed();
    assert!(
        took >= Duration::from_millis(2900),
        "killed before its grace period: {took:?}"
    );
    assert!(
        took < Duration::from_secs(8),
        "grace period not respected: {took:?}\n{}",
        tail(&ox.log(), 30)
    );
    assert!(
        ox.log().contains("gracePeriod=3"),
        "{}",
        tail(&ox.log(), 30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_messages_come_from_the_file_and_from_the_logs() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: msgs
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: file
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "printf 'all done' > /dev/termination-log; echo not-this; exit 0"]
  - name: custom
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    terminationMessagePath: /tmp/why
    command: ["sh", "-c", "printf 'custom path' > /tmp/why; exit 1"]
  - name: logs
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo first >&2; echo oops-from-log >&2; exit 2"]
"#
    );
    write_manifest(&ox.manifests, "msgs.yaml", &manifest);
    let p = ox
        .wait_for("msgs Failed", START, |pods| {
            find(pods, "msgs").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    let term = |name: &str| {
        container(&p, name)
            .state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .unwrap_or_else(|| panic!("{name} not terminated"))
    };
    let file = term("file");
    assert_eq!(
        (file.exit_code, file.message.as_deref()),
        (0, Some("all done"))
    );
    let custom = term("custom");
    assert_eq!(
        (custom.exit_code, custom.message.as_deref()),
        (1, Some("custom path"))
    );
    // Both lines go to stderr: stdout and stderr reach the CRI log through separate
    // pipes, so lines of the two streams can be recorded in either order.
    let logs = term("logs");
    assert_eq!(logs.exit_code, 2);
    assert_eq!(logs.message.as_deref(), Some("first\noops-from-log\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_the_pod_and_stops_its_containers() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "late.yaml",
        &pod_yaml("late", "sleep 3600", "  activeDeadlineSeconds: 2\n"),
    );
    let started = Instant::now();
    let p = ox
        .wait_for("late Failed", START, |pods| {
            find(pods, "late").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    assert!(started.elapsed() >= Duration::from_secs(2));
    let st = p.status.as_ref().unwrap();
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    wait_stopped(&bed, &uid(&p), START).await;
    let log = ox.log();
    assert!(
        log.contains("pod passed its active deadline"),
        "{}",
        tail(&log, 30)
    );
    // It stays Failed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = ox.pods().await;
    let again = find(&again, "late").unwrap();
    assert_eq!(phase(again), "Failed");
    assert_eq!(
        again.status.as_ref().unwrap().reason.as_deref(),
        Some("DeadlineExceeded")
    );
}

/// kubelet puts no timeout on postStart, but a kill (here: the manifest removed)
/// cancels the sync that runs it, so a hook that never returns cannot keep the pod
/// alive past its grace period; another pod starts meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_post_start_does_not_block_the_pods_termination() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: hang
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {IMAGE}
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
    lifecycle:
      postStart:
        exec:
          command: ["sleep", "3600"]
"#
    );
    write_manifest(&ox.manifests, "hang.yaml", &manifest);
    let u = ox
        .wait_for("hang's postStart running", START, |pods| {
            let p = find(pods, "hang")?;
            ox.log()
                .lines()
                .any(|l| l.contains("running postStart hook") && l.contains("hang-testnode"))
                .then(|| uid(p))
        })
        .await;
    write_manifest(
        &ox.manifests,
        "other.yaml",
        &pod_yaml("other", "sleep 3600", ""),
    );
    ox.wait_running("other", START).await;
    let removed = Instant::now();
    std::fs::remove_file(ox.manifests.join("hang.yaml")).unwrap();
    wait_stopped(&bed, &u, Duration::from_secs(15)).await;
    assert!(
        removed.elapsed() < Duration::from_secs(10),
        "{:?}",
        removed.elapsed()
    );
    ox.wait_for("hang gone", START, |pods| {
        find(pods, "hang").is_none().then_some(())
    })
    .await;
}
