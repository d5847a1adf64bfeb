//! A kind node in cluster mode, for real: the same guest as `tests/vm_kind_node.rs`
//! (Debian 12, systemd 252 as PID 1, cgroup v2, containerd 2.x with `SystemdCgroup = true`),
//! oxlet run with kind's drop-in, flags and `config.yaml`, its kubeconfig
//! (`/etc/kubernetes/kubelet.conf`) naming the repo's test apiserver, which runs in the
//! guest (`testapi`'s `serve` example; kubectl from the host talks to it there). That
//! apiserver takes a bearer token over http where kind's takes the node's client
//! certificate, so `--bootstrap-kubeconfig` and `rotateCertificates` are left out. One boot:
//!
//! 1. **The node joins**: the Node registered Ready, its memory capacity the guest's
//!    `MemTotal`, and two pods bound to it (Burstable, BestEffort) Running.
//! 2. **The readers on v2**: `/stats/summary` and `/metrics/cadvisor` (the metric
//!    advisor's readings) show the node's, the pods' and the containers' memory and PSI,
//!    with the systemd driver's slice and scope paths as cAdvisor's `id`s.
//! 3. **In-place resize**: pod bu gets a CPU limit through `pods/resize`; its pod
//!    slice's `cpu.max` follows and the container runs on (issue 46, v2 and systemd).
//! 4. **Eviction on memory pressure**: oxlet restarted with a hard `memory.available`
//!    threshold a little below what the node has free (the pods adopted, not restarted);
//!    a BestEffort pod that holds 400 MB is evicted (phase Failed, reason `Evicted`,
//!    kubelet's message), the Node's `MemoryPressure` goes True, the other pods stay,
//!    and the condition goes False again once the memory is back.
//! 5. **Deletion**: the pods deleted through the apiserver are stopped, finished and
//!    their slices removed.
//!
//! Static pods are never evicted (kubelet's rule: they are critical), which is why this
//! test needs an apiserver.
//!
//! Run: `bash scripts/vm/build-image.sh && cargo test --test vm_cluster_node -- --nocapture`.

mod vm;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use vm::Vm;
use vm::kind::{
    Checks, KUBEPODS, assert_kind_shaped, kind_config, kubelet_log, poll, share, start_containerd,
    start_oxlet_with_dropin, wait_healthy,
};

const NODE: &str = "oxlet-vm";
const KUBECONFIG: &str = "/var/lib/testapi/kubeconfig";

/// kind's drop-in as docs/kind.md gives it, with the read-only port on for the test's
/// reads of `/stats/summary` and `/metrics/cadvisor`, and without kind's
/// `--bootstrap-kubeconfig`: the test apiserver takes a bearer token over http, and a
/// kubeconfig without a client certificate is one kubelet (and oxlet) would replace by
/// bootstrapping (see [`cluster_config`]).
const CLUSTER_DROPIN: &str = r#"[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig=/etc/kubernetes/kubelet.conf"
ExecStart=
ExecStart=/mnt/oxlet/oxlet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --read-only-port=10255 -v=2
"#;

/// A pod bound to the node: `resources` and `command` as given.
fn pod(name: &str, resources: &str, command: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", {command:?}]
{resources}"#
    )
}

/// Holds 400 MB of anonymous memory until killed: `sort` keeps every line it has read
/// and waits for the end of its input, which the `sleep` keeps open.
const HOG: &str = "(yes 0123456789012345678901234567890123456789012345678901234567890123456789012345678 | head -c 400000000; sleep 3600) | sort";

/// The guest with the test apiserver and kubectl shared, plus the CA kind's
/// `clientCAFile` names.
fn boot() -> Vm {
    let serve = build_serve_example();
    let share = share().add("serve", serve).add("kubectl", which("kubectl"));
    let vm = Vm::boot(&share);
    assert_kind_shaped(&vm);
    start_containerd(&vm);
    vm
}

/// `testapi`'s `serve` example, built next to this test's oxlet. Built for the
/// workspace's default members, as the tests are, so that no dependency is built again
/// with other features (`-p testapi` would).
fn build_serve_example() -> PathBuf {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = std::process::Command::new(cargo)
        .args(["build", "--example", "serve"])
        .current_dir(vm::repo())
        .output()
        .expect("cannot run cargo");
    assert!(
        out.status.success(),
        "cargo build --example serve: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let oxlet = PathBuf::from(env!("CARGO_BIN_EXE_oxlet"));
    oxlet.parent().unwrap().join("examples/serve")
}

fn which(bin: &str) -> PathBuf {
    let out = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .output()
        .unwrap();
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!path.is_empty(), "{bin} is not installed on the host");
    PathBuf::from(path)
}

/// The apiserver in the guest (a transient unit in `system.slice`), its kubeconfig as
/// kind's `kubelet.conf`, and a CA for kind's `clientCAFile`.
fn start_apiserver(vm: &Vm) {
    vm.ssh_ok(
        "systemd-run --unit=testapi --property=Slice=system.slice /mnt/oxlet/serve /var/lib/testapi 6443",
    );
    let ready = poll(Duration::from_secs(120), || {
        vm.ssh(&format!("test -s {KUBECONFIG}"))
            .status
            .success()
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "the test apiserver did not start:\n{}",
        vm.ssh_ok("journalctl -u testapi --no-pager | tail -n 30")
    );
    vm.ssh_ok(&format!(
        "mkdir -p /etc/kubernetes/pki && install -m 0600 {KUBECONFIG} /etc/kubernetes/kubelet.conf"
    ));
    let ca = rcgen::generate_simple_self_signed(vec!["kubernetes".to_string()]).unwrap();
    vm.write_file(
        "/etc/kubernetes/pki/ca.crt",
        ca.cert.pem().as_bytes(),
        0o644,
    );
    eprintln!("vm_cluster_node: the test apiserver serves on 127.0.0.1:6443 in the guest");
}

/// kubectl in the guest against the test apiserver.
fn kubectl(vm: &Vm, args: &str) -> std::process::Output {
    vm.ssh(&format!(
        "/mnt/oxlet/kubectl --kubeconfig {KUBECONFIG} {args}"
    ))
}

fn get_json(vm: &Vm, what: &str) -> Option<Value> {
    let out = kubectl(vm, &format!("get {what} -o json"));
    serde_json::from_slice(&out.stdout).ok()
}

fn create(vm: &Vm, name: &str, manifest: &str) {
    let path = format!("/tmp/{name}.yaml");
    vm.write_file(&path, manifest.as_bytes(), 0o644);
    let out = kubectl(vm, &format!("create --validate=false -f {path}"));
    assert!(
        out.status.success(),
        "kubectl create {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Node's condition `kind`'s status.
fn condition(node: &Value, kind: &str) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Whether the Node's condition `kind` reaches `status` within `secs` seconds.
fn wait_condition(vm: &Vm, kind: &str, status: &str, secs: u64) -> bool {
    poll(Duration::from_secs(secs), || {
        let n = get_json(vm, &format!("node {NODE}"))?;
        (condition(&n, kind).as_deref() == Some(status)).then_some(())
    })
    .is_some()
}

/// The pod's phase and its first container's ID, once it runs.
fn running(vm: &Vm, name: &str) -> Option<String> {
    let p = get_json(vm, &format!("pod {name}"))?;
    let status = &p["status"]["containerStatuses"][0];
    if p["status"]["phase"] != "Running" || status["state"]["running"].is_null() {
        return None;
    }
    Some(status["containerID"].as_str()?.to_string())
}

fn wait_running(vm: &Vm, name: &str) -> String {
    poll(Duration::from_secs(480), || running(vm, name)).unwrap_or_else(|| {
        panic!(
            "pod {name} did not become Running: {}\noxlet's log:\n{}",
            get_json(vm, &format!("pod {name}")).unwrap_or_default(),
            kubelet_log(vm, 60)
        )
    })
}

/// A read-only port path in the guest.
fn read_only(vm: &Vm, path: &str) -> String {
    vm.ssh_ok(&format!("busybox wget -qO- http://127.0.0.1:10255{path}"))
}

fn meminfo_total(vm: &Vm) -> u64 {
    let line = vm.ssh_ok("grep MemTotal: /proc/meminfo");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Step 1: the Node registers Ready with the guest's memory; the pods run.
fn node_joins(vm: &Vm, c: &mut Checks) -> (String, String) {
    let node = poll(Duration::from_secs(300), || {
        let n = get_json(vm, &format!("node {NODE}"))?;
        (condition(&n, "Ready").as_deref() == Some("True")).then_some(n)
    });
    let Some(node) = node else {
        panic!(
            "the Node did not become Ready: {}\noxlet's log:\n{}",
            get_json(vm, &format!("node {NODE}")).unwrap_or_default(),
            kubelet_log(vm, 80)
        );
    };
    let total = meminfo_total(vm);
    let capacity = node["status"]["capacity"]["memory"].as_str().unwrap_or("");
    c.check(
        "the Node's memory capacity is the guest's MemTotal",
        capacity == format!("{}Ki", total / 1024),
        capacity,
    );
    let provider = node["spec"]["providerID"].as_str().unwrap_or("");
    c.check(
        "kind's --provider-id is the Node's spec.providerID",
        provider == "kind://qemu/kind/oxlet-vm",
        provider,
    );
    let verified = vm.ssh_ok("journalctl -u kubelet --no-pager | grep -cF 'verified the cgroup root \\\"/kubelet\\\"' || true");
    c.check(
        "the cgroup root's start-up check passed on kind's kubelet.slice",
        verified.trim() != "0",
        format!("{} lines", verified.trim()),
    );
    let bu = wait_running(vm, "bu");
    let be = wait_running(vm, "be");
    eprintln!("vm_cluster_node: step 1 ok: the Node is Ready, pods bu and be run");
    (bu, be)
}

/// The pod `name`'s entry in the summary.
fn summary_pod<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name)
}

fn has_psi(stats: &Value) -> bool {
    stats["psi"]["some"]["total"].is_u64() && stats["psi"]["full"]["total"].is_u64()
}

/// Step 2: the summary and cAdvisor's families from the v2 readers.
fn readers_on_v2(vm: &Vm, c: &mut Checks, bu_container: &str) {
    // The advisor reads usage each second and PSI every 10 s: wait for a round that has
    // pod bu's container with its pressure (the last summary read is checked if none).
    let mut last = Value::Null;
    let summary = poll(Duration::from_secs(120), || {
        let s: Value = serde_json::from_str(&read_only(vm, "/stats/summary")).ok()?;
        let psi = has_psi(&summary_pod(&s, "bu")?["containers"][0]["memory"]);
        last = s.clone();
        psi.then_some(s)
    })
    .unwrap_or(last);
    assert!(
        summary_pod(&summary, "bu").is_some(),
        "the summary never listed pod bu: {summary}"
    );
    let node_mem = &summary["node"]["memory"];
    c.check(
        "the node's memory on v2 (working set from /proc/meminfo and the root's memory.stat)",
        node_mem["workingSetBytes"].as_u64().unwrap_or(0) > 0
            && node_mem["availableBytes"].as_u64().unwrap_or(0) > 0,
        node_mem.to_string(),
    );
    let systems: Vec<&str> = summary["node"]["systemContainers"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
        .unwrap_or_default();
    c.check(
        "the node's system containers: pods (kubepods.slice), runtime (--runtime-cgroups), kubelet",
        ["pods", "runtime", "kubelet"]
            .iter()
            .all(|n| systems.contains(n)),
        systems.join(","),
    );
    c.check(
        "the node's PSI (cpu, memory, io) from /proc/pressure",
        has_psi(&summary["node"]["memory"]) && has_psi(&summary["node"]["io"]),
        summary["node"]["memory"]["psi"].to_string(),
    );
    let bu = summary_pod(&summary, "bu").unwrap();
    c.check(
        "pod bu's memory and PSI from its slice (cpu, memory, io)",
        bu["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0
            && has_psi(&bu["cpu"])
            && has_psi(&bu["memory"])
            && has_psi(&bu["io"]),
        bu["memory"].to_string(),
    );
    let main = &bu["containers"][0];
    c.check(
        "pod bu's container's memory and PSI from its scope",
        main["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0
            && has_psi(&main["cpu"])
            && has_psi(&main["memory"]),
        main["memory"].to_string(),
    );

    let metrics = read_only(vm, "/metrics/cadvisor");
    let id = bu_container.trim_start_matches("containerd://");
    let scope_id = format!("cri-containerd-{id}.scope\"");
    let rows: Vec<&str> = metrics.lines().filter(|l| l.contains(&scope_id)).collect();
    let family = |name: &str| rows.iter().any(|l| l.starts_with(&format!("{name}{{")));
    let id_label = rows
        .first()
        .and_then(|l| l.split("id=\"").nth(1))
        .and_then(|s| s.split('"').next())
        .unwrap_or("");
    c.check(
        "cAdvisor's id for pod bu's container is the systemd driver's scope path",
        id_label.starts_with(&format!("/{KUBEPODS}/kubelet-kubepods-burstable.slice/"))
            && id_label.ends_with(&format!("/cri-containerd-{id}.scope")),
        id_label,
    );
    let wanted = [
        "container_memory_working_set_bytes",
        "container_cpu_usage_seconds_total",
        "container_pressure_cpu_waiting_seconds_total",
        "container_pressure_memory_stalled_seconds_total",
        "container_pressure_io_waiting_seconds_total",
    ];
    let missing: Vec<&str> = wanted.iter().copied().filter(|f| !family(f)).collect();
    c.check(
        "/metrics/cadvisor has pod bu's container's usage and pressure families",
        missing.is_empty(),
        format!("missing {missing:?} among {} rows", rows.len()),
    );
    eprintln!("vm_cluster_node: step 2 done: the v2 readers checked");
}

/// kind's configuration without client certificate rotation, which needs a certificate
/// to rotate (the test apiserver's kubeconfig has a token).
fn cluster_config() -> String {
    let config = kind_config();
    assert!(config.contains("rotateCertificates: true\n"));
    config.replace("rotateCertificates: true\n", "rotateCertificates: false\n")
}

/// [`cluster_config`] with a hard `memory.available` threshold and a short pressure
/// transition period.
fn pressure_config(threshold_mib: u64) -> String {
    cluster_config()
        .replace(
            "evictionHard:\n",
            &format!("evictionHard:\n  memory.available: {threshold_mib}Mi\n"),
        )
        .replace(
            "evictionPressureTransitionPeriod: 0s",
            "evictionPressureTransitionPeriod: 30s",
        )
}

/// Step 3: a threshold just below what is free, then a pod that takes more than the gap.
fn memory_pressure(vm: &Vm, c: &mut Checks, bu: &str, be: &str) {
    let summary: Value = serde_json::from_str(&read_only(vm, "/stats/summary")).unwrap();
    let available = summary["node"]["memory"]["availableBytes"]
        .as_u64()
        .unwrap();
    let threshold_mib = (available >> 20).saturating_sub(200);
    eprintln!(
        "vm_cluster_node: available={}Mi, restarting oxlet with memory.available<{threshold_mib}Mi",
        available >> 20
    );
    vm.write_file(
        "/var/lib/kubelet/config.yaml",
        pressure_config(threshold_mib).as_bytes(),
        0o644,
    );
    vm.ssh_ok("systemctl restart kubelet");
    wait_healthy(vm);
    c.check(
        "the restarted oxlet adopts the pods (same containers)",
        running(vm, "bu").as_deref() == Some(bu) && running(vm, "be").as_deref() == Some(be),
        format!("bu={:?} be={:?}", running(vm, "bu"), running(vm, "be")),
    );
    let node = get_json(vm, &format!("node {NODE}")).unwrap_or_default();
    c.check(
        "no MemoryPressure before the hog",
        condition(&node, "MemoryPressure").as_deref() == Some("False"),
        format!("{:?}", condition(&node, "MemoryPressure")),
    );

    create(vm, "hog", &pod("hog", "", HOG));
    // The condition is True from the first cycle that sees the pressure until a
    // transition period after the last: watched while waiting for the eviction, as the
    // eviction may end the pressure before the hog's phase is seen.
    let mut pressure_seen = false;
    let evicted = poll(Duration::from_secs(300), || {
        if !pressure_seen {
            let n = get_json(vm, &format!("node {NODE}"))?;
            pressure_seen = condition(&n, "MemoryPressure").as_deref() == Some("True");
        }
        let p = get_json(vm, "pod hog")?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    let Some(hog) = evicted else {
        panic!(
            "pod hog was not evicted: {}\noxlet's log:\n{}",
            get_json(vm, "pod hog").unwrap_or_default(),
            kubelet_log(vm, 80)
        );
    };
    let message = hog["status"]["message"].as_str().unwrap_or("");
    c.check(
        "the hog is evicted with kubelet's reason and message",
        hog["status"]["reason"] == "Evicted"
            && message.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && message.contains("Container main was using"),
        format!("{} {message}", hog["status"]["reason"]),
    );
    c.check(
        "the Node's MemoryPressure went True",
        pressure_seen || wait_condition(vm, "MemoryPressure", "True", 30),
        "watched from the hog's creation",
    );
    c.check(
        "MemoryPressure is False again once the memory is back (after the 30 s transition period)",
        wait_condition(vm, "MemoryPressure", "False", 180),
        "polled 180 s",
    );
    c.check(
        "the pods that stayed within their requests' share were not evicted",
        running(vm, "bu").as_deref() == Some(bu) && running(vm, "be").as_deref() == Some(be),
        format!("bu={:?} be={:?}", running(vm, "bu"), running(vm, "be")),
    );
    eprintln!("vm_cluster_node: step 3 done: eviction on memory pressure checked");
}

/// Step 4: the pods deleted through the apiserver are stopped, finished (gone from the
/// apiserver) and their slices removed. It also spares the power-off: a container whose
/// PID 1 is a shell ignores the SIGTERM systemd sends at shutdown, and each would be
/// waited on for systemd's 90 s stop timeout.
/// In-place resize on v2 with the systemd driver: pod bu gets a CPU limit through
/// `pods/resize` (kubectl), its pod slice's `cpu.max` follows, the container keeps
/// running (same ID, no restart) and the status reports the new limit.
fn resize_on_v2(vm: &Vm, c: &mut Checks, bu_container: &str) {
    let patch = r#"{"spec":{"containers":[{"name":"main","resources":{"requests":{"memory":"16Mi","cpu":"100m"},"limits":{"cpu":"300m"}}}]}}"#;
    let out = kubectl(
        vm,
        &format!("patch pod bu --subresource resize -p '{patch}'"),
    );
    assert!(
        out.status.success(),
        "kubectl patch --subresource resize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut last = Value::Null;
    let reported = poll(Duration::from_secs(120), || {
        let p = get_json(vm, "pod bu")?;
        last = p.clone();
        let status = &p["status"]["containerStatuses"][0];
        let limit = status["resources"]["limits"]["cpu"].as_str()?;
        (limit == "300m"
            && p["status"]["conditions"]
                .as_array()?
                .iter()
                .all(|c| c["type"] != "PodResizeInProgress"))
        .then(|| status.clone())
    });
    c.check(
        "pod bu resized in place: the status reports the 300m limit, no restart",
        reported.as_ref().is_some_and(|s| {
            s["containerID"].as_str() == Some(bu_container) && s["restartCount"] == 0
        }),
        format!("{:?}", last["status"]),
    );
    let uid = last["metadata"]["uid"]
        .as_str()
        .unwrap_or("")
        .replace('-', "_");
    let cpu_max = vm.ssh_ok(&format!(
        "cat /sys/fs/cgroup/{KUBEPODS}/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{uid}.slice/cpu.max"
    ));
    c.check(
        "its pod slice's cpu.max follows (30000 100000)",
        cpu_max.trim() == "30000 100000",
        cpu_max.trim().to_string(),
    );
}

fn delete_pods(vm: &Vm, c: &mut Checks) {
    let out = kubectl(vm, "delete pod bu be hog --wait=false");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = poll(Duration::from_secs(180), || {
        let list = get_json(vm, "pods")?;
        list["items"].as_array()?.is_empty().then_some(())
    });
    c.check(
        "the pods deleted through the apiserver are finished by oxlet (gone from the apiserver)",
        gone.is_some(),
        format!("{:?}", get_json(vm, "pods").map(|l| l["items"].to_string())),
    );
    let slices = vm.ssh_ok(&format!(
        "find /sys/fs/cgroup/{KUBEPODS} -name '*-pod*.slice' | wc -l"
    ));
    c.check(
        "their pod slices are removed",
        slices.trim() == "0",
        format!("{} pod slices left", slices.trim()),
    );
}

#[test]
fn kind_node_in_cluster_mode_reads_v2_and_evicts_on_memory_pressure() {
    let started = Instant::now();
    let vm = boot();
    start_apiserver(&vm);
    create(
        &vm,
        "bu",
        &pod(
            "bu",
            "    resources:\n      requests: {memory: 16Mi}\n",
            "sleep 3600",
        ),
    );
    create(&vm, "be", &pod("be", "", "sleep 3600"));
    start_oxlet_with_dropin(&vm, CLUSTER_DROPIN, &cluster_config());

    let mut checks = Checks::new("vm_cluster_node");
    let (bu, be) = node_joins(&vm, &mut checks);
    readers_on_v2(&vm, &mut checks, &bu);
    resize_on_v2(&vm, &mut checks, &bu);
    memory_pressure(&vm, &mut checks, &bu, &be);
    delete_pods(&vm, &mut checks);
    vm.poweroff_and_report("vm_cluster_node", started);
    checks.finish();
}
