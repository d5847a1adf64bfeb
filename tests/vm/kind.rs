//! kind's node in the guest, shared by the VM tests: the share (this build's oxlet,
//! containerd 2.x, the test images), containerd started, and oxlet run as kind runs its
//! kubelet (`kubelet.service`, kubeadm's drop-in, kind's files) with a test's own drop-in
//! and configuration.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{SHARE_MOUNT, Share, Vm};

/// kind's kubelet files (`docs/kind.md`).
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kind");
/// containerd 2.x's `ctr` in the share.
const CTR: &str = "/mnt/oxlet/containerd/ctr";

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
    Share::new()
        .add("oxlet", env!("CARGO_BIN_EXE_oxlet"))
        .add("containerd", runtimes.join("containerd-2/bin"))
        .add("images", images)
}

/// A booted guest that is a kind node, containerd running with the test images.
pub fn boot_kind_node() -> Vm {
    let vm = Vm::boot(&share());
    assert_kind_shaped(&vm);
    start_containerd(&vm);
    vm
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
    let active = poll(Duration::from_secs(240), || {
        let out = vm.ssh("systemctl is-active containerd");
        (String::from_utf8_lossy(&out.stdout).trim() == "active").then_some(())
    });
    if active.is_none() {
        panic!(
            "containerd did not become active:\n{}",
            vm.ssh_ok("systemctl status containerd --no-pager; journalctl -u containerd --no-pager | tail -n 40")
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

/// kind's kubelet `config.yaml`.
pub fn config() -> Vec<u8> {
    std::fs::read(format!("{DATA}/config.yaml")).unwrap()
}

/// kind's kubelet files in place (the node IP and provider ID are the guest's), the
/// oxlet drop-in `dropin` and the kubelet configuration `config`, then
/// `systemctl start kubelet`, waiting for healthz.
pub fn start_oxlet_as_kubelet(vm: &Vm, dropin: &str, config: &[u8]) {
    let kind = |f: &str| std::fs::read(format!("{DATA}/{f}")).unwrap();
    vm.write_file(
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        &kind("10-kubeadm.conf"),
        0o644,
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
    vm.write_file("/var/lib/kubelet/config.yaml", config, 0o644);
    vm.ssh_ok(
        "mkdir -p /etc/kubernetes/manifests && systemctl daemon-reload && systemctl start kubelet",
    );
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
    let cgroup = vm.ssh_ok("cat /proc/$(systemctl show -p MainPID --value kubelet)/cgroup");
    assert_eq!(
        cgroup.trim(),
        "0::/kubelet.slice/kubelet.service",
        "oxlet's own cgroup"
    );
    eprintln!("vm: kind: oxlet runs as kubelet.service in kubelet.slice, healthz ok");
}

pub fn kubelet_log(vm: &Vm, lines: usize) -> String {
    String::from_utf8_lossy(
        &vm.ssh(&format!(
            "journalctl -u kubelet --no-pager | tail -n {lines}"
        ))
        .stdout,
    )
    .into_owned()
}
