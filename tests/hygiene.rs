//! Nothing leaks, on a real containerd: dead sandboxes give back their IP and are
//! garbage-collected, crash loops keep one dead instance and its log, a removed pod
//! leaves no directory behind, and orphaned pod directories are swept at start.

mod agent;
mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;

const START: Duration = Duration::from_secs(30);

/// Polls `check` every 200 ms until it returns Some, or fails with `what` and the log.
async fn eventually<T, F, Fut>(ox: &Oxlet, what: &str, timeout: Duration, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let t = Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(state) if t.elapsed() > timeout => panic!(
                "timed out after {timeout:?} waiting for {what}; last state: {state}\n--- oxlet log (tail) ---\n{}",
                tail(&ox.log(), 80)
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The pid of a sandbox's pause process, from the verbose `PodSandboxStatus` info.
async fn sandbox_pid(bed: &Testbed, id: &str) -> i32 {
    let resp = bed
        .cri()
        .await
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.to_string(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value =
        serde_json::from_str(&resp.info["info"]).expect("verbose sandbox info is JSON");
    let pid = info["pid"].as_i64().expect("sandbox info has a pid");
    assert!(pid > 1, "sandbox pid {pid}");
    pid as i32
}

/// The addresses host-local IPAM holds (one file per allocated IP) in the bed's network.
fn allocated_ips(bed: &Testbed) -> Vec<IpAddr> {
    let dir = bed.layout().cni_data_dir.join("oxlet");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The file names in a directory, sorted (empty when it does not exist).
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn pod_log_dir(ox: &Oxlet, name: &str, uid: &str) -> PathBuf {
    ox.logs.join(format!("default_{name}-testnode_{uid}"))
}

const EXITED: i32 = cri::ContainerState::ContainerExited as i32;
const READY: i32 = cri::PodSandboxState::SandboxReady as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_pause_process_leaves_one_dead_sandbox_and_one_ip() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "net.yaml",
        &pod_yaml("net", "sleep 3600", ""),
    );
    let pod = ox.wait_running("net", START).await;
    let uid = uid(&pod);

    let mut last_sandbox = String::new();
    for round in 1..=3 {
        let sandboxes = cri_sandboxes(&bed, &uid).await;
        let ready: Vec<_> = sandboxes.iter().filter(|s| s.state == READY).collect();
        assert_eq!(ready.len(), 1, "round {round}: one ready sandbox");
        let id = ready[0].id.clone();
        assert_ne!(id, last_sandbox, "round {round}: a new sandbox");
        let pid = sandbox_pid(&bed, &id).await;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        last_sandbox = id.clone();
        // oxlet notices, stops the pod, and starts it again in a new sandbox.
        eventually(
            &ox,
            &format!("round {round}: pod running in a new sandbox"),
            START,
            || async {
                let sbs = cri_sandboxes(&bed, &uid).await;
                let fresh = sbs.iter().any(|s| s.state == READY && s.id != id);
                let running = ox
                    .pods()
                    .await
                    .iter()
                    .any(|p| agent::uid(p) == uid && is_running(p));
                (fresh && running)
                    .then_some(())
                    .ok_or(format!("{} sandboxes, running {running}", sbs.len()))
            },
        )
        .await;
    }

    let pod_ip: IpAddr = eventually(&ox, "the pod's IP in its status", START, || async {
        let pods = ox.pods().await;
        let p = find(&pods, "net")
            .filter(|p| is_running(p))
            .ok_or("not running")?;
        let ip = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .ok_or("no IP")?;
        ip.parse::<IpAddr>().map_err(|e| e.to_string())
    })
    .await;
    let log_dir = pod_log_dir(&ox, "net", &uid).join("main");
    eventually(&ox, "one ready + at most one dead sandbox, one IP, one dead container", START, || async {
        let sbs = cri_sandboxes(&bed, &uid).await;
        let ready = sbs.iter().filter(|s| s.state == READY).count();
        let ips = allocated_ips(&bed);
        let cs = cri_containers(&bed, &uid).await;
        let dead = cs.iter().filter(|c| c.state != RUNNING).count();
        let logs = file_names(&log_dir);
        let state = format!(
            "{} sandboxes ({ready} ready), IPs {ips:?} (pod {pod_ip}), {} containers ({dead} dead), logs {logs:?}",
            sbs.len(),
            cs.len()
        );
        let ok = sbs.len() <= 2
            && ready == 1
            && ips == [pod_ip]
            && dead <= 1
            && cs.len() - dead == 1
            && logs.len() == cs.len();
        ok.then_some(()).ok_or(state)
    })
    .await;
    // The kept containers' logs are the ones left on disk.
    for c in cri_containers(&bed, &uid).await {
        let st = bed
            .cri()
            .await
            .container_status(cri::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap();
        assert!(
            Path::new(&st.log_path).exists(),
            "log of kept container {} ({}) exists",
            c.id,
            st.log_path
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_keeps_one_dead_instance_and_removed_pod_leaves_nothing() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let volume = "  volumes:\n  - name: scratch\n    emptyDir: {}\n";
    write_manifest(
        &ox.manifests,
        "crash.yaml",
        &format!(
            "{}    volumeMounts:\n    - name: scratch\n      mountPath: /scratch\n{volume}",
            pod_yaml("crash", "echo out; exit 1", "")
        ),
    );
    let pod = ox
        .wait_for("crash pod", START, |pods| find(pods, "crash").cloned())
        .await;
    let uid = uid(&pod);
    let log_dir = pod_log_dir(&ox, "crash", &uid);
    let pod_dir = ox.root.join("pods").join(&uid);

    // Instance 0 and 1 run at once, instance 2 after the 10 s back-off. Once it has
    // exited, only it is kept (the newest dead instance), with its log.
    let kept = eventually(
        &ox,
        "third instance dead and the older two collected",
        START,
        || async {
            let cs = cri_containers(&bed, &uid).await;
            let logs = file_names(&log_dir.join("main"));
            let state = format!(
                "containers {:?}, logs {logs:?}",
                cs.iter()
                    .map(|c| (
                        &c.annotations["io.kubernetes.container.restartCount"],
                        c.state
                    ))
                    .collect::<Vec<_>>()
            );
            let [c] = cs.as_slice() else {
                return Err(state);
            };
            let restart: i32 = c.annotations["io.kubernetes.container.restartCount"]
                .parse()
                .unwrap();
            (restart >= 2 && c.state == EXITED && logs == [format!("{restart}.log")])
                .then(|| c.id.clone())
                .ok_or(state)
        },
    )
    .await;
    assert!(
        pod_dir.join("volumes").exists(),
        "the live pod keeps its dir"
    );
    assert!(
        !log_dir.join("main/0.log").exists() && !log_dir.join("main/1.log").exists(),
        "older instances' logs went with them"
    );
    let out = std::fs::read_to_string(log_dir.join("main").join(format!(
        "{}.log",
        cri_containers(&bed, &uid).await[0].annotations["io.kubernetes.container.restartCount"]
    )))
    .unwrap_or_default();
    assert!(
        out.contains("stdout F out"),
        "kept instance {kept} has its log: {out:?}"
    );

    std::fs::remove_file(ox.manifests.join("crash.yaml")).unwrap();
    eventually(&ox, "removed pod leaves nothing", START, || async {
        let sbs = cri_sandboxes(&bed, &uid).await.len();
        let cs = cri_containers(&bed, &uid).await.len();
        let listed = find(&ox.pods().await, "crash").is_some();
        let (l, p) = (log_dir.exists(), pod_dir.exists());
        (!listed && sbs == 0 && cs == 0 && !l && !p)
            .then_some(())
            .ok_or(format!(
                "listed {listed}, {sbs} sandboxes, {cs} containers, log dir {l}, pod dir {p}"
            ))
    })
    .await;
    assert!(allocated_ips(&bed).is_empty(), "its IP was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_pod_dirs_are_removed_once_sources_are_ready() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    let pods_dir = ox.root.join("pods");
    let outside = bed.base_dir().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"not oxlet's").unwrap();

    let ghost = "0f5e1b3c-8a7d-4e2f-9b6a-1c2d3e4f5a6b";
    let orphans = [
        pods_dir.join(ghost),
        pods_dir.join("0123456789abcdef0123456789abcdef"),
        ox.logs.join(format!("default_ghost_{ghost}")),
    ];
    std::fs::create_dir_all(orphans[0].join("volumes/kubernetes.io~empty-dir/data")).unwrap();
    std::fs::write(
        orphans[0].join("volumes/kubernetes.io~empty-dir/data/f"),
        b"x",
    )
    .unwrap();
    std::fs::create_dir_all(&orphans[1]).unwrap();
    std::fs::create_dir_all(orphans[2].join("main")).unwrap();
    std::fs::write(orphans[2].join("main/0.log"), b"old").unwrap();

    let linked = "99999999-bbbb-cccc-dddd-eeeeeeeeeeee";
    let strangers = [
        pods_dir.join("not-a-uid"),
        pods_dir.join(linked),
        ox.logs.join(format!("default_link_{linked}")),
        ox.logs.join("not_oxlets"),
    ];
    std::fs::create_dir_all(&strangers[0]).unwrap();
    std::os::unix::fs::symlink(&outside, &strangers[1]).unwrap();
    std::os::unix::fs::symlink(&outside, &strangers[2]).unwrap();
    std::fs::create_dir_all(&strangers[3]).unwrap();

    write_manifest(
        &ox.manifests,
        "live.yaml",
        &pod_yaml("live", "sleep 3600", "  hostNetwork: true\n"),
    );
    ox.spawn(&[]);
    let live = ox.wait_running("live", START).await;
    let live_log = pod_log_dir(&ox, "live", &uid(&live));

    eventually(&ox, "orphaned pod dirs removed", START, || async {
        let left: Vec<_> = orphans.iter().filter(|p| p.exists()).collect();
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    })
    .await;
    // Another housekeeping pass, then nothing that is not an orphan of ours is gone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for p in &strangers {
        assert!(p.symlink_metadata().is_ok(), "{} was removed", p.display());
    }
    assert!(
        outside.join("keep").exists(),
        "nothing behind a symlink is touched"
    );
    assert!(
        live_log.join("main").exists(),
        "the live pod keeps its logs"
    );
    assert!(orphans.iter().all(|p| !p.exists()));
}
