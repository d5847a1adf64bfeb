//! A kind node's life and end, for real: the same guest as `tests/vm_kind_node.rs`
//! (Debian 12, systemd 252 as PID 1, cgroup v2, containerd 2.x with `SystemdCgroup = true`,
//! oxlet as kind's `kubelet.service` in static-pod mode), in one boot:
//!
//! 1. **OOM kill on cgroup v2**: a static pod whose container grows past its memory limit
//!    is reported `OOMKilled` with exit code 137 on the read-only port's `/pods`, and
//!    restarted again and again; the kernel's `oom_kill` count in the pod slice's
//!    `memory.events` agrees. Its container scope has `memory.oom.group` 1 (kubelet's
//!    default on v2), so `oom_group_kill` counts too.
//! 2. **Graceful node shutdown against the guest's logind**: with `shutdownGracePeriod`
//!    and `shutdownGracePeriodCriticalPods` set, oxlet raises logind's
//!    `InhibitDelayMaxSec` with its drop-in and holds a delay lock; `systemctl poweroff`
//!    then has oxlet stop the ordinary pods first and the critical one after, before the
//!    guest goes down. It ends the guest, so it comes last.
//!
//! The evidence of the shutdown must leave a guest whose disk is a snapshot and whose share
//! is read-only: journald is told to forward to the serial console (which the harness
//! logs to a file on the host), and each pod's container logs through the node's
//! `/dev/log` (a hostPath socket) when it starts and when it gets SIGTERM.
//!
//! Run: `bash scripts/vm/build-image.sh && cargo test --test vm_node_lifecycle -- --nocapture`.

mod vm;

use std::time::{Duration, Instant};

use vm::Vm;
use vm::kind::{
    Checks, MANIFESTS, assert_kind_shaped, events_field, find_pod, kind_config, kubelet_log,
    pod_slice, pods, poll, running_container_files, share, start_containerd,
    start_oxlet_as_kubelet, wait_running,
};

/// kubelet's two-group shutdown: 30 s in all, the last 10 s kept for critical pods.
const GRACE: &str = "shutdownGracePeriod: 30s";
const GRACE_CRITICAL: &str = "shutdownGracePeriodCriticalPods: 10s";

/// Allocates without bound (a string doubled until the kernel ends it) under a 32Mi
/// limit; requests = limits for memory only, so the pod is Burstable.
const OOM_MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: oom
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "x=0123456789abcdef; while :; do x=\"$x$x\"; done"]
    resources:
      requests: {memory: 32Mi}
      limits: {memory: 32Mi}
"#;

/// The tag of the pods' journal lines (`logger -t`), which the test looks for.
const EVIDENCE: &str = "oxlet-evidence";

/// A static pod that logs to the node's journal when it starts and when it gets SIGTERM
/// (then exits 0). `priority` lines go in as given (`spec.priority`, `priorityClassName`).
fn trap_manifest(name: &str, priority: &str) -> String {
    format!(
        r"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
{priority}  terminationGracePeriodSeconds: 60
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - trap 'logger -t {EVIDENCE} pod={name} got=SIGTERM; exit 0' TERM; logger -t {EVIDENCE} pod={name} started; while :; do sleep 1; done
    volumeMounts:
    - {{name: devlog, mountPath: /dev/log}}
  volumes:
  - name: devlog
    hostPath: {{path: /run/systemd/journal/dev-log, type: Socket}}
"
    )
}

/// The shutdown's pods: `low` (no priority), `classonly` (kubelet resolves no priority
/// class for a static pod: without `spec.priority` it is 0, an ordinary pod) and
/// `critical` (`spec.priority` given as kubeadm's static pods do, 2000001000).
const SHUTDOWN_PODS: [(&str, &str); 3] = [
    ("low", ""),
    ("classonly", "  priorityClassName: system-node-critical\n"),
    (
        "critical",
        "  priorityClassName: system-node-critical\n  priority: 2000001000\n",
    ),
];

/// The OOM-killed container as `/pods` shows it: restart count, `lastState.terminated`.
fn oom_status(vm: &Vm) -> Option<(u64, serde_json::Value, serde_json::Value)> {
    let pod = find_pod(&pods(vm)?, "oom-oxlet-vm")?;
    let status = pod["status"]["containerStatuses"][0].clone();
    Some((
        status["restartCount"].as_u64()?,
        status["lastState"]["terminated"].clone(),
        status["state"].clone(),
    ))
}

/// Scenario 1: the pod's container is OOM-killed, reported so, and restarted.
fn oom_kill(vm: &Vm, c: &mut Checks) {
    vm.write_file(
        &format!("{MANIFESTS}/oom.yaml"),
        OOM_MANIFEST.as_bytes(),
        0o644,
    );
    // containerd's TaskOOM event can come a moment after the exit event, and the
    // evented PLEG reads the status at once: the reason may read `Error` until the
    // next sync (at the restart) reads it again, so the check waits for it to settle.
    let mut terminated_seen: Vec<serde_json::Value> = Vec::new();
    let mut first_seen = None;
    let first = poll(Duration::from_secs(480), || {
        let (restarts, last, state) = oom_status(vm)?;
        let t = &state["terminated"];
        if !t.is_null() && !terminated_seen.contains(t) {
            terminated_seen.push(t.clone());
        }
        if restarts >= 1 && !last.is_null() && first_seen.is_none() {
            first_seen = Some(last.clone());
        }
        (restarts >= 1 && last["reason"] == "OOMKilled").then_some((restarts, last))
    });
    let Some(seen) = first_seen else {
        panic!(
            "the OOM pod never restarted; /pods: {}\noxlet's log:\n{}",
            pods(vm).map(|p| p.to_string()).unwrap_or_default(),
            kubelet_log(vm, 60)
        );
    };
    c.check(
        "lastState.terminated.reason is OOMKilled",
        first.is_some(),
        format!(
            "first seen {seen}, settled {:?}",
            first.as_ref().map(|f| f.1.to_string())
        ),
    );
    c.check(
        "lastState.terminated.exitCode is 137",
        seen["exitCode"] == 137,
        seen.to_string(),
    );
    if !terminated_seen.is_empty() {
        c.check(
            "state.terminated (when seen) says exit code 137",
            terminated_seen.iter().all(|t| t["exitCode"] == 137),
            serde_json::Value::from(terminated_seen.clone()).to_string(),
        );
    }
    let restarts = first.map_or(1, |f| f.0);
    let uid = find_pod(&pods(vm).unwrap_or_default(), "oom-oxlet-vm")
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .unwrap_or_default();
    let slice = pod_slice("burstable", &uid);
    // kubelet 1.32+ on v2 without singleProcessOOMKill: the kernel kills the whole
    // container (caught while a restart of it runs).
    let group = running_container_files(vm, &slice, "sh", &["memory.oom.group"], 240);
    c.check(
        "the OOM pod's container scope has memory.oom.group 1",
        group
            .as_deref()
            .is_some_and(|g| g.ends_with(" memory.oom.group=1")),
        group.unwrap_or_else(|| "no running container caught".into()),
    );
    let again = poll(Duration::from_secs(300), || {
        let (n, last, _) = oom_status(vm)?;
        (n > restarts && last["reason"] == "OOMKilled").then_some(n)
    });
    c.check(
        "the restart count grows with each OOM kill",
        again.is_some(),
        format!("first={restarts} later={again:?}"),
    );
    let events = vm.ssh(&format!("cat {slice}/memory.events"));
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    let seen = events.split_whitespace().collect::<Vec<_>>().join(" ");
    c.check(
        "the pod slice's memory.events counts the OOM kills",
        events_field(&events, "oom_kill").is_some_and(|n| n >= 2),
        seen.clone(),
    );
    c.check(
        "the pod slice's memory.events counts group OOM kills (oom_group_kill)",
        events_field(&events, "oom_group_kill").is_some_and(|n| n >= 1),
        seen,
    );
    vm.ssh_ok(&format!("rm {MANIFESTS}/oom.yaml"));
    let gone = poll(Duration::from_secs(300), || {
        find_pod(&pods(vm)?, "oom-oxlet-vm").is_none().then_some(())
    });
    assert!(gone.is_some(), "the OOM pod stayed after its manifest went");
    eprintln!("vm_node_lifecycle: scenario 1 done: OOM kill");
}

/// journald forwards everything (info and up) to the serial console from now on.
fn journal_to_console(vm: &Vm) {
    vm.write_file(
        "/etc/systemd/journald.conf.d/50-oxlet-console.conf",
        b"[Journal]\nForwardToConsole=yes\nTTYPath=/dev/ttyS0\nMaxLevelConsole=info\n",
        0o644,
    );
    vm.ssh_ok("systemctl restart systemd-journald");
}

/// Before the power-off: logind's delay raised by oxlet's drop-in, oxlet's delay lock
/// listed, and every pod's first journal line there (the evidence path works).
fn shutdown_ready(vm: &Vm, c: &mut Checks) {
    let drop_in = vm.ssh("cat /etc/systemd/logind.conf.d/99-kubelet.conf");
    let drop_in = String::from_utf8_lossy(&drop_in.stdout).into_owned();
    c.check(
        "oxlet's logind drop-in asks for InhibitDelayMaxSec=30",
        drop_in.contains("InhibitDelayMaxSec=30\n"),
        drop_in.trim(),
    );
    let delay = vm.ssh_ok(
        "busctl get-property org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec",
    );
    c.check(
        "logind's InhibitDelayMaxUSec is 30 s",
        delay.trim() == "t 30000000",
        delay.trim(),
    );
    let locks = vm.ssh_ok("systemd-inhibit --list --no-pager");
    let lock = locks
        .lines()
        .find(|l| l.contains("kubelet") && l.contains("shutdown"))
        .unwrap_or("")
        .to_string();
    c.check(
        "oxlet holds a delay lock on shutdown (systemd-inhibit --list)",
        lock.contains("delay") && lock.contains("Kubelet needs time to handle node shutdown"),
        if lock.is_empty() { locks } else { lock },
    );
    let started = poll(Duration::from_secs(120), || {
        let out = vm.ssh(&format!("journalctl -t {EVIDENCE} --no-pager -o cat"));
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        SHUTDOWN_PODS
            .iter()
            .all(|(p, _)| out.contains(&format!("pod={p} started")))
            .then_some(out)
    });
    assert!(
        started.is_some(),
        "the pods' journal lines (logger through /dev/log) did not all arrive"
    );
}

/// Where `needle` first appears in the console, for ordering.
fn at(console: &str, needle: &str) -> Option<usize> {
    console.find(needle)
}

/// Scenario 2's verdict, from the console of a guest that is gone.
fn check_shutdown_console(c: &mut Checks, console: &str) {
    let term = |p: &str| at(console, &format!("pod={p} got=SIGTERM"));
    let (low, classonly, critical) = (term("low"), term("classonly"), term("critical"));
    let ordinary_done = at(
        console,
        "every pod with priority below 2000000000 has stopped",
    );
    let released = at(console, "the inhibitor lock is released");
    let off = at(console, "reboot: Power down");
    let seen = format!(
        "low={low:?} classonly={classonly:?} ordinary_done={ordinary_done:?} critical={critical:?} released={released:?} power_down={off:?}"
    );
    c.check(
        "oxlet logged PrepareForShutdown",
        at(
            console,
            "node is shutting down (logind sent PrepareForShutdown)",
        )
        .is_some(),
        seen.clone(),
    );
    c.check(
        "every pod got SIGTERM before the power-off",
        [low, classonly, critical]
            .iter()
            .all(|t| t.is_some() && off.is_some() && t < &off),
        seen.clone(),
    );
    c.check(
        "the ordinary pods (classonly too) stopped before the critical one got SIGTERM",
        low.is_some()
            && classonly.is_some()
            && ordinary_done.is_some()
            && low < ordinary_done
            && classonly < ordinary_done
            && ordinary_done < critical,
        seen.clone(),
    );
    c.check(
        "oxlet released its lock after the critical pod got SIGTERM",
        critical.is_some() && released.is_some() && critical < released && released < off,
        seen.clone(),
    );
    for (pod, grace) in [("low", 20), ("classonly", 20), ("critical", 10)] {
        let line = format!("stopping pod within {grace}s");
        let logged = console
            .lines()
            .any(|l| l.contains(&line) && l.contains(&format!("pod=\"default/{pod}-oxlet-vm\"")));
        c.check(
            &format!("oxlet logged stopping {pod} within its group's {grace}s"),
            logged,
            console
                .lines()
                .find(|l| l.contains(&format!("{pod}-oxlet-vm")) && l.contains("stopping pod"))
                .unwrap_or("none"),
        );
    }
}

/// Scenario 2: pods of three priorities, then `systemctl poweroff`.
fn graceful_shutdown(vm: Vm, c: &mut Checks) {
    journal_to_console(&vm);
    for (name, priority) in SHUTDOWN_PODS {
        vm.write_file(
            &format!("{MANIFESTS}/{name}.yaml"),
            trap_manifest(name, priority).as_bytes(),
            0o644,
        );
    }
    for (name, _) in SHUTDOWN_PODS {
        wait_running(&vm, &format!("{name}-oxlet-vm"));
    }
    shutdown_ready(&vm, c);
    let (off, console) = vm.poweroff_with_console();
    eprintln!("vm_node_lifecycle: scenario 2: powered off in {off:?}");
    for l in console.lines().filter(|l| {
        l.contains(EVIDENCE) || l.contains("node shutdown") || l.contains("shutting down")
    }) {
        eprintln!("vm_node_lifecycle: console: {l}");
    }
    check_shutdown_console(c, &console);
}

#[test]
fn kind_node_oom_kill_and_graceful_shutdown() {
    let started = Instant::now();
    let vm = Vm::boot(&share());
    assert_kind_shaped(&vm);
    start_containerd(&vm);
    let config = kind_config()
        .replace("shutdownGracePeriod: 0s", GRACE)
        .replace("shutdownGracePeriodCriticalPods: 0s", GRACE_CRITICAL);
    assert!(config.contains(GRACE) && config.contains(GRACE_CRITICAL));
    start_oxlet_as_kubelet(&vm, &config);
    let mut checks = Checks::new("vm_node_lifecycle");
    oom_kill(&vm, &mut checks);
    let boot = vm.boot_time;
    graceful_shutdown(vm, &mut checks);
    eprintln!(
        "vm_node_lifecycle: boot_to_ssh={boot:?} total={:?}",
        started.elapsed()
    );
    checks.finish();
}
