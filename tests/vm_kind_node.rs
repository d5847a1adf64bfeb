//! oxlet on a kind-shaped node, for real: a Debian 12 guest under qemu with systemd 252
//! as PID 1 on cgroup v2, containerd 2.x with `SystemdCgroup = true`, and oxlet run as
//! kind runs its kubelet (`kubelet.service` in `kubelet.slice`, kubeadm's drop-in, kind's
//! `config.yaml`: `cgroupDriver: systemd`, `cgroupRoot: /kubelet`), in static-pod mode
//! (no kubeconfig). The host machines are cgroup v1 without systemd, so this is the one
//! place where the systemd driver meets a real systemd (`tests/vm/mod.rs`).
//!
//! One boot serves every step (a boot costs minutes of emulation). Preconditions (the
//! guest's shape, containerd, oxlet up, the pod Running, the pod gone) stop the test at
//! once; the cgroup and unit checks are all run and reported together, each as PASS or
//! FAIL, so one run shows everything the systemd driver still gets wrong.
//!
//! Run: `bash scripts/vm/build-image.sh && cargo test --test vm_kind_node -- --nocapture`.

mod vm;

use std::time::{Duration, Instant};

use vm::Vm;
use vm::kind::{
    Checks, KUBEPODS, MANIFESTS, assert_kind_shaped, find_pod, kind_config, kubelet_log, pods,
    poll, share, start_containerd, start_oxlet_as_kubelet, unit_state, wait_running,
};

/// The static pod: Guaranteed, 64Mi and 250m.
const MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: guaranteed
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      requests: {cpu: 250m, memory: 64Mi}
      limits: {cpu: 250m, memory: 64Mi}
"#;

/// The same limits at pod level (`spec.resources`, beta and on since 1.34): the
/// container sets none, the pod slice gets them all the same.
const POD_LEVEL_MANIFEST: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: podlevel
  namespace: default
spec:
  terminationGracePeriodSeconds: 1
  resources:
    limits: {cpu: 250m, memory: 64Mi}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"#;

/// What kubelet's systemd driver guarantees once the pod runs: the container's scope
/// below the pod slice, every slice a unit systemd started, the pod slice's limits in
/// the files and as unit properties, and kept across a `daemon-reload`.
fn check_cgroups(vm: &Vm, c: &mut Checks, pod_slice: &str, container: &str) {
    let scope = format!("cri-containerd-{container}.scope");
    let found = vm.ssh_ok(&format!("find /sys/fs/cgroup -type d -name {scope}"));
    let want = format!("/sys/fs/cgroup/{pod_slice}/{scope}");
    c.check(
        "the container's scope is below the pod slice",
        found.trim() == want,
        found.trim(),
    );
    let scope_state = unit_state(vm, &scope);
    c.check(
        "the container's scope is a running unit",
        scope_state == "LoadState=loaded ActiveState=active",
        scope_state,
    );
    let pod_unit = pod_slice.rsplit('/').next().unwrap().to_string();
    for unit in [
        "kubelet.slice",
        "kubelet-kubepods.slice",
        "kubelet-kubepods-burstable.slice",
        "kubelet-kubepods-besteffort.slice",
        &pod_unit,
    ] {
        let state = unit_state(vm, unit);
        c.check(
            &format!("{unit} is a unit systemd started"),
            state == "LoadState=loaded ActiveState=active",
            state,
        );
    }
    check_limits(vm, c, pod_slice, &pod_unit, "");
    check_allocatable(vm, c, "");
    vm.ssh_ok("systemctl daemon-reload");
    check_limits(
        vm,
        c,
        pod_slice,
        &pod_unit,
        " after systemctl daemon-reload",
    );
    check_allocatable(vm, c, " after systemctl daemon-reload");
}

/// kubepods' `memory.max` is node allocatable (kind's `enforceNodeAllocatable` default,
/// `pods`), never `max`.
fn check_allocatable(vm: &Vm, c: &mut Checks, when: &str) {
    let mem = vm.ssh(&format!("cat /sys/fs/cgroup/{KUBEPODS}/memory.max"));
    let mem = String::from_utf8_lossy(&mem.stdout).trim().to_string();
    c.check(
        &format!("kubepods slice memory.max is node allocatable{when}"),
        mem.parse::<u64>().is_ok(),
        mem,
    );
}

/// The pod slice's `memory.max` and `cpu.max`, and systemd's `MemoryMax` and
/// `CPUQuotaPerSecUSec` for it (kubelet sets the properties, so systemd keeps the files).
fn check_limits(vm: &Vm, c: &mut Checks, pod_slice: &str, unit: &str, when: &str) {
    let dir = format!("/sys/fs/cgroup/{pod_slice}");
    let mem = vm.ssh(&format!("cat {dir}/memory.max"));
    let mem = String::from_utf8_lossy(&mem.stdout).trim().to_string();
    c.check(
        &format!("pod slice memory.max is 67108864{when}"),
        mem == "67108864",
        mem,
    );
    let cpu = vm.ssh(&format!("cat {dir}/cpu.max"));
    let cpu = String::from_utf8_lossy(&cpu.stdout).trim().to_string();
    c.check(
        &format!("pod slice cpu.max is 25000 100000{when}"),
        cpu == "25000 100000",
        cpu,
    );
    let props = vm.ssh_ok(&format!(
        "systemctl show -p MemoryMax,CPUQuotaPerSecUSec {unit}"
    ));
    let props = props.split_whitespace().collect::<Vec<_>>().join(" ");
    c.check(
        &format!("pod slice unit has MemoryMax=67108864 CPUQuotaPerSecUSec=250ms{when}"),
        props.contains("MemoryMax=67108864") && props.contains("CPUQuotaPerSecUSec=250ms"),
        props,
    );
}

/// The manifest removed: the pod leaves `/pods`, then its slice leaves systemd and the
/// cgroup tree.
fn remove_pod(vm: &Vm, c: &mut Checks, pod_slice: &str) {
    vm.ssh_ok(&format!("rm {MANIFESTS}/guaranteed.yaml"));
    let gone = poll(Duration::from_secs(300), || {
        let list = pods(vm)?;
        find_pod(&list, "guaranteed-oxlet-vm")
            .is_none()
            .then_some(())
    });
    if gone.is_none() {
        panic!(
            "the pod is still listed after its manifest went:\n{}",
            kubelet_log(vm, 40)
        );
    }
    let dir = format!("/sys/fs/cgroup/{pod_slice}");
    let removed = poll(Duration::from_secs(120), || {
        (!vm.ssh(&format!("test -d {dir}")).status.success()).then_some(())
    });
    c.check(
        "the pod slice's cgroup is removed with the pod",
        removed.is_some(),
        if removed.is_some() {
            "gone"
        } else {
            "still there"
        },
    );
    let unit = pod_slice.rsplit('/').next().unwrap();
    let state = unit_state(vm, unit);
    c.check(
        "the pod slice unit is no longer active",
        !state.contains("ActiveState=active") && !state.contains("ActiveState=deactivating"),
        state,
    );
}

#[test]
fn kind_node_runs_a_static_pod_with_the_systemd_driver() {
    let started = Instant::now();
    let vm = Vm::boot(&share());
    assert_kind_shaped(&vm);
    start_containerd(&vm);
    start_oxlet_as_kubelet(&vm, &kind_config());

    vm.write_file(
        &format!("{MANIFESTS}/guaranteed.yaml"),
        MANIFEST.as_bytes(),
        0o644,
    );
    let (uid, container) = wait_running(&vm, "guaranteed-oxlet-vm");
    eprintln!("vm_kind_node: step 4 ok: the static pod runs podUID={uid} container={container}");

    let pod_slice = format!(
        "{KUBEPODS}/kubelet-kubepods-pod{}.slice",
        uid.replace('-', "_")
    );
    let mut checks = Checks::new("vm_kind_node");
    check_cgroups(&vm, &mut checks, &pod_slice, &container);
    eprintln!("vm_kind_node: step 5 done: cgroups and units checked");
    remove_pod(&vm, &mut checks, &pod_slice);
    eprintln!("vm_kind_node: step 6 done: the manifest removed");

    vm.write_file(
        &format!("{MANIFESTS}/podlevel.yaml"),
        POD_LEVEL_MANIFEST.as_bytes(),
        0o644,
    );
    let (uid, _) = wait_running(&vm, "podlevel-oxlet-vm");
    let unit = format!("kubelet-kubepods-pod{}.slice", uid.replace('-', "_"));
    let slice = format!("{KUBEPODS}/{unit}");
    check_limits(&vm, &mut checks, &slice, &unit, " (pod-level resources)");
    eprintln!("vm_kind_node: step 7 done: pod-level resources limit the pod slice");

    let boot = vm.boot_time;
    let off = vm.poweroff();
    eprintln!(
        "vm_kind_node: boot_to_ssh={boot:?} poweroff={off:?} total={:?}",
        started.elapsed()
    );
    checks.finish();
}
