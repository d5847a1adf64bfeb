//! Swap on a kind node, for real: the guest of `tests/vm_kind_node.rs` (Debian 12,
//! systemd 252, cgroup v2, containerd 2.x with `SystemdCgroup = true`) with a swap file
//! on before oxlet starts as kind's `kubelet.service` with `memorySwap.swapBehavior:
//! LimitedSwap`. kubelet counts every static pod as critical and gives critical pods no
//! swap, so the pods that may swap must come from an apiserver: oxlet runs in cluster
//! mode against the in-repo test apiserver in this process, which the guest reaches
//! through an ssh remote forward (the guest's network reaches nothing else).
//!
//! - The Node reports `nodeInfo.swap.capacity` = the guest's SwapTotal.
//! - A Burstable API pod's container gets `memory.swap.max` = kubelet's formula
//!   (its memory request / MemTotal × SwapTotal, in the kernel's whole pages); a
//!   Guaranteed one, and a Burstable static (critical) one, get 0.
//! - Every container scope has `memory.oom.group` 1; a Burstable API pod whose memory
//!   request equals its limit gets no swap, so with swap on it is still OOM-killed,
//!   `OOMKilled` 137, and its slice's `memory.events` counts `oom_group_kill`.
//! - `/stats/summary` on the read-only port: the node's swap (used + available =
//!   SwapTotal) and each container's `swapUsageBytes`.
//!
//! Run: `bash scripts/vm/build-image.sh && cargo test --test vm_node_swap -- --nocapture`.

mod vm;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};
use testapi::TestApiServer;
use vm::Vm;
use vm::kind::{
    Checks, MANIFESTS, boot_kind_node, events_field, find_pod, kind_config, kubelet_log, pod_slice,
    pods, poll, running_container_files, start_oxlet_with_dropin, wait_running,
};

/// The guest's node name (its host name).
const NODE: &str = "oxlet-vm";
/// Where the test apiserver's kubeconfig goes in the guest.
const KUBECONFIG: &str = "/etc/kubernetes/oxlet-test-api.conf";
/// The swap file: small, but enough for the formula to give whole pages.
const SWAP_MIB: u64 = 256;
/// The Burstable pods' memory request and limit.
const REQUEST: &str = "64Mi";
const REQUEST_BYTES: u64 = 64 << 20;

/// kind's kubelet in cluster mode: the test apiserver's kubeconfig, the secure port
/// off (kind's webhook authentication is not what this test is about), the read-only
/// port on, `-v=4` for the swap decisions of every container.
fn dropin() -> String {
    format!(
        r#"[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig={KUBECONFIG}"
ExecStart=
ExecStart=/mnt/oxlet/oxlet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --cgroup-driver=systemd --port=0 --read-only-port=10255 -v=4
"#
    )
}

/// A pod bound to the guest: one container with `resources`, running `command`.
fn api_pod(name: &str, container: &str, resources: Value, command: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": container,
                "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", command],
                "resources": resources,
            }],
        },
    }))
    .unwrap()
}

/// A static pod that may not swap (critical), though Burstable like `burst`.
fn static_manifest() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: staticburst
  namespace: default
spec:
  containers:
  - name: idle
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    resources:
      requests: {{memory: {REQUEST}}}
      limits: {{memory: 128Mi}}
"#
    )
}

/// A swap file on before oxlet starts (fallocate, else dd); SwapTotal and MemTotal
/// in bytes as the guest reports them.
fn swap_on(vm: &Vm) -> (u64, u64) {
    vm.ssh_ok(&format!(
        "(fallocate -l {SWAP_MIB}M /swapfile || dd if=/dev/zero of=/swapfile bs=1M count={SWAP_MIB}) \
         && chmod 600 /swapfile && mkswap /swapfile >/dev/null && swapon /swapfile"
    ));
    let meminfo = vm.ssh_ok("cat /proc/meminfo");
    let kb = |key: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
            .map(|v| v * 1024)
            .unwrap_or_else(|| panic!("no {key} in the guest's /proc/meminfo"))
    };
    let (swap, mem) = (kb("SwapTotal:"), kb("MemTotal:"));
    eprintln!("vm_node_swap: swap on: SwapTotal={swap} MemTotal={mem}");
    (swap, mem)
}

/// kubelet's `calcSwapForBurstablePods` in float64, as the kernel stores it: whole
/// 4 KiB pages.
fn expected_swap_max(request: u64, mem: u64, swap: u64) -> u64 {
    let bytes = (request as f64 / mem as f64 * swap as f64) as u64;
    bytes / 4096 * 4096
}

/// The test apiserver on a loopback port, reachable from the guest at the same port.
fn apiserver(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> TestApiServer {
    rt.block_on(TestApiServer::start(dir))
        .expect("the test apiserver did not start")
}

/// oxlet in cluster mode, LimitedSwap, once the guest reaches the apiserver.
fn start_oxlet(vm: &Vm, server: &TestApiServer) {
    let port = server.addr().port();
    let ok = poll(Duration::from_secs(60), || {
        let out = vm.ssh(&format!(
            "busybox wget -qO- http://127.0.0.1:{port}/version"
        ));
        out.status.success().then_some(())
    });
    assert!(ok.is_some(), "the guest does not reach the test apiserver");
    let kubeconfig = std::fs::read(server.kubeconfig()).unwrap();
    vm.write_file(KUBECONFIG, &kubeconfig, 0o600);
    let config =
        kind_config().replace("memorySwap: {}", "memorySwap:\n  swapBehavior: LimitedSwap");
    assert!(config.contains("swapBehavior: LimitedSwap"));
    start_oxlet_with_dropin(vm, &dropin(), &config);
}

/// The swap and OOM group files of a running pod's one container (its `sh`).
fn limits_of(vm: &Vm, pod: &str, qos: &str) -> (String, String) {
    let (uid, _) = wait_running(vm, pod);
    let files = ["memory.swap.max", "memory.oom.group"];
    let seen = running_container_files(vm, &pod_slice(qos, &uid), "sh", &files, 120);
    (uid, seen.unwrap_or_else(|| "not found".into()))
}

/// The swap limits of the three long-running pods, and the Node's swap capacity.
fn check_limits(vm: &Vm, server: &TestApiServer, c: &mut Checks, swap: u64, mem: u64) {
    let node = poll(Duration::from_secs(120), || {
        server
            .get::<Node>("", NODE)
            .ok()
            .flatten()?
            .status?
            .node_info
    });
    let capacity = node.and_then(|i| i.swap?.capacity);
    c.check(
        "the Node's status.nodeInfo.swap.capacity is the guest's SwapTotal",
        capacity == i64::try_from(swap).ok(),
        format!("{capacity:?} want {swap}"),
    );
    let want = expected_swap_max(REQUEST_BYTES, mem, swap);
    let (_, burst) = limits_of(vm, "burst", "burstable");
    c.check(
        "a Burstable API pod's container: memory.swap.max is its request's share of the swap",
        burst.contains(&format!(" memory.swap.max={want} ")) && want > 0,
        format!("{burst} want memory.swap.max={want}"),
    );
    c.check(
        "the Burstable container's scope has memory.oom.group 1",
        burst.ends_with(" memory.oom.group=1"),
        burst.clone(),
    );
    let (_, guaranteed) = limits_of(vm, "guaranteed", "guaranteed");
    c.check(
        "a Guaranteed API pod's container: memory.swap.max 0",
        guaranteed.contains(" memory.swap.max=0 ") && guaranteed.ends_with("oom.group=1"),
        guaranteed,
    );
    let (_, critical) = limits_of(vm, "staticburst-oxlet-vm", "burstable");
    c.check(
        "a Burstable static pod (critical): memory.swap.max 0",
        critical.contains(" memory.swap.max=0 ") && critical.ends_with("oom.group=1"),
        critical,
    );
    let log = String::from_utf8_lossy(&vm.ssh("journalctl -u kubelet --no-pager -o cat").stdout)
        .into_owned();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or("")
            .to_string()
    };
    let granted = line("container may swap");
    c.check(
        "oxlet logged the swap it gave the Burstable container (-v=2)",
        granted.contains("default/burst") && granted.contains("LimitedSwap"),
        granted,
    );
    let refused = line("the pod is critical");
    c.check(
        "oxlet logged why the static pod gets no swap (-v=4)",
        refused.contains("staticburst-oxlet-vm"),
        refused,
    );
}

/// The OOM pod: no swap (request = limit) so still OOM-killed with swap on, as a group.
fn check_oom(vm: &Vm, c: &mut Checks) {
    // The reason may read `Error` until containerd's TaskOOM event, which can come a
    // moment after the exit, is read at the next sync: wait for it to settle.
    let status = poll(Duration::from_secs(480), || {
        let pod = find_pod(&pods(vm)?, "oom")?;
        let s = pod["status"]["containerStatuses"][0].clone();
        let uid = pod["metadata"]["uid"].as_str()?.to_string();
        (s["restartCount"].as_u64()? >= 1 && s["lastState"]["terminated"]["reason"] == "OOMKilled")
            .then_some((uid, s["lastState"]["terminated"].clone()))
    });
    let Some((uid, last)) = status else {
        panic!(
            "the OOM pod never restarted with lastState OOMKilled; /pods: {}\noxlet's log:\n{}",
            pods(vm).map(|p| p.to_string()).unwrap_or_default(),
            kubelet_log(vm, 60)
        );
    };
    c.check(
        "with swap on, the OOM pod is still OOMKilled with exit code 137",
        last["reason"] == "OOMKilled" && last["exitCode"] == 137,
        last.to_string(),
    );
    let slice = pod_slice("burstable", &uid);
    let files = ["memory.swap.max", "memory.oom.group"];
    let seen = running_container_files(vm, &slice, "sh", &files, 240).unwrap_or_default();
    c.check(
        "the OOM pod's container: memory.swap.max 0 (request = limit), memory.oom.group 1",
        seen.contains(" memory.swap.max=0 ") && seen.ends_with(" memory.oom.group=1"),
        seen,
    );
    let events =
        String::from_utf8_lossy(&vm.ssh(&format!("cat {slice}/memory.events")).stdout).into_owned();
    c.check(
        "the OOM pod's slice counts group OOM kills (memory.events oom_group_kill)",
        events_field(&events, "oom_group_kill").is_some_and(|n| n >= 1),
        events.split_whitespace().collect::<Vec<_>>().join(" "),
    );
}

/// `/stats/summary` on the read-only port: the node's and the containers' swap.
fn check_summary(vm: &Vm, c: &mut Checks, swap: u64) {
    let summary = poll(Duration::from_secs(120), || {
        let out = vm.ssh("busybox wget -qO- http://127.0.0.1:10255/stats/summary");
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let burst = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "burst")?
            .clone();
        (!v["node"]["swap"].is_null() && !burst["containers"][0]["swap"].is_null())
            .then_some((v["node"]["swap"].clone(), burst))
    });
    let Some((node, burst)) = summary else {
        c.check(
            "/stats/summary has the node's and the pods' swap",
            false,
            "none",
        );
        return;
    };
    let used = node["swapUsageBytes"].as_u64();
    let available = node["swapAvailableBytes"].as_u64();
    c.check(
        "/stats/summary node swap: usage + available = SwapTotal",
        used.zip(available).is_some_and(|(u, a)| u + a == swap),
        node.to_string(),
    );
    let cs = &burst["containers"][0]["swap"];
    c.check(
        "/stats/summary: the Burstable container's swapUsageBytes, and what is left of its limit",
        cs["swapUsageBytes"].as_u64().is_some() && cs["swapAvailableBytes"].as_u64().is_some(),
        cs.to_string(),
    );
    c.check(
        "/stats/summary: the pod's swapUsageBytes",
        burst["swap"]["swapUsageBytes"].as_u64().is_some(),
        burst["swap"].to_string(),
    );
}

#[test]
fn kind_node_limited_swap_and_group_oom_kills() {
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = apiserver(&rt, dir.path());
    let vm = boot_kind_node();
    let (swap, mem) = swap_on(&vm);
    let forward = vm.forward_to_host(server.addr().port());
    start_oxlet(&vm, &server);
    let burstable = json!({"requests": {"memory": REQUEST}, "limits": {"memory": "128Mi"}});
    let guaranteed = json!({"requests": {"cpu": "100m", "memory": REQUEST},
                            "limits": {"cpu": "100m", "memory": REQUEST}});
    let oom = json!({"requests": {"memory": "32Mi"}, "limits": {"memory": "32Mi"}});
    // PID 1 of a container ignores SIGTERM without a handler: the trap lets the
    // power-off stop it at once rather than after systemd's 90 s.
    let idle = "trap 'exit 0' TERM; while :; do sleep 1; done";
    for pod in [
        api_pod("burst", "work", burstable, idle),
        api_pod("guaranteed", "work", guaranteed, idle),
        api_pod(
            "oom",
            "hog",
            oom,
            "x=0123456789abcdef; while :; do x=\"$x$x\"; done",
        ),
    ] {
        server.put(&pod).unwrap();
    }
    vm.write_file(
        &format!("{MANIFESTS}/staticburst.yaml"),
        static_manifest().as_bytes(),
        0o644,
    );
    let mut checks = Checks::new("vm_node_swap");
    check_limits(&vm, &server, &mut checks, swap, mem);
    check_oom(&vm, &mut checks);
    check_summary(&vm, &mut checks, swap);
    // No power-off: pods still run, and the guest's power-off then waits 90 s on
    // their runtime's processes; nothing here is about shutting down.
    eprintln!(
        "vm_node_swap: boot_to_ssh={:?} total={:?}",
        vm.boot_time,
        started.elapsed()
    );
    drop(vm);
    drop(forward);
    checks.finish();
}
