//! Init containers and sidecars (restartable init containers) on real containerd:
//! order of starts and stops proven by what the containers wrote, the pod's phase and
//! conditions, and what the runtime holds.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

const START: Duration = Duration::from_secs(30);

/// A container spec line block: `name`, the shared busybox image, `sh -c script`,
/// the volume mounted at /data, and extra lines (e.g. `restartPolicy: Always`).
fn ctr(name: &str, script: &str, extra: &str) -> String {
    format!(
        r#"  - name: {name}
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", {script:?}]
    volumeMounts:
    - name: data
      mountPath: /data
{extra}"#
    )
}

/// A pod with the given init containers and app containers, restart policy and the
/// `data` volume (`volume` is its source lines).
fn pod(name: &str, policy: &str, inits: &[String], apps: &[String], volume: &str) -> String {
    format!(
        r"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {policy}
  terminationGracePeriodSeconds: 5
  hostNetwork: true
  volumes:
  - name: data
{volume}  initContainers:
{}  containers:
{}",
        inits.concat(),
        apps.concat()
    )
}

/// Appends `<word> <name>` to /data/log (the line order is the order of events).
fn note(word: &str, name: &str) -> String {
    format!("echo {word} {name} >> /data/log")
}

/// Runs forever; on SIGTERM notes its stop and exits 0.
fn serve(name: &str) -> String {
    format!(
        "trap '{}; exit 0' TERM; {}; while true; do sleep 0.1; done",
        note("stop", name),
        note("start", name)
    )
}

const SIDECAR: &str = "    restartPolicy: Always\n";

fn host_dir(bed: &Testbed, name: &str) -> PathBuf {
    let dir = bed.base_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn host_path(dir: &Path) -> String {
    format!(
        "    hostPath:\n      path: {}\n      type: Directory\n",
        dir.display()
    )
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The file's lines once it has at least `n` (or what it has after 20 s).
async fn wait_lines(file: &Path, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while lines(file).len() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lines(file)
}

fn init_status<'a>(p: &'a Pod, name: &str) -> &'a ContainerStatus {
    p.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
        .unwrap_or_else(|| panic!("no init status for {name}"))
}

fn condition<'a>(p: &'a Pod, kind: &str) -> &'a str {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .map_or("", |c| c.status.as_str())
}

/// Names of the pod's containers in CRI (by the container name label), any state.
async fn cri_names(bed: &Testbed, uid: &str) -> Vec<String> {
    cri_containers(bed, uid)
        .await
        .into_iter()
        .filter_map(|c| c.metadata.map(|m| m.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_one_after_another_before_the_app() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    // Each init container takes a moment, so overlapping runs would interleave.
    let step = |n: &str| {
        ctr(
            n,
            &format!("{}; sleep 0.3; {}", note("start", n), note("end", n)),
            "",
        )
    };
    let manifest = pod(
        "inits",
        "Always",
        &[step("i1"), step("i2")],
        &[ctr("main", &serve("main"), "")],
        "    emptyDir: {}\n",
    );
    write_manifest(&ox.manifests, "inits.yaml", &manifest);
    let p = ox.wait_running("inits", START).await;
    let log = ox
        .root
        .join("pods")
        .join(uid(&p))
        .join("volumes/kubernetes.io~empty-dir/data/log");
    assert_eq!(
        wait_lines(&log, 5).await,
        ["start i1", "end i1", "start i2", "end i2", "start main"]
    );
    for name in ["i1", "i2"] {
        let s = init_status(&p, name);
        let t = s.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert!(s.ready && s.restart_count == 0, "{s:?}");
    }
    assert_eq!(condition(&p, "Initialized"), "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_init_container_under_never_fails_the_pod_and_no_app_is_created() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = pod(
        "badinit",
        "Never",
        &[ctr("setup", "exit 3", "")],
        &[ctr("main", &serve("main"), "")],
        "    emptyDir: {}\n",
    );
    write_manifest(&ox.manifests, "badinit.yaml", &manifest);
    let p = ox
        .wait_for("badinit Failed", START, |pods| {
            find(pods, "badinit")
                .filter(|p| phase(p) == "Failed")
                .cloned()
        })
        .await;
    let setup = init_status(&p, "setup");
    let t = setup.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    assert_eq!(setup.restart_count, 0);
    assert_eq!(condition(&p, "Initialized"), "False");
    let main = container(&p, "main");
    let reason = main.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(reason.reason.as_deref(), Some("PodInitializing"));
    // Give a wrong restart a chance to happen, then look in the runtime.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names = cri_names(&bed, &uid(&p)).await;
    assert!(!names.contains(&"main".to_string()), "{names:?}");
    assert!(names.len() <= 1, "setup ran once at most: {names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_start_in_order_and_stop_after_the_app_in_reverse_order() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let dir = host_dir(&bed, "sidecar-order");
    let manifest = pod(
        "mesh",
        "Always",
        &[
            ctr("s1", &serve("s1"), SIDECAR),
            ctr("s2", &serve("s2"), SIDECAR),
            ctr("setup", &note("run", "setup"), ""),
        ],
        &[ctr("main", &serve("main"), "")],
        &host_path(&dir),
    );
    write_manifest(&ox.manifests, "mesh.yaml", &manifest);
    let p = ox.wait_running("mesh", START).await;
    for name in ["s1", "s2"] {
        let s = init_status(&p, name);
        assert!(s.state.as_ref().unwrap().running.is_some(), "{s:?}");
        assert_eq!((s.started, s.ready, s.restart_count), (Some(true), true, 0));
    }
    assert_eq!(condition(&p, "Initialized"), "True");
    assert_eq!(condition(&p, "ContainersReady"), "True");
    assert_eq!(condition(&p, "Ready"), "True");
    let log = dir.join("log");
    assert_eq!(
        wait_lines(&log, 4).await,
        ["start s1", "start s2", "run setup", "start main"]
    );

    std::fs::remove_file(ox.manifests.join("mesh.yaml")).unwrap();
    assert_eq!(
        wait_lines(&log, 7).await[4..],
        ["stop main", "stop s2", "stop s1"],
        "{}",
        tail(&ox.log(), 40)
    );
    assert!(
        ox.log()
            .contains("sidecar stops after the containers it serves"),
        "the ordering is logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_sidecar_succeeds_when_its_app_exits_0_under_on_failure() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let dir = host_dir(&bed, "sidecar-job");
    let manifest = pod(
        "job",
        "OnFailure",
        &[ctr("proxy", &serve("proxy"), SIDECAR)],
        &[ctr(
            "work",
            &format!("{}; sleep 1", note("done", "work")),
            "",
        )],
        &host_path(&dir),
    );
    write_manifest(&ox.manifests, "job.yaml", &manifest);
    let p = ox
        .wait_for("job Succeeded", START, |pods| {
            find(pods, "job")
                .filter(|p| phase(p) == "Succeeded")
                .cloned()
        })
        .await;
    let work = container(&p, "work");
    let t = work.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    // The sidecar was stopped, not restarted: it noted one start and one stop.
    let proxy = init_status(&p, "proxy");
    assert!(
        proxy.state.as_ref().unwrap().terminated.is_some(),
        "{proxy:?}"
    );
    assert_eq!(proxy.restart_count, 0);
    assert_eq!(
        wait_lines(&dir.join("log"), 3).await,
        ["start proxy", "done work", "stop proxy"]
    );
    let running = cri_containers(&bed, &uid(&p))
        .await
        .into_iter()
        .filter(|c| c.state == RUNNING)
        .count();
    assert_eq!(running, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_sidecar_is_restarted_with_back_off_while_the_app_keeps_running() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = pod(
        "flaky",
        "Never",
        &[ctr("side", "sleep 1; exit 1", SIDECAR)],
        &[ctr("main", &serve("main"), "")],
        "    emptyDir: {}\n",
    );
    write_manifest(&ox.manifests, "flaky.yaml", &manifest);
    let p = ox.wait_running("flaky", START).await;
    let main_id = container(&p, "main").container_id.clone();
    // First exit: restarted at once. Second: CrashLoopBackOff for 10 s.
    let p = ox
        .wait_for("sidecar in CrashLoopBackOff", START, |pods| {
            find(pods, "flaky")
                .filter(|p| {
                    init_status(p, "side")
                        .state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
                })
                .cloned()
        })
        .await;
    let side = init_status(&p, "side");
    assert_eq!(side.restart_count, 1);
    let msg = side.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert!(
        msg.message
            .as_deref()
            .is_some_and(|m| m.starts_with("back-off 10s restarting failed container=side")),
        "{msg:?}"
    );
    let last = side
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.exit_code, 1);
    assert!(!side.ready);
    // The app never noticed, and the pod runs on (restartPolicy Never is the app's).
    assert_eq!(phase(&p), "Running");
    let main = container(&p, "main");
    assert_eq!((&main.container_id, main.restart_count), (&main_id, 0));
    assert!(main.state.as_ref().unwrap().running.is_some());
    assert_eq!(condition(&p, "ContainersReady"), "False");
}

/// A sidecar whose liveness probe fails is killed (with the probe's grace, not the
/// pod's 30 s) and started again, as kubelet's computeInitContainerActions does; the
/// app container beside it keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_failing_its_liveness_probe_is_restarted_beside_its_app() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: sideliv
spec:
  terminationGracePeriodSeconds: 30
  initContainers:
  - name: side
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    restartPolicy: Always
    command: ["sh", "-c", "touch /tmp/up; sleep 2; rm /tmp/up; sleep 3600"]
    livenessProbe:
      exec:
        command: ["test", "-f", "/tmp/up"]
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
"#;
    write_manifest(&ox.manifests, "sideliv.yaml", manifest);
    let p = ox
        .wait_for("the sidecar restarted", Duration::from_secs(20), |pods| {
            let p = find(pods, "sideliv")?;
            let st = p.status.as_ref()?;
            let side = st.init_container_statuses.as_ref()?.first()?;
            (side.restart_count >= 1).then(|| p.clone())
        })
        .await;
    let st = p.status.as_ref().unwrap();
    let side = &st.init_container_statuses.as_ref().unwrap()[0];
    let last = side
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("lastState.terminated");
    assert_eq!(last.exit_code, 137, "killed after the probe's 1 s grace");
    let main = container(&p, "main");
    assert_eq!(main.restart_count, 0);
    assert!(main.state.as_ref().unwrap().running.is_some(), "{main:?}");
    assert!(
        ox.log()
            .contains("Init container side failed liveness probe"),
        "{}",
        tail(&ox.log(), 40)
    );
}
