//! Runtime kills: containerd SIGKILLed again and again under a full node. kubelet's
//! restart test expects no pod restarted and no IP leaked; oxlet must also be ready
//! again soon after each kill.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testapi::TestApiServer;

use crate::agent::{Oxlet, tail};
use crate::common::Testbed;
use crate::footprint::{cri_client, reserved_ips};
use crate::kit::*;

/// Whose containerd is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// The test bed's, restarted by the bed as a service manager would.
    External,
    /// oxlet's own, which oxlet must restart.
    Managed,
}

/// The node under test: where its runtime and its oxlet are.
struct Node {
    /// Dropped first: a live oxlet would put back the sandboxes the bed's drop removes,
    /// and their network namespaces would outlive the bed's containerd.
    ox: Oxlet,
    /// Keeps the external runtime (and the bed's dirs) alive.
    bed: Testbed,
    server: TestApiServer,
    socket: PathBuf,
    ipam: PathBuf,
    flags: PathBuf,
    /// A managed runtime's dir, removed at the end.
    _managed: Option<tempfile::TempDir>,
}

async fn start_node(which: Runtime) -> Node {
    let (bed, server, flags) = cluster_bed().await;
    match which {
        Runtime::External => {
            let ox = cluster_oxlet(&bed, &server, &[]);
            Node {
                socket: bed.socket().to_path_buf(),
                ipam: bed.layout().cni_data_dir.clone(),
                bed,
                ox,
                server,
                flags,
                _managed: None,
            }
        }
        Runtime::Managed => {
            let base = tempfile::Builder::new()
                .prefix("oxk-")
                .tempdir_in("/tmp")
                .unwrap();
            let mut ox = Oxlet::in_dir(base.path(), None);
            ox.copy_images_to_root();
            ox.spawn(&[
                &format!("--kubeconfig={}", server.kubeconfig().display()),
                "-v=2",
            ]);
            Node {
                socket: ox.root.join("containerd/containerd.sock"),
                ipam: ox.root.join("containerd/cni/ipam"),
                bed,
                ox,
                server,
                flags,
                _managed: Some(base),
            }
        }
    }
}

/// The managed containerd's process (started with oxlet's config).
fn managed_pid(root: &Path) -> Option<u32> {
    let needle = format!("--config {}", root.join("containerd/config.toml").display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_string_lossy().parse::<u32>().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        (cmd.contains(&needle) && !cmd.contains("cargo")).then_some(pid)
    })
}

/// Every pod (half static, half from the apiserver, a third probed with a Burstable
/// cgroup) Running and Ready; returns each one's containers.
async fn fill(node: &Node, count: usize) -> BTreeMap<String, Vec<(String, i32)>> {
    for i in 0..count {
        let kind = if i % 3 == 0 { Kind::Probed } else { Kind::Idle };
        let p = pod(&format!("k{i:03}"), kind, i % 2 == 1, &node.flags);
        add(&node.ox, &node.server, &p);
    }
    let (pods, took) = until_all_ready(
        &node.ox,
        count,
        "every pod Running and Ready",
        Duration::from_secs(600),
    )
    .await;
    eprintln!("soak: {count} pods Running and Ready in {took:?}");
    pods.iter()
        .map(|(n, p)| (n.clone(), containers_of(p)))
        .collect()
}

/// Kills the runtime `kills` times, `apart` apart, measuring each recovery, then checks
/// that nothing restarted and no address leaked.
pub(crate) async fn runtime_kills(scale: Scale, which: Runtime) {
    let pods = scale.pick(110, 20);
    let kills = scale.pick(6, 2);
    let apart = Duration::from_secs(scale.pick(15, 10));
    let mut node = start_node(which).await;
    node.ox.wait_up(Duration::from_secs(120)).await;
    let before = fill(&node, pods).await;
    let mut report = Report::new(
        &format!(
            "Runtime kills: {which:?} containerd, {pods} pods, {kills} SIGKILLs {apart:?} apart"
        ),
        &[
            "kill",
            "runtime answers",
            "oxlet healthy",
            "Node Ready, lease renewed",
            "NotReady seen",
        ],
    );
    for k in 1..=kills {
        let kill_wall = jiff::Timestamp::now();
        let t = Instant::now();
        match which {
            Runtime::External => {
                node.bed.kill_containerd().await;
            }
            Runtime::Managed => {
                let pid = managed_pid(&node.ox.root).expect("the managed containerd runs");
                rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid as i32).unwrap(),
                    rustix::process::Signal::KILL,
                )
                .unwrap();
            }
        }
        let recovery = recover(&node, t, kill_wall).await;
        report.row(vec![
            k.to_string(),
            ms(recovery.runtime),
            ms(recovery.healthy),
            ms(recovery.ready),
            recovery.not_ready_seen.to_string(),
        ]);
        if let Some(rest) = apart.checked_sub(t.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    check_nothing_restarted(&node, &before, &mut report).await;
    report.finish(scale, &release(&node.bed));
}

struct Recovery {
    runtime: Duration,
    healthy: Duration,
    ready: Duration,
    not_ready_seen: bool,
}

/// After a kill at `t` (`wall` on the clock): when the runtime answers again, when
/// oxlet's `/healthz` says the runtime is up, and when the Node is Ready with its
/// lease renewed since the kill (kubelet writes the Node's status only when it
/// changes or every 5 minutes; the lease is its heartbeat).
async fn recover(node: &Node, t: Instant, wall: jiff::Timestamp) -> Recovery {
    let mut not_ready_seen = false;
    let mut runtime = None;
    let mut healthy = None;
    loop {
        if runtime.is_none()
            && let Some(mut c) = cri_client(&node.socket).await
            && c.version(k8s_cri::v1::VersionRequest::default())
                .await
                .is_ok()
        {
            runtime = Some(t.elapsed());
        }
        let health = node.ox.get("/healthz").await.map(|r| r.0);
        if runtime.is_some() && healthy.is_none() && health == Some(200) {
            healthy = Some(t.elapsed());
        }
        let ready = match node_ready(&node.server) {
            Some((status, _)) if status != "True" => {
                not_ready_seen = true;
                false
            }
            Some(_) => lease_renewed_after(&node.server, wall),
            None => false,
        };
        if let (true, Some(runtime), Some(healthy)) = (ready, runtime, healthy) {
            return Recovery {
                runtime,
                healthy,
                ready: t.elapsed(),
                not_ready_seen,
            };
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "the node did not recover from the kill in 90 s (runtime {runtime:?}, healthy {healthy:?})\n{}",
            tail(&node.ox.log(), 60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every pod Running and Ready on the same containers, unrestarted, one sandbox and
/// one container each in the runtime, and host-local's reservations exactly the pods'
/// addresses.
async fn check_nothing_restarted(
    node: &Node,
    before: &BTreeMap<String, Vec<(String, i32)>>,
    report: &mut Report,
) {
    let (pods, _) = until_all_ready(
        &node.ox,
        before.len(),
        "every pod Running and Ready after the kills",
        Duration::from_secs(120),
    )
    .await;
    let restarted: Vec<&String> = pods
        .iter()
        .filter(|(n, p)| before.get(*n) != Some(&containers_of(p)))
        .map(|(n, _)| n)
        .collect();
    let mut c = cri_client(&node.socket).await.expect("the runtime answers");
    let sandboxes = c
        .list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    let containers = c
        .list_containers(k8s_cri::v1::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers;
    let ips: BTreeSet<String> = pods
        .values()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    let reserved = reserved_ips(&node.ipam);
    report.note(format!(
        "after the kills: {} pods Running and Ready, {} restarted or on other containers, {} sandboxes and {} containers in the runtime, {} addresses reserved for {} pod IPs ({} leaked)",
        pods.len(),
        restarted.len(),
        sandboxes.len(),
        containers.len(),
        reserved.len(),
        ips.len(),
        reserved.difference(&ips).count()
    ));
    assert!(
        restarted.is_empty(),
        "restarted: {restarted:?}\n{}",
        tail(&node.ox.log(), 60)
    );
    assert_eq!(sandboxes.len(), before.len(), "one sandbox a pod");
    assert_eq!(containers.len(), before.len(), "one container a pod");
    assert_eq!(
        reserved, ips,
        "host-local's reservations are the pods' addresses"
    );
}
