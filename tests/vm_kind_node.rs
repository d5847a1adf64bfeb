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
use vm::kind::{kubelet_log, poll};

/// kind's kubepods slice under `cgroupRoot: /kubelet`, as kubelet's systemd driver names it.
const KUBEPODS: &str = "kubelet.slice/kubelet-kubepods.slice";

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

/// Runs oxlet instead of the kubelet, as docs/kind.md's drop-in does, in static-pod mode:
/// no kubeconfig (so no webhooks, and the secure port off: kind's config asks for
/// webhook authentication, which needs an apiserver), the read-only port on for `/pods`.
const OXLET_DROPIN: &str = r#"[Service]
Environment="KUBELET_KUBECONFIG_ARGS="
ExecStart=
ExecStart=/mnt/oxlet/oxlet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --cgroup-driver=systemd --port=0 --read-only-port=10255 -v=2
"#;

/// Checks that are reported together: each prints PASS or FAIL with what was seen.
#[derive(Default)]
struct Checks {
    results: Vec<(String, bool, String)>,
}

impl Checks {
    fn check(&mut self, what: &str, ok: bool, seen: impl Into<String>) {
        let seen = seen.into();
        let verdict = if ok { "PASS" } else { "FAIL" };
        eprintln!("vm_kind_node: {verdict} {what} seen={seen:?}");
        self.results.push((what.to_string(), ok, seen));
    }

    /// Fails the test when any check failed, listing them all.
    fn finish(self) {
        let failed: Vec<String> = self
            .results
            .iter()
            .filter(|(_, ok, _)| !ok)
            .map(|(what, _, seen)| format!("  FAIL {what}: saw {seen:?}"))
            .collect();
        eprintln!(
            "vm_kind_node: {} of {} checks passed",
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

/// The read-only port's pod list.
fn pods(vm: &Vm) -> Option<serde_json::Value> {
    let out = vm.ssh("busybox wget -qO- http://127.0.0.1:10255/pods");
    serde_json::from_slice(&out.stdout).ok()
}

/// The static pod, once its container runs: its UID and container ID.
fn wait_running(vm: &Vm) -> (String, String) {
    let found = poll(Duration::from_secs(480), || {
        let list = pods(vm)?;
        let pod = list["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == "guaranteed-oxlet-vm")?
            .clone();
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
            "the static pod did not become Running; /pods: {}\noxlet's log:\n{}",
            pods(vm).map(|p| p.to_string()).unwrap_or_default(),
            kubelet_log(vm, 60)
        )
    })
}

/// `LoadState=… ActiveState=…` of a unit, as systemd knows it.
fn unit_state(vm: &Vm, unit: &str) -> String {
    let out = vm.ssh_ok(&format!("systemctl show -p LoadState,ActiveState {unit}"));
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

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
    vm.ssh_ok("rm /etc/kubernetes/manifests/guaranteed.yaml");
    let gone = poll(Duration::from_secs(300), || {
        let list = pods(vm)?;
        let items = list["items"].as_array()?;
        (!items
            .iter()
            .any(|p| p["metadata"]["name"] == "guaranteed-oxlet-vm"))
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
    let vm = vm::kind::boot_kind_node();
    vm::kind::start_oxlet_as_kubelet(&vm, OXLET_DROPIN, &vm::kind::config());

    vm.write_file(
        "/etc/kubernetes/manifests/guaranteed.yaml",
        MANIFEST.as_bytes(),
        0o644,
    );
    let (uid, container) = wait_running(&vm);
    eprintln!("vm_kind_node: step 4 ok: the static pod runs podUID={uid} container={container}");

    let pod_slice = format!(
        "{KUBEPODS}/kubelet-kubepods-pod{}.slice",
        uid.replace('-', "_")
    );
    let mut checks = Checks::default();
    check_cgroups(&vm, &mut checks, &pod_slice, &container);
    eprintln!("vm_kind_node: step 5 done: cgroups and units checked");
    remove_pod(&vm, &mut checks, &pod_slice);
    eprintln!("vm_kind_node: step 6 done: the manifest removed");

    vm.poweroff_and_report("vm_kind_node", started);
    checks.finish();
}
