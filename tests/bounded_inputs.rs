//! Hostile manifests against the real oxlet binary and a real containerd: a YAML
//! alias bomb and a `$(VAR)` expansion bomb are refused for their pod only, and the
//! agent's peak memory barely moves.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);
/// Most the agent's peak RSS may grow while handling one bomb. Unbounded, the YAML
/// bomb below needs over 200 MiB and the env bomb terabytes.
const MAX_GROWTH_KIB: u64 = 64 * 1024;

/// Peak resident set of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

async fn wait_for_log(ox: &Oxlet, what: &[&str]) {
    let t = Instant::now();
    loop {
        let log = ox.log();
        if log.lines().any(|l| what.iter().all(|w| l.contains(w))) {
            return;
        }
        assert!(
            t.elapsed() < START,
            "no log line with {what:?}:\n{}",
            tail(&log, 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_alias_bomb_is_refused_and_memory_stays_flat() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "good.yaml",
        &pod_yaml("good", "sleep 3600", ""),
    );
    ox.wait_running("good", START).await;
    let before = peak_rss_kib(ox.pid());

    // A valid pod, ~0.5 MB on disk, 200 MiB once its 400 aliases are expanded.
    let wide = "x".repeat(512 * 1024);
    let refs = "*w, ".repeat(400);
    let bomb = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\n  annotations:\n    a: &w {wide}\nspec:\n  containers:\n  - name: main\n    image: localhost/oxlet/busybox:1\n    imagePullPolicy: IfNotPresent\n    args: [{refs}x]\n"
    );
    write_manifest(&ox.manifests, "bomb.yaml", &bomb);
    wait_for_log(
        &ox,
        &["bomb.yaml", "document too large with aliases expanded"],
    )
    .await;

    // The source lives on: a pod added afterwards starts.
    write_manifest(
        &ox.manifests,
        "after.yaml",
        &pod_yaml("after", "sleep 3600", ""),
    );
    ox.wait_running("after", START).await;
    let growth = peak_rss_kib(ox.pid()).saturating_sub(before);
    eprintln!("oxlet peak RSS: {before} KiB before the bomb, grew {growth} KiB");
    assert!(growth < MAX_GROWTH_KIB, "peak RSS grew {growth} KiB");
    let pods = ox.pods().await;
    assert!(find(&pods, "bomb").is_none());
    assert_eq!(pods.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_expansion_bomb_is_a_config_error_for_its_pod_only() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(
        &ox.manifests,
        "good.yaml",
        &pod_yaml("good", "sleep 3600", ""),
    );
    ox.wait_running("good", START).await;
    let before = peak_rss_kib(ox.pid());

    // Each variable doubles the one before: 2^40 bytes if expanded without a bound.
    let mut env = format!(
        "    env:\n    - name: V0\n      value: \"{}\"\n",
        "x".repeat(1024)
    );
    for i in 1..=30 {
        env.push_str(&format!(
            "    - name: V{i}\n      value: \"$(V{p})$(V{p})\"\n",
            p = i - 1
        ));
    }
    write_manifest(
        &ox.manifests,
        "envbomb.yaml",
        &format!("{}{env}", pod_yaml("envbomb", "sleep 3600", "")),
    );
    let p = ox
        .wait_for("envbomb CreateContainerConfigError", START, |pods| {
            find(pods, "envbomb")
                .filter(|p| {
                    main_waiting(p)
                        .is_some_and(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
                })
                .cloned()
        })
        .await;
    let waiting = container(&p, "main")
        .state
        .as_ref()
        .and_then(|s| s.waiting.clone())
        .unwrap();
    let msg = waiting.message.unwrap_or_default();
    assert!(
        msg.contains("env[8] (V8): expands to more than 131072 bytes"),
        "{msg}"
    );
    assert!(cri_containers(&bed, &uid(&p)).await.is_empty());
    let pods = ox.pods().await;
    assert!(is_running(find(&pods, "good").unwrap()));
    let growth = peak_rss_kib(ox.pid()).saturating_sub(before);
    eprintln!("oxlet peak RSS: {before} KiB before the env bomb, grew {growth} KiB");
    assert!(growth < MAX_GROWTH_KIB, "peak RSS grew {growth} KiB");
}
