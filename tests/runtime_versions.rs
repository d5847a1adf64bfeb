//! What differs between containerd 1.6, 1.7 and 2.x, and how oxlet meets it, on the
//! containerd the test bed runs (`OXLET_TEST_CONTAINERD`; `scripts/test.sh` runs this
//! file on all three):
//! - `GetContainerEvents`: 1.6 answers `Unimplemented`, so the generic PLEG relists every
//!   second; 1.7 and 2.x stream events (answering the call only with the first one), so
//!   the evented PLEG runs, relists every 300 s, and falls back to relisting while the
//!   stream is down (a runtime restart);
//! - `RuntimeConfig`: only 2.x answers, so only there the cgroup driver comes from it; 1.x
//!   tells it through the verbose `Status` config;
//! - `ContainerStatus.user`: only 2.x reports the identity a container runs as, which the
//!   pod status shows as kubelet 1.33+ does (`containerStatuses[].user.linux`).

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Pod;

const WAIT: Duration = Duration::from_secs(30);

fn pod(name: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  hostNetwork: true\n  restartPolicy: Never\n  \
         containers:\n  - name: main\n    image: localhost/oxlet/busybox:1\n    \
         imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"{command}\"]\n"
    )
}

fn exit_code(p: &Pod) -> Option<i32> {
    let state = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?;
    state.terminated.as_ref().map(|t| t.exit_code)
}

/// The `kubelet_pleg_relist_duration_seconds_count` oxlet reports now; waits for the
/// read-only port, which may open after the PLEG has started.
async fn relists(ox: &Oxlet) -> u64 {
    let t = Instant::now();
    let (status, body) = loop {
        if let Some(answer) = ox.get("/metrics").await {
            break answer;
        }
        assert!(t.elapsed() < WAIT, "/metrics never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the relist count is on /metrics")
}

/// Waits until pod `name` has terminated with `code`; returns how long that took.
async fn wait_exit(ox: &Oxlet, name: &str, code: i32) -> Duration {
    let t = Instant::now();
    ox.wait_for(&format!("{name} exited {code}"), WAIT, |pods| {
        find(pods, name).and_then(exit_code).filter(|c| *c == code)
    })
    .await;
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pleg_and_the_cgroup_driver_follow_what_the_runtime_offers() {
    let mut bed = Testbed::start().await;
    let release = bed.containerd_release();
    let evented = release >= (1, 7);
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_logged("starting the pod lifecycle event generator", 1, WAIT)
        .await;
    let log = ox.log();
    let (name, reason) = if evented {
        ("EventedPLEG", "the runtime streams container events")
    } else {
        (
            "GenericPLEG",
            "the runtime does not implement GetContainerEvents",
        )
    };
    assert!(
        log.contains(&format!("pleg=\"{name}\"")) && log.contains(reason),
        "containerd {release:?}: {}",
        tail(&log, 40)
    );
    let driver_source = if release >= (2, 0) {
        "reported by the runtime (CRI RuntimeConfig)"
    } else {
        "containerd's CRI config"
    };
    assert!(
        log.contains(driver_source),
        "containerd {release:?}: {}",
        tail(&log, 40)
    );

    // An exit reaches the status; with events, without a relist.
    write_manifest(&ox.manifests, "a.yaml", &pod("a", "sleep 2; exit 3"));
    let a = ox
        .wait_for("a started", WAIT, |pods| {
            find(pods, "a").filter(|p| is_running(p)).cloned()
        })
        .await;
    let user = a.status.unwrap().container_statuses.unwrap()[0]
        .user
        .clone()
        .and_then(|u| u.linux);
    if release >= (2, 0) {
        let user = user.expect("2.x reports the container's user");
        assert_eq!((user.uid, user.gid), (0, 0), "busybox runs as root");
    } else {
        assert_eq!(user, None, "containerd {release:?} reports no user");
    }
    let before = relists(&ox).await;
    wait_exit(&ox, "a", 3).await;
    let during = relists(&ox).await - before;
    if evented {
        assert!(during <= 1, "{during} relists while events flowed");
        ox.wait_logged("Evented PLEG: received a container event", 1, WAIT)
            .await;
    } else {
        assert!(during >= 1, "the generic PLEG relists every second");
    }

    // A runtime restart breaks the stream: relisting every second meanwhile, then the
    // events again; an exit during and after is seen either way.
    bed.restart_containerd().await;
    if evented {
        ox.wait_logged("the container event stream failed", 1, WAIT)
            .await;
        ox.wait_logged("subscribing to container events again", 1, WAIT)
            .await;
    }
    write_manifest(&ox.manifests, "b.yaml", &pod("b", "sleep 1; exit 4"));
    wait_exit(&ox, "b", 4).await;
    if evented {
        // Back on the stream: the relists slow down again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = relists(&ox).await;
        write_manifest(&ox.manifests, "c.yaml", &pod("c", "sleep 1; exit 5"));
        wait_exit(&ox, "c", 5).await;
        let during = relists(&ox).await - before;
        assert!(during <= 1, "{during} relists after the stream came back");
    }
}

/// `featureGates: {EventedPLEG: false}` keeps the generic PLEG on any release, and it
/// still sees an exit; another gate is named as not implemented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_evented_pleg_gate_set_false_keeps_relisting() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(
        &bed,
        &["--feature-gates=EventedPLEG=false,SomeAlphaGate=true"],
    );
    ox.wait_logged("starting the pod lifecycle event generator", 1, WAIT)
        .await;
    let log = ox.log();
    assert!(
        log.contains("pleg=\"GenericPLEG\"")
            && log.contains("the EventedPLEG feature gate is false"),
        "{}",
        tail(&log, 40)
    );
    assert!(
        log.contains("feature gate SomeAlphaGate is accepted but not implemented"),
        "{}",
        tail(&log, 40)
    );
    write_manifest(&ox.manifests, "a.yaml", &pod("a", "sleep 1; exit 3"));
    let before = relists(&ox).await;
    wait_exit(&ox, "a", 3).await;
    assert!(relists(&ox).await > before, "the generic PLEG relists");
    assert!(
        !ox.log().contains("Evented PLEG"),
        "the event stream is never opened"
    );
}
