//! The harness's parts: how big a run is, the pods it runs, the cluster-mode node it
//! runs them on, and the report it writes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use testapi::TestApiServer;

use crate::agent::{Oxlet, tail, write_manifest};
use crate::common::Testbed;

/// oxlet's node name (the helper passes `--hostname-override=testnode`).
pub(crate) const NODE: &str = "testnode";
pub(crate) const IMAGE: &str = "localhost/oxlet/busybox:1";
/// Exits at once on SIGTERM, so teardown measures oxlet, not grace periods; never
/// on its own (the first full hours run slept 3600 s, and at the hour every idle pod
/// exited and was restarted, as kubelet restarts it).
pub(crate) const RESTING: &str = "trap 'exit 0' TERM; sleep 1000000000 & wait";

/// How big a run is: the short form (CI) or the full figures
/// (`OXLET_SOAK=full`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) full: bool,
}

impl Scale {
    pub(crate) fn from_env() -> Scale {
        Scale {
            full: std::env::var("OXLET_SOAK").is_ok_and(|v| v == "full"),
        }
    }

    /// `full` in the full run, `short` in CI's.
    pub(crate) fn pick<T>(&self, full: T, short: T) -> T {
        if self.full { full } else { short }
    }
}

/// What a soak pod does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Sleeps.
    Idle,
    /// Serves the host's flags dir over HTTP, with an HTTP readiness probe, a TCP
    /// liveness probe and resource limits (a Burstable pod cgroup); Ready while
    /// `up` is in the flags dir. (Exec probes cost a runc exec each: 55 of them every
    /// 2 s saturate two cores, and kubelet's would too.)
    Probed,
    /// Exits 1 a second after each start: kubelet's crash loop.
    CrashLoop,
    /// Writes into an emptyDir and reads its own name from a downwardAPI volume.
    Volumes,
    /// Its liveness probe fails 20 s after each start: killed and restarted.
    ProbeKilled,
    /// Writes about 100 KiB of log a second, for rotation.
    Chatty,
}

/// A pod of `kind`, for the apiserver or (bound to no node) as a static manifest.
/// `flags` is the host dir a [`Kind::Probed`] pod's readiness reads.
pub(crate) fn pod(name: &str, kind: Kind, api: bool, flags: &Path) -> Pod {
    let script = match kind {
        Kind::Idle | Kind::Volumes => RESTING.to_string(),
        Kind::Probed => format!("httpd -p 8080 -h /flags; {RESTING}"),
        Kind::CrashLoop => "sleep 1; exit 1".into(),
        Kind::ProbeKilled => format!("rm -f /tmp/dead; (sleep 20; touch /tmp/dead) & {RESTING}"),
        Kind::Chatty => "trap 'exit 0' TERM; while :; do \
            i=0; while [ $i -lt 100 ]; do \
            echo \"chatty line $i: the quick brown fox jumps over the lazy dog, again and again and again\"; \
            i=$((i+1)); done; usleep 100000; done"
            .into(),
    };
    let mut container = serde_json::json!({
        "name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    });
    let mut volumes = serde_json::json!([]);
    match kind {
        Kind::Probed => {
            container["readinessProbe"] = serde_json::json!({
                "httpGet": {"path": "/up", "port": 8080},
                "periodSeconds": 2, "failureThreshold": 1,
            });
            container["livenessProbe"] = serde_json::json!({
                "tcpSocket": {"port": 8080}, "periodSeconds": 10,
            });
            container["resources"] = serde_json::json!({
                "requests": {"cpu": "5m", "memory": "8Mi"},
                "limits": {"memory": "64Mi"},
            });
            container["volumeMounts"] =
                serde_json::json!([{"name": "flags", "mountPath": "/flags", "readOnly": true}]);
            volumes = serde_json::json!([{"name": "flags", "hostPath": {
                "path": flags.display().to_string(), "type": "Directory"}}]);
        }
        Kind::Volumes => {
            container["command"] = serde_json::json!([
                "sh",
                "-c",
                format!(
                    "cat /info/name > /scratch/name && dd if=/dev/zero of=/scratch/blob bs=64k count=4 2>/dev/null; {RESTING}"
                )
            ]);
            container["volumeMounts"] = serde_json::json!([
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "info", "mountPath": "/info"},
            ]);
            volumes = serde_json::json!([
                {"name": "scratch", "emptyDir": {}},
                {"name": "info", "downwardAPI": {"items": [
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            ]);
        }
        Kind::ProbeKilled => {
            container["livenessProbe"] = serde_json::json!({
                "exec": {"command": ["sh", "-c", "test ! -f /tmp/dead"]},
                "periodSeconds": 2, "failureThreshold": 2,
            });
        }
        _ => {}
    }
    let mut spec = serde_json::json!({
        "terminationGracePeriodSeconds": 2,
        "containers": [container],
        "volumes": volumes,
    });
    if api {
        spec["nodeName"] = NODE.into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

/// Puts `p` on the node: a manifest in oxlet's directory, or the apiserver's object.
pub(crate) fn add(ox: &Oxlet, server: &TestApiServer, p: &Pod) {
    if p.spec.as_ref().unwrap().node_name.is_some() {
        server.put(p).unwrap();
    } else {
        let name = p.metadata.name.as_deref().unwrap();
        write_manifest(
            &ox.manifests,
            &format!("{name}.yaml"),
            &serde_json::to_string(p).unwrap(),
        );
    }
}

/// Takes `p` off the node: its manifest removed, or its object deleted (at once, as
/// after a force delete).
pub(crate) fn remove(ox: &Oxlet, server: &TestApiServer, p: &Pod) {
    let name = p.metadata.name.as_deref().unwrap();
    if p.spec.as_ref().unwrap().node_name.is_some() {
        server.remove::<Pod>("default", name).unwrap();
    } else {
        std::fs::remove_file(ox.manifests.join(format!("{name}.yaml"))).unwrap();
    }
}

/// A static pod's name as oxlet and the apiserver show it: suffixed with the node.
pub(crate) fn shown_name(p: &Pod) -> String {
    let name = p.metadata.name.clone().unwrap();
    match p.spec.as_ref().unwrap().node_name {
        Some(_) => name,
        None => format!("{name}-{NODE}"),
    }
}

/// Polls `check` every 200 ms until it answers, or fails with `what` and oxlet's log.
pub(crate) async fn until<T>(
    ox: &Oxlet,
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> (T, Duration) {
    let t = Instant::now();
    loop {
        if let Some(v) = check().await {
            return (v, t.elapsed());
        }
        assert!(
            t.elapsed() < within,
            "timed out after {within:?}: {what}\n{}",
            tail(&ox.log(), 60)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until oxlet shows exactly `count` pods, each Running and Ready; returns
/// them and how long that took.
pub(crate) async fn until_all_ready(
    ox: &Oxlet,
    count: usize,
    what: &str,
    within: Duration,
) -> (BTreeMap<String, Pod>, Duration) {
    until(ox, what, within, async || {
        let pods = shown(ox).await;
        (pods.len() == count && pods.values().all(running_ready)).then_some(pods)
    })
    .await
}

/// The pods oxlet shows, by name.
pub(crate) async fn shown(ox: &Oxlet) -> BTreeMap<String, Pod> {
    ox.pods()
        .await
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect()
}

/// Whether `p` runs with every container ready.
pub(crate) fn running_ready(p: &Pod) -> bool {
    let Some(s) = p.status.as_ref() else {
        return false;
    };
    s.phase.as_deref() == Some("Running")
        && s.container_statuses
            .as_ref()
            .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready))
}

/// Whether every container of `p` has run (is running, or has exited at least once).
pub(crate) fn has_run(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|c| {
            !c.is_empty()
                && c.iter().all(|c| {
                    c.restart_count > 0
                        || c.state
                            .as_ref()
                            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
        })
}

/// (container ID, restart count) of each container of `p`.
pub(crate) fn containers_of(p: &Pod) -> Vec<(String, i32)> {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.container_id.clone().unwrap_or_default(), c.restart_count))
        .collect()
}

/// The Node's Ready condition: (status, last heartbeat).
pub(crate) fn node_ready(server: &TestApiServer) -> Option<(String, jiff::Timestamp)> {
    let node = server.get::<Node>("", NODE).ok()??;
    let c = node
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status, c.last_heartbeat_time?.0))
}

/// Whether the node's lease was renewed after `wall`.
pub(crate) fn lease_renewed_after(server: &TestApiServer, wall: jiff::Timestamp) -> bool {
    server
        .get::<k8s_openapi::api::coordination::v1::Lease>("kube-node-lease", NODE)
        .ok()
        .flatten()
        .and_then(|l| l.spec?.renew_time)
        .is_some_and(|t| t.0 > wall)
}

/// A test bed, a test apiserver with its state in the bed's `apiserver/`, and the
/// host dir the probed pods' readiness reads (`flags/`).
pub(crate) async fn cluster_bed() -> (Testbed, TestApiServer, PathBuf) {
    let bed = Testbed::start().await;
    let server = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let flags = bed.base_dir().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    std::fs::write(flags.join("up"), b"up\n").unwrap();
    (bed, server, flags)
}

/// oxlet in cluster mode against `server` on `bed`, at `-v=2`, with `extra` flags.
pub(crate) fn cluster_oxlet(bed: &Testbed, server: &TestApiServer, extra: &[&str]) -> Oxlet {
    let mut ox = Oxlet::new(bed);
    let mut flags = vec![
        format!("--kubeconfig={}", server.kubeconfig().display()),
        "-v=2".into(),
    ];
    flags.extend(extra.iter().map(|s| (*s).to_string()));
    ox.spawn(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    ox
}

/// A scenario's findings: a table, notes, and where it ran.
pub(crate) struct Report {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Report {
    pub(crate) fn new(title: &str, header: &[&str]) -> Report {
        Report {
            title: title.into(),
            header: header.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn note(&mut self, note: String) {
        eprintln!("soak: {note}");
        self.notes.push(note);
    }

    /// Prints the report and appends it to `target/soak/results.md`, with the
    /// commit, the containerd release and the machine.
    pub(crate) fn finish(self, scale: Scale, bed_release: &str) {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### {} ({})\n",
            self.title,
            scale.pick("full", "short")
        );
        let _ = writeln!(out, "{}\n", where_run(bed_release));
        let _ = writeln!(out, "| {} |", self.header.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(self.header.len()));
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        for n in &self.notes {
            let _ = writeln!(out, "\n- {n}");
        }
        eprintln!("{out}");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/soak");
        let _ = std::fs::create_dir_all(&dir);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("results.md"))
        {
            let _ = std::io::Write::write_all(&mut f, format!("{out}\n").as_bytes());
        }
    }
}

/// The commit, the runtime and the machine, in one line.
fn where_run(release: &str) -> String {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    format!(
        "Commit `{commit}` ({profile} build), containerd {release}, kernel {}, {cores} cores, {}.",
        kernel.trim(),
        jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC")
    )
}

/// The bed's containerd release, `major.minor`.
pub(crate) fn release(bed: &Testbed) -> String {
    let (major, minor) = bed.containerd_release();
    format!("{major}.{minor}")
}

/// Milliseconds, one decimal.
pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Seconds, one decimal.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `OXLET_SOAK_HOLD=<seconds>`: keeps the scenario's oxlet running that long after its
/// end reading, so a person can look at the process (its smaps, or gdb's
/// `malloc_trim(0)` to tell freed memory the allocator keeps from live memory).
pub(crate) async fn hold_for_a_look(ox: &Oxlet) {
    let Some(secs) = std::env::var("OXLET_SOAK_HOLD")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    eprintln!("soak: holding oxlet (pid {}) for {secs} s", ox.pid());
    tokio::time::sleep(Duration::from_secs(secs)).await;
}
