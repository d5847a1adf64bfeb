//! Graceful node shutdown against a real containerd, the real oxlet binary, the test
//! apiserver, and a private `dbus-daemon` (Debian's `dbus`) with a small logind of the
//! test's own on it: `Inhibit`, `InhibitDelayMaxUSec` and `PrepareForShutdown`. oxlet
//! finds the bus through `DBUS_SYSTEM_BUS_ADDRESS`, as any D-Bus client does.
//!
//! Checked: the delay lock is taken at start; on `PrepareForShutdown(true)` the regular
//! pods are stopped first, a pod ignoring SIGTERM is killed at its group's budget, the
//! critical pods only then; each pod ends `Failed`/`Terminated` with kubelet's message
//! and a `DisruptionTarget` condition; the Node is not Ready with "node is shutting
//! down"; a new pod is refused with `NodeShutdown`; the lock is released at the end.
//! Without a bus, oxlet says so once and runs pods as usual.

mod agent;
mod common;

use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use common::dbus::Bus;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use zbus::Connection;
use zbus::message::Type;

const NODE: &str = "testnode";
const MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
const START: Duration = Duration::from_secs(40);

/// What the test's logind saw.
#[derive(Default)]
struct Seen {
    /// Each `Inhibit` call's (what, who, why, mode).
    inhibits: Vec<(String, String, String, String)>,
    /// The far end of each lock handed out: it reads end-of-file once oxlet closes its end.
    locks: Vec<UnixStream>,
    delay_reads: usize,
}

/// `org.freedesktop.login1` on the private bus: just what the shutdown manager uses.
struct Logind {
    conn: Connection,
    seen: Arc<Mutex<Seen>>,
}

impl Logind {
    async fn start(address: &str, delay: Duration) -> Logind {
        let conn = zbus::connection::Builder::address(address)
            .build()
            .await
            .unwrap();
        conn.request_name("org.freedesktop.login1").await.unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (c, s) = (conn.clone(), seen.clone());
        let usec = u64::try_from(delay.as_micros()).unwrap();
        tokio::spawn(async move {
            let mut calls = zbus::MessageStream::from(&c);
            while let Some(Ok(msg)) = calls.next().await {
                if msg.message_type() == Type::MethodCall {
                    answer(&c, &msg, usec, &s).await;
                }
            }
        });
        Logind { conn, seen }
    }

    async fn prepare_for_shutdown(&self, start: bool) {
        self.conn
            .emit_signal(
                None::<&str>,
                "/org/freedesktop/login1",
                "org.freedesktop.login1.Manager",
                "PrepareForShutdown",
                &start,
            )
            .await
            .unwrap();
    }

    /// Whether lock `i` was released.
    fn released(&self, i: usize) -> bool {
        let seen = self.seen.lock().unwrap();
        let mut far = &seen.locks[i];
        far.set_nonblocking(true).unwrap();
        matches!(far.read(&mut [0_u8; 1]), Ok(0))
    }
}

/// One method call: the delay property, `Inhibit`, or an error.
async fn answer(c: &Connection, msg: &zbus::Message, usec: u64, seen: &Mutex<Seen>) {
    let h = msg.header();
    let member = h
        .member()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    match member.as_str() {
        "Get" => {
            let (iface, prop): (String, String) = msg.body().deserialize().unwrap();
            assert_eq!(
                (iface.as_str(), prop.as_str()),
                ("org.freedesktop.login1.Manager", "InhibitDelayMaxUSec")
            );
            seen.lock().unwrap().delay_reads += 1;
            c.reply(&h, &zbus::Variant::from(usec)).await.unwrap();
        }
        "Inhibit" => {
            let args: (String, String, String, String) = msg.body().deserialize().unwrap();
            let (near, far) = UnixStream::pair().unwrap();
            {
                let mut s = seen.lock().unwrap();
                s.inhibits.push(args);
                s.locks.push(far);
            }
            let fd = zbus::OwnedFd::from(std::os::fd::OwnedFd::from(near));
            c.reply(&h, &fd).await.unwrap();
        }
        other => c
            .reply_error(
                &h,
                "org.freedesktop.DBus.Error.UnknownMethod",
                &format!("the test's logind has no {other}"),
            )
            .await
            .unwrap(),
    }
}

/// A static pod writing `/out/<name>` when it gets SIGTERM (`trap` empty: it ignores
/// SIGTERM, as a shell as PID 1 does without a trap).
fn pod(name: &str, priority: Option<i32>, trap: bool, out: &std::path::Path) -> String {
    let priority = priority.map_or(String::new(), |p| format!("  priority: {p}\n"));
    let script = if trap {
        format!("trap 'touch /out/{name}; exit 0' TERM; while true; do sleep 0.2; done")
    } else {
        "while true; do sleep 0.2; done".to_string()
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
{priority}  terminationGracePeriodSeconds: 30
  volumes:
  - name: out
    hostPath:
      path: {out}
      type: Directory
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{script}"]
    volumeMounts:
    - name: out
      mountPath: /out
"#,
        out = out.display()
    )
}

fn config(dir: &std::path::Path, body: &str) -> String {
    let path = dir.join("kubelet-config.yaml");
    std::fs::write(
        &path,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
    )
    .unwrap();
    format!("--config={}", path.display())
}

/// When each watched thing happened, from `t0`, polled every 50 ms.
struct Times {
    t0: Instant,
    at: std::collections::BTreeMap<&'static str, Duration>,
}

impl Times {
    fn mark(&mut self, what: &'static str, happened: bool) {
        if happened && !self.at.contains_key(what) {
            self.at.insert(what, self.t0.elapsed());
        }
    }

    fn get(&self, what: &str) -> Duration {
        self.at[what]
    }
}

fn ready_message(node: Option<Node>) -> Option<(String, String)> {
    let c = node?.status?.conditions?;
    let r = c.into_iter().find(|c| c.type_ == "Ready")?;
    Some((r.status, r.message.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_for_shutdown_stops_pods_by_priority_within_budgets_then_releases_the_lock() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bus = Bus::start(dir.path());
    // logind would wait 30 s: enough for the 6 s + 4 s asked, so no drop-in is written.
    let logind = Logind::start(&bus.address, Duration::from_secs(30)).await;
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let out = bed.base_dir().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut ox = Oxlet::new(&bed);
    write_manifest(&ox.manifests, "quick.yaml", &pod("quick", None, true, &out));
    write_manifest(
        &ox.manifests,
        "stubborn.yaml",
        &pod("stubborn", None, false, &out),
    );
    let critical = pod("critical", Some(2_000_001_000), true, &out);
    write_manifest(&ox.manifests, "critical.yaml", &critical);
    ox.env
        .push(("DBUS_SYSTEM_BUS_ADDRESS".into(), bus.address.clone()));
    let cfg = config(
        dir.path(),
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 4s\n",
    );
    ox.spawn(&[
        &cfg,
        &format!("--kubeconfig={}", server.kubeconfig().display()),
    ]);
    let uids: Vec<(&'static str, String)> = {
        let mut v = Vec::new();
        for name in ["quick", "stubborn", "critical"] {
            v.push((name, uid(&ox.wait_running(name, START).await)));
        }
        v
    };
    // The lock was taken once, with kubelet's words, and is held.
    ox.poll("the inhibitor lock", Duration::from_secs(10), || {
        (logind.seen.lock().unwrap().inhibits.len() == 1).then_some(())
    })
    .await;
    {
        let seen = logind.seen.lock().unwrap();
        let (what, who, _, mode) = &seen.inhibits[0];
        assert_eq!(
            (what.as_str(), who.as_str(), mode.as_str()),
            ("shutdown", "kubelet", "delay")
        );
        assert!(seen.delay_reads >= 1);
    }
    assert!(!logind.released(0));
    ox.poll("the node Ready", Duration::from_secs(20), || {
        let (status, _) = ready_message(server.get::<Node>("", NODE).unwrap())?;
        (status == "True").then_some(())
    })
    .await;

    logind.prepare_for_shutdown(true).await;
    let mut times = Times {
        t0: Instant::now(),
        at: Default::default(),
    };
    while times.t0.elapsed() < Duration::from_secs(25) && !times.at.contains_key("released") {
        for (name, id) in &uids {
            let stopped = cri_containers(&bed, id)
                .await
                .iter()
                .all(|c| c.state != RUNNING);
            times.mark(name, stopped);
        }
        times.mark("critical TERM", out.join("critical").exists());
        let ready = ready_message(server.get::<Node>("", NODE).unwrap());
        times.mark(
            "not ready",
            ready == Some(("False".into(), "node is shutting down".into())),
        );
        times.mark("released", logind.released(0));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = ox.log();
    let report = format!("{:?}\n{}", times.at, tail(&log, 60));
    for what in [
        "quick",
        "stubborn",
        "critical",
        "critical TERM",
        "not ready",
        "released",
    ] {
        assert!(
            times.at.contains_key(what),
            "{what} never happened: {report}"
        );
    }
    // The regular group at once; the pod that ignores SIGTERM is killed at the group's
    // 6 s; the critical pod gets SIGTERM only once that budget is over.
    assert!(times.get("quick") < Duration::from_secs(3), "{report}");
    let stubborn = times.get("stubborn");
    assert!(
        stubborn >= Duration::from_secs(5) && stubborn < Duration::from_secs(10),
        "{report}"
    );
    assert!(
        times.get("critical TERM") >= Duration::from_millis(5500),
        "{report}"
    );
    assert!(times.get("critical TERM") >= times.get("quick"), "{report}");
    // The Node says so at once (not at its next 10 s report).
    assert!(times.get("not ready") < Duration::from_secs(4), "{report}");
    // The lock goes once the critical pod has stopped, within the 10 s asked.
    let released = times.get("released");
    assert!(
        released + Duration::from_millis(500) >= times.get("critical"),
        "{report}"
    );
    assert!(released < Duration::from_secs(14), "{report}");
    assert!(
        log.contains(
            "node is shutting down: stopping 2 pods with priority below 2000000000 within 6s"
        ),
        "{report}"
    );
    assert!(
        !log.contains("raising it with a logind drop-in"),
        "{report}"
    );

    // kubelet's status on each pod.
    let pods = ox.pods().await;
    for name in ["quick", "stubborn", "critical"] {
        let p: &Pod = find(&pods, name).unwrap_or_else(|| panic!("{name}: {report}"));
        let s = p.status.clone().unwrap();
        assert_eq!(
            (
                s.phase.as_deref(),
                s.reason.as_deref(),
                s.message.as_deref()
            ),
            (Some("Failed"), Some("Terminated"), Some(MESSAGE)),
            "{name}"
        );
        let d = s
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "DisruptionTarget")
            .unwrap_or_else(|| panic!("{name} has no DisruptionTarget"));
        assert_eq!(
            (d.status.as_str(), d.reason.as_deref(), d.message.as_deref()),
            ("True", Some("TerminationByKubelet"), Some(MESSAGE))
        );
    }
    // A pod that arrives now is refused, with kubelet's reason and message.
    write_manifest(&ox.manifests, "late.yaml", &pod("late", None, true, &out));
    let late = ox
        .wait_for("late refused", Duration::from_secs(20), |pods| {
            find(pods, "late").filter(|p| phase(p) == "Failed").cloned()
        })
        .await;
    let s = late.status.unwrap();
    assert_eq!(s.reason.as_deref(), Some("NodeShutdown"));
    assert_eq!(
        s.message.as_deref(),
        Some("Pod was rejected: Pod was rejected as the node is shutting down.")
    );
    // Stopped pods stay stopped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, id) in &uids {
        let cs = cri_containers(&bed, id).await;
        assert!(cs.iter().all(|c| c.state != RUNNING), "{name} runs again");
    }
    shutdown_times_are_metrics_and_survive_a_restart(&mut ox, &cfg, &server, times.t0).await;
}

/// kubelet's `kubelet_graceful_shutdown_{start,end}_time_seconds`: set when the shutdown
/// started and ended, kept in `graceful_node_shutdown_state`, and read back by the
/// next start.
async fn shutdown_times_are_metrics_and_survive_a_restart(
    ox: &mut Oxlet,
    cfg: &str,
    server: &testapi::TestApiServer,
    signalled: Instant,
) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started_at = now - signalled.elapsed().as_secs_f64();
    let gauge = |text: &str, name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    let (code, text) = ox.get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    let (start, end) = (
        gauge(&text, "kubelet_graceful_shutdown_start_time_seconds"),
        gauge(&text, "kubelet_graceful_shutdown_end_time_seconds"),
    );
    assert!(
        (start - started_at).abs() <= 2.0,
        "start {start} vs signalled {started_at}"
    );
    assert!(end >= start && end <= now + 1.0, "{start} {end} {now}");
    let state = std::fs::read_to_string(ox.root.join("graceful_node_shutdown_state")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&state).unwrap();
    for key in ["startTime", "endTime"] {
        assert!(
            json[key].as_str().is_some_and(|t| t.ends_with('Z')),
            "{state}"
        );
    }
    ox.kill9();
    ox.spawn(&[
        cfg,
        &format!("--kubeconfig={}", server.kubeconfig().display()),
    ]);
    ox.wait_up(Duration::from_secs(20)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        if let Some((200, text)) = ox.get("/metrics").await
            && text.contains("\nkubelet_graceful_shutdown_start_time_seconds ")
            && gauge(&text, "kubelet_graceful_shutdown_start_time_seconds") == start
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the times were not read back:\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        gauge(&text, "kubelet_graceful_shutdown_end_time_seconds"),
        end
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_system_bus_oxlet_says_so_once_and_runs_pods() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut ox = Oxlet::new(&bed);
    let nowhere = dir.path().join("no_bus_here");
    ox.env.push((
        "DBUS_SYSTEM_BUS_ADDRESS".into(),
        format!("unix:path={}", nowhere.display()),
    ));
    write_manifest(
        &ox.manifests,
        "web.yaml",
        &pod_yaml("web", "sleep 3600", ""),
    );
    let cfg = config(dir.path(), "shutdownGracePeriod: 10s\n");
    ox.spawn(&[&cfg]);
    ox.wait_running("web", START).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = ox.log();
    assert_eq!(
        log.matches("graceful node shutdown is off: cannot watch logind")
            .count(),
        1,
        "{}",
        tail(&log, 40)
    );
    assert!(
        !log.contains("config field shutdownGracePeriod"),
        "not named as unimplemented"
    );
    // Still serving and syncing: a second pod starts too.
    write_manifest(
        &ox.manifests,
        "two.yaml",
        &pod_yaml("two", "sleep 3600", ""),
    );
    ox.wait_running("two", START).await;
}
