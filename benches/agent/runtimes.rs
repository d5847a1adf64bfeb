//! `--runtimes`: the same oxlet on each containerd release there is (the system's 1.6,
//! and 1.7 and 2.x from `target/runtimes`, as `scripts/fetch-runtimes.sh` puts them):
//! how long a container's exit takes to reach the pod status (the process is killed
//! from outside, `/pods` is polled every 2 ms), and the node at rest with the bench's
//! idle pods, with the PLEG task's own CPU. The newest release runs twice, the second time
//! with `--feature-gates=EventedPLEG=false`: the generic PLEG against the evented one on one
//! runtime, back to back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use oxlet::containerd::ContainerdBinary;
use serde_json::json;

use crate::agent::{Oxlet, container_status, find, runtime_id, write_manifest};
use crate::common::Testbed;
use crate::run::{self, this_binary};
use crate::stats::{dist, footprint, ms, pct, sorted};
use crate::{Plan, WAIT, write_report};

/// The releases to measure: (label, binary), those that are present.
fn releases() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let runtimes = std::env::var_os("OXLET_RUNTIMES")
        .map_or_else(|| root.join("target/runtimes"), PathBuf::from);
    let mut out = vec![("system".to_string(), PathBuf::from("/usr/bin/containerd"))];
    for series in ["containerd-1.7", "containerd-2"] {
        let bin = runtimes.join(series).join("bin/containerd");
        if bin.is_file() {
            out.push((series.to_string(), bin));
        } else {
            println!("({} missing: run scripts/fetch-runtimes.sh)", bin.display());
        }
    }
    out
}

/// A pod whose one container sleeps, for killing from outside.
fn sleeper(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 0\n  hostNetwork: true\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: localhost/oxlet/busybox:1\n    \
         imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n"
    )
}

/// The container's init pid, from the runtime's verbose status.
async fn container_pid(bed: &Testbed, id: &str) -> i32 {
    let status = bed
        .cri()
        .await
        .container_status(k8s_cri::v1::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: true,
        })
        .await
        .expect("ContainerStatus")
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    info["pid"].as_i64().expect("a pid in the verbose info") as i32
}

/// Kills pod `name`'s container and times until `/pods` shows it terminated.
async fn exit_to_status(ox: &Oxlet, bed: &Testbed, name: &str) -> Duration {
    write_manifest(&ox.manifests, &format!("{name}.yaml"), &sleeper(name));
    let pod = ox.wait_running(name, WAIT).await;
    let pid = container_pid(bed, &runtime_id(&pod, "main")).await;
    let t0 = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    loop {
        let pods = ox.pods().await;
        let done = find(&pods, name)
            .and_then(|p| {
                container_status(p, "main")?
                    .state
                    .as_ref()?
                    .terminated
                    .as_ref()
            })
            .is_some();
        if done {
            let took = t0.elapsed();
            std::fs::remove_file(ox.manifests.join(format!("{name}.yaml"))).unwrap();
            return took;
        }
        assert!(t0.elapsed() < WAIT, "{name}'s exit never reached /pods");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One release: exits, then the node at rest; `flags` go to oxlet.
async fn measure(
    plan: &Plan,
    label: &str,
    binary: ContainerdBinary,
    flags: &[String],
) -> serde_json::Value {
    let version = binary.version.clone();
    let bed = Testbed::start_on(binary).await;
    let ox = run::start(&bed, "ox", this_binary(), flags).await;
    ox.wait_logged("starting the pod lifecycle event generator", 1, WAIT)
        .await;
    let pleg = if ox.log().contains("pleg=\"EventedPLEG\"") {
        "evented"
    } else {
        "generic"
    };
    let reps = if plan.quick { 3 } else { 20 };
    let mut exits = Vec::new();
    for i in 0..reps {
        exits.push(ms(exit_to_status(&ox, &bed, &format!("exit{i}")).await));
    }
    let exits = sorted(exits);
    run::write_pods(&ox, "idle", 0..plan.rest_pods);
    run::wait_all_running(&ox, plan.rest_pods, Instant::now()).await;
    tokio::time::sleep(plan.settle).await;
    let rest = footprint(&ox, bed.containerd_pid(), plan.window).await;
    let pleg_cores = rest
        .tasks
        .as_ref()
        .and_then(|t| t.iter().find(|(n, _)| n == "pleg").map(|(_, c)| *c));
    println!(
        "{label:<15} {version:<16} {pleg:<8} exit→status p50 {:>7.1} ms  p90 {:>7.1} ms  | \
         {} pods: oxlet {:.4} core (pleg task {}), containerd {:.4} core",
        pct(&exits, 0.5),
        pct(&exits, 0.9),
        plan.rest_pods,
        rest.cpu_cores,
        pleg_cores.map_or("n/a".to_string(), |c| format!("{c:.5}")),
        rest.containerd_cpu_cores,
    );
    run::remove_pods(&ox, "idle", 0..plan.rest_pods);
    run::stop(ox, &bed).await;
    json!({
        "runtime": label, "version": version, "pleg": pleg,
        "exit_to_status_ms": dist(&exits),
        "at_rest": rest.json(plan.rest_pods),
        "pleg_task_cores": pleg_cores,
    })
}

pub(crate) async fn run(plan: &Plan) {
    println!("== each containerd release: exit to status, and at rest ==");
    let mut rows = Vec::new();
    let releases = releases();
    for (i, (label, path)) in releases.iter().enumerate() {
        let binary = ContainerdBinary::at(path.clone())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        rows.push(measure(plan, label, binary.clone(), &[]).await);
        if i + 1 == releases.len() {
            let gate_off = format!("{label} gate off");
            let flags = ["--feature-gates=EventedPLEG=false".to_string()];
            rows.push(measure(plan, &gate_off, binary, &flags).await);
        }
    }
    write_report("runtimes.json", &json!({ "runtimes": rows }));
}
