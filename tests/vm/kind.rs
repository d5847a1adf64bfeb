//! A kind node in the guest, shared by the VM tests: containerd 2.x from the share with
//! `SystemdCgroup = true`, and oxlet run as kind runs its kubelet (`kubelet.service` in
//! `kubelet.slice`, kubeadm's drop-in, kind's own drop-in that readies the cgroup root,
//! kind's `config.yaml` and flags), in static-pod mode.
//! Also the tests' small tools: checks reported together, polling, oxlet's `/pods`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{SHARE_MOUNT, Share, Vm};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kind");
pub const CTR: &str = "/mnt/oxlet/containerd/ctr";
/// kind's kubepods slice under `cgroupRoot: /kubelet`, as kubelet's systemd driver names it.
pub const KUBEPODS: &str = "kubelet.slice/kubelet-kubepods.slice";
/// Where the static pods' manifests go (kind's `staticPodPath`).
pub const MANIFESTS: &str = "/etc/kubernetes/manifests";

/// Runs oxlet instead of the kubelet, as docs/kind.md's drop-in does, in static-pod mode:
/// no kubeconfig (so no webhooks, and the secure port off: kind's config asks for
/// webhook authentication, which needs an apiserver), the read-only port on for `/pods`.
const OXLET_DROPIN: &str = r#"[Service]
Environment="KUBELET_KUBECONFIG_ARGS="
ExecStart=
ExecStart=/mnt/oxlet/oxlet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --cgroup-driver=systemd --port=0 --read-only-port=10255 -v=2
"#;

/// What kind's node image adds to `kubelet.service` (its `11-kind.conf`, the cgroup v2
/// half): before the kubelet starts, kind's `create-kubelet-cgroup-v2` gives the
/// kubelet's cgroup root every controller the host has. kubelet, and oxlet with it,
/// refuse a cgroup root without cpuset or hugetlb, which systemd alone never enables.
const KIND_DROPIN: &str = r#"[Service]
ExecStartPre=/bin/sh -euc "if [ -f /sys/fs/cgroup/cgroup.controllers ]; then /kind/bin/create-kubelet-cgroup-v2.sh; fi"
"#;

/// Where kind's drop-in runs its script from.
const KIND_CGROUP_SCRIPT_PATH: &str = "/kind/bin/create-kubelet-cgroup-v2.sh";

/// What kind's `create-kubelet-cgroup-v2` does, written for the guest: every controller
/// the root cgroup offers enabled for its children, then `/kubelet` (the cgroupfs
/// driver's root) and `/kubelet.slice` (the systemd driver's) made and enabling the
/// same. A controller the kernel refuses is said on stderr and left out, so oxlet's
/// refusal names it.
const KIND_CGROUP_SCRIPT: &str = r#"#!/bin/sh
set -eu
cg=/sys/fs/cgroup
enable_offered() {
    for c in $(cat "$1/cgroup.controllers"); do
        echo "+$c" > "$1/cgroup.subtree_control" || echo "cannot enable $c in $1" >&2
    done
}
enable_offered "$cg"
for d in kubelet kubelet.slice; do
    mkdir -p "$cg/$d"
    enable_offered "$cg/$d"
done
"#;

/// Checks that are reported together: each prints PASS or FAIL with what was seen.
pub struct Checks {
    test: &'static str,
    results: Vec<(String, bool, String)>,
}

impl Checks {
    /// No checks yet; `test` prefixes every line printed.
    pub fn new(test: &'static str) -> Checks {
        Checks {
            test,
            results: Vec::new(),
        }
    }

    pub fn check(&mut self, what: &str, ok: bool, seen: impl Into<String>) {
        let seen = seen.into();
        let verdict = if ok { "PASS" } else { "FAIL" };
        eprintln!("{}: {verdict} {what} seen={seen:?}", self.test);
        self.results.push((what.to_string(), ok, seen));
    }

    /// Fails the test when any check failed, listing them all.
    pub fn finish(self) {
        let failed: Vec<String> = self
            .results
            .iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(what, _, seen)| format!("  FAIL {what}: saw {seen:?}"))
            .collect();
        eprintln!(
            "{}: {} of {} checks passed",
            self.test,
            self.results.len() - failed.len(),
            self.results.len()
        );
        assert!(
            failed.is_empty(),
            "{} checks failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
}

/// Polls `f` every 2 s until it returns Some, for at most `limit`.
pub fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// What the guest shares: this build's oxlet, containerd 2.x and the test images.
pub fn share() -> Share {
    let repo = super::repo();
    let images = repo.join("target/test-images");
    let built = std::process::Command::new("bash")
        .arg(repo.join("scripts/build-images.sh"))
        .arg(&images)
        .output()
        .expect("cannot run scripts/build-images.sh");
    assert!(
        built.status.success(),
        "scripts/build-images.sh failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let runtimes = std::env::var_os("OXLET_RUNTIMES")
        .map_or_else(|| repo.join("target/runtimes"), PathBuf::from);
    let bin = runtimes.join("containerd-2/bin");
    let mut share = Share::new()
        .add("oxlet", env!("CARGO_BIN_EXE_oxlet"))
        .add("images", images);
    // containerd's own binaries only: the runc beside them is pointed at the host's
    // copy of sid's C library (scripts/fetch-runtimes.sh), so the guest runs Debian's.
    for file in ["containerd", "containerd-shim-runc-v2", "ctr"] {
        share = share.add(&format!("containerd/{file}"), bin.join(file));
    }
    share
}

/// The guest is what a kind node is: systemd as PID 1, cgroup v2 alone.
pub fn assert_kind_shaped(vm: &Vm) {
    let fs = vm.ssh_ok("stat -fc %T /sys/fs/cgroup");
    assert_eq!(fs.trim(), "cgroup2fs", "the guest's /sys/fs/cgroup");
    let init = vm.ssh_ok("readlink /proc/1/exe");
    assert!(init.contains("systemd"), "PID 1 is {init}");
    let version = vm.ssh_ok("systemctl --version | head -n1");
    eprintln!(
        "vm: kind: the guest is kind-shaped: cgroup2fs, PID 1 {}, {}",
        init.trim(),
        version.trim()
    );
}

/// containerd 2.x active from the share with the systemd cgroup driver; the test images
/// imported into the CRI namespace.
pub fn start_containerd(vm: &Vm) {
    let mut share_retried = false;
    let active = poll(Duration::from_secs(240), || {
        let out = vm.ssh("systemctl is-active containerd");
        if String::from_utf8_lossy(&out.stdout).trim() == "active" {
            return Some(());
        }
        // The share is the test bed's, not what is under test: a 9p mount that failed at
        // boot (seen once on a loaded host) is said and tried once more, and containerd,
        // which needs it, with it.
        if !share_retried
            && vm
                .ssh("systemctl is-failed --quiet mnt-oxlet.mount")
                .status
                .success()
        {
            share_retried = true;
            eprintln!(
                "vm: kind: the share's mount failed at boot; once more:\n{}",
                vm.ssh_ok("journalctl -b -u mnt-oxlet.mount --no-pager | tail -n 20; dmesg | grep -i 9p | tail -n 10; true")
            );
            vm.ssh("systemctl reset-failed mnt-oxlet.mount containerd; systemctl start --no-block containerd");
        }
        None
    });
    if active.is_none() {
        panic!(
            "containerd did not become active:\n{}",
            vm.ssh_ok("systemctl status containerd mnt-oxlet.mount --no-pager; journalctl -b -u containerd -u mnt-oxlet.mount --no-pager | tail -n 40")
        );
    }
    let version = vm.ssh_ok(&format!("{CTR} version"));
    assert!(
        version.contains("Version:  2.") || version.contains("Version: 2."),
        "{version}"
    );
    let dump = vm.ssh_ok(
        "/mnt/oxlet/containerd/containerd --config /etc/containerd/config.toml config dump",
    );
    assert!(dump.contains("SystemdCgroup = true"), "{dump}");
    for tar in ["oxlet-pause.tar", "oxlet-busybox.tar"] {
        vm.ssh_ok(&format!(
            "{CTR} -n k8s.io images import {SHARE_MOUNT}/images/{tar}"
        ));
    }
    eprintln!("vm: kind: containerd 2.x active (SystemdCgroup = true), images imported");
}

/// kind's kubelet configuration (`/var/lib/kubelet/config.yaml`), for a test to change.
pub fn kind_config() -> String {
    std::fs::read_to_string(format!("{DATA}/config.yaml")).unwrap()
}

/// A booted guest that is a kind node, containerd running with the test images.
pub fn boot_kind_node() -> Vm {
    let vm = Vm::boot(&share());
    assert_kind_shaped(&vm);
    start_containerd(&vm);
    vm
}

/// [`start_oxlet_with_dropin`] with the VM tests' usual drop-in (static-pod mode, the
/// systemd driver, the read-only port).
pub fn start_oxlet_as_kubelet(vm: &Vm, config: &str) {
    start_oxlet_with_dropin(vm, OXLET_DROPIN, config);
}

/// kind's kubelet files in place (the node IP and provider ID are the guest's, the
/// kubelet configuration `config`, kind's own drop-in and the cgroup script it runs),
/// oxlet's drop-in `dropin`, then `systemctl start kubelet`, waiting for healthz.
pub fn start_oxlet_with_dropin(vm: &Vm, dropin: &str, config: &str) {
    let kind = |f: &str| std::fs::read(format!("{DATA}/{f}")).unwrap();
    vm.write_file(
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        &kind("10-kubeadm.conf"),
        0o644,
    );
    vm.write_file(
        "/etc/systemd/system/kubelet.service.d/11-kind.conf",
        KIND_DROPIN.as_bytes(),
        0o644,
    );
    vm.write_file(
        KIND_CGROUP_SCRIPT_PATH,
        KIND_CGROUP_SCRIPT.as_bytes(),
        0o755,
    );
    vm.write_file(
        "/etc/systemd/system/kubelet.service.d/20-oxlet.conf",
        dropin.as_bytes(),
        0o644,
    );
    vm.write_file("/etc/default/kubelet", &kind("default-kubelet"), 0o644);
    let flags = String::from_utf8(kind("kubeadm-flags.env"))
        .unwrap()
        .replace("--node-ip=172.18.0.2", "--node-ip=10.0.2.15")
        .replace(
            "kind://docker/kind/kind-control-plane",
            "kind://qemu/kind/oxlet-vm",
        );
    vm.write_file(
        "/var/lib/kubelet/kubeadm-flags.env",
        flags.as_bytes(),
        0o644,
    );
    vm.write_file("/var/lib/kubelet/config.yaml", config.as_bytes(), 0o644);
    vm.ssh_ok(&format!(
        "mkdir -p {MANIFESTS} && systemctl daemon-reload && systemctl start kubelet"
    ));
    wait_healthy(vm);
    let cgroup = vm.ssh_ok("cat /proc/$(systemctl show -p MainPID --value kubelet)/cgroup");
    assert_eq!(
        cgroup.trim(),
        "0::/kubelet.slice/kubelet.service",
        "oxlet's own cgroup"
    );
    eprintln!("vm: kind: oxlet runs as kubelet.service in kubelet.slice, healthz ok");
}

/// Waits (up to 5 minutes) for oxlet's healthz on 10248 to answer `ok`.
pub fn wait_healthy(vm: &Vm) {
    let healthy = poll(Duration::from_secs(300), || {
        let out = vm.ssh("busybox wget -qO- http://127.0.0.1:10248/healthz");
        (String::from_utf8_lossy(&out.stdout).trim() == "ok").then_some(())
    });
    if healthy.is_none() {
        panic!(
            "oxlet (kubelet.service) is not healthy:\n{}",
            kubelet_log(vm, 60)
        );
    }
}

/// The last `lines` of oxlet's journal.
pub fn kubelet_log(vm: &Vm, lines: usize) -> String {
    String::from_utf8_lossy(
        &vm.ssh(&format!(
            "journalctl -u kubelet --no-pager | tail -n {lines}"
        ))
        .stdout,
    )
    .into_owned()
}

/// The read-only port's pod list.
pub fn pods(vm: &Vm) -> Option<serde_json::Value> {
    let out = vm.ssh("busybox wget -qO- http://127.0.0.1:10255/pods");
    serde_json::from_slice(&out.stdout).ok()
}

/// The pod called `name` in `/pods` (a static pod's name ends in `-oxlet-vm`).
pub fn find_pod(list: &serde_json::Value, name: &str) -> Option<serde_json::Value> {
    list["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == name)
        .cloned()
}

/// `LoadState=… ActiveState=…` of a unit, as systemd knows it.
pub fn unit_state(vm: &Vm, unit: &str) -> String {
    let out = vm.ssh_ok(&format!("systemctl show -p LoadState,ActiveState {unit}"));
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The static pod `name` (with its `-oxlet-vm` suffix), once its first container runs:
/// its UID and container ID. Waits up to 8 minutes (first pods are slow under emulation).
pub fn wait_running(vm: &Vm, name: &str) -> (String, String) {
    let found = poll(Duration::from_secs(480), || {
        let pod = find_pod(&pods(vm)?, name)?;
        let status = &pod["status"]["containerStatuses"][0];
        if pod["status"]["phase"] != "Running" || status["state"]["running"].is_null() {
            return None;
        }
        let id = status["containerID"]
            .as_str()?
            .strip_prefix("containerd://")?;
        Some((pod["metadata"]["uid"].as_str()?.to_string(), id.to_string()))
    });
    found.unwrap_or_else(|| {
        panic!(
            "the static pod {name} did not become Running; /pods: {}\noxlet's log:\n{}",
            pods(vm).map(|p| p.to_string()).unwrap_or_default(),
            kubelet_log(vm, 60)
        )
    })
}

/// The cgroup of pod `uid` as kubelet's systemd driver names it below kind's
/// kubepods: `qos` is `guaranteed`, `burstable` or `besteffort`.
pub fn pod_slice(qos: &str, uid: &str) -> String {
    let uid = uid.replace('-', "_");
    match qos {
        "guaranteed" => format!("/sys/fs/cgroup/{KUBEPODS}/kubelet-kubepods-pod{uid}.slice"),
        q => format!(
            "/sys/fs/cgroup/{KUBEPODS}/kubelet-kubepods-{q}.slice/kubelet-kubepods-{q}-pod{uid}.slice"
        ),
    }
}

/// `files` of a container's scope below `slice` (`cri-containerd-<id>.scope`) while a
/// process named `comm` runs in it (so not the sandbox's `pause`, nor runc's init, which
/// sets the limits before it execs the command), caught by a tight loop in the guest:
/// a container that is OOM-killed lives for a second. `<scope> file=value ...`, or None
/// after `limit_secs`.
pub fn running_container_files(
    vm: &Vm,
    slice: &str,
    comm: &str,
    files: &[&str],
    limit_secs: u64,
) -> Option<String> {
    let files = files.join(" ");
    let script = format!(
        r#"end=$(( $(date +%s) + {limit_secs} ))
while [ "$(date +%s)" -lt "$end" ]; do
  for d in {slice}/cri-containerd-*.scope; do
    [ -d "$d" ] || continue
    found=0
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do
      [ "$(cat /proc/$p/comm 2>/dev/null)" = '{comm}' ] && found=1
    done
    [ "$found" = 1 ] || continue
    out=${{d##*/}}; ok=1
    for f in {files}; do v=$(cat "$d/$f" 2>/dev/null) || ok=0; out="$out $f=$v"; done
    [ "$ok" = 1 ] && {{ echo "$out"; exit 0; }}
  done
  sleep 0.05
done
exit 1"#
    );
    let out = vm.ssh_with_timeout(&script, Duration::from_secs(limit_secs + 60));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A `key value` line's value in a cgroup file such as `memory.events`.
pub fn events_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
}
