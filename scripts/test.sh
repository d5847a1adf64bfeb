#!/usr/bin/env bash
# The whole test suite: test images, a build (not a run) of the benchmarks, rustfmt and
# clippy (no warning allowed), the docs, the
# unit tests and the integration tests (against real containerd test beds, the system's
# containerd 1.6) with the core of the integration tests on containerd 1.7 and 2.x as one
# pool of four lanes (scripts/test-pool.sh), then a kind-shaped node in a qemu guest
# (tests/vm_kind_node.rs, tests/vm_node_lifecycle.rs, tests/vm_node_logs.rs,
# tests/vm_cluster_node.rs, tests/vm_node_swap.rs), and 30 s of fuzzing per parser, two
# parsers at a time.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Time and disk, printed between the phases: CI has a time limit, and a CI run once
# failed on a full disk.
started=$(date +%s)
phase() {
    echo "test.sh: $1: $(($(date +%s) - started)) s in; disk $(df -h --output=avail . | tail -1 | tr -d ' ') free, target/ $(du -sh target 2>/dev/null | cut -f1)"
}
phase "start"

# The VM test bed's image (scripts/vm/build-image.sh: about 4 minutes of debootstrap, most
# of it waiting on the mirror, cold; a second when cached) builds in the background while
# the host suite builds and runs; the VM phase waits for it.
mkdir -p target
vm_image_log=target/vm-image.log
bash scripts/vm/build-image.sh >"$vm_image_log" 2>&1 &
vm_image_pid=$!

bash scripts/build-images.sh target/test-images
# The benchmarks are long and not part of the suite, but they must keep building; build
# them first so the test results are the last thing this prints. The dev profile shares its
# artifacts with the tests below (an optimized build would cost CI about 8 minutes more and
# check nothing the compiler does not check here).
if [ -d benches ]; then
    cargo build --benches
fi
# The house rules the compiler does not enforce: rustfmt's layout, and no clippy warning in
# any target of either crate (the workspace's default members are oxlet and testapi). The
# check builds share nothing with the test builds, so this costs a few minutes of CI.
cargo fmt --all --check
cargo clippy --all-targets --quiet -- -D warnings
phase "fmt and clippy"
# The doc comments' links must resolve: a renamed or moved item shows here first.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items --quiet

# The host suite, as one pool (scripts/test-pool.sh): the unit and integration tests against
# real containerd test beds on the system's containerd 1.6, and the core of the integration
# tests again on containerd 1.7 and 2.x (fetched by scripts/fetch-runtimes.sh): static
# pods, adoption after a restart, probes, hooks and grace, exits and reasons, logs and
# rotation (the secure port's log tests), cgroups, the secure port's streams, an apiserver
# pod with its volumes, the managed containerd and its config, the image GC keeping the
# sandbox image (1.6 names it in its Status config, 1.7 and 2.x pin it; 2.x no longer
# names it), what differs between the releases (runtime_versions), and pulls from a real
# registry with and without logins (registry_pulls), container restart rules and the newer
# pod fields (restart_rules, pod_fields: 2.x's handlers support recursive read-only mounts,
# 1.6's and 1.7's list none, so both branches run) RuntimeClass handlers (runtime_class) and claims
# on hostPath and local volumes (persistent_volumes), image volumes (image_volumes:
# mounted by 2.1, refused by the runtime before), in-place resize (resize: 1.6.20, 1.7 and
# 2.x all report a container's resources, an update's included).
# The test beds (and every oxlet that
# manages its own containerd) run the binary OXLET_TEST_CONTAINERD names. The one test left
# out there waits 70 s on oxlet's own back-off doubling, which no runtime changes.
# container_logs' symlink test is left out of the core: once in about eight runs on 1.7 its
# crash-looping pod's log link outlived the pod by 30 s (being found; its failure now prints
# oxlet's log).
# Four at a time: the tests mostly wait (probes, grace periods, back-offs, idle timeouts),
# so four test beds keep the two cores about as busy as `cargo test` one binary after
# another kept them with two, in about a third of the time.
CORE=(static_pods restarts probes hooks_termination exits_images cgroups secure_port
    api_volumes managed_runtime testbed_smoke runtime_versions image_gc registry_pulls
    restart_rules pod_fields runtime_class persistent_volumes image_volumes user_namespaces
    resize resize_admission resource_managers)
runtimes=${OXLET_RUNTIMES:-$PWD/target/runtimes}
jobs=target/test-pool/jobs.tsv
mkdir -p target/test-pool
bash scripts/test-pool.sh list --label containerd-1.6 -- --lib --bins --tests >"$jobs"
for series in containerd-1.7 containerd-2; do
    bin=$runtimes/$series/bin/containerd
    if [ ! -x "$bin" ]; then
        echo "test.sh: $bin is missing; run scripts/install-test-deps.sh (it fetches it)" >&2
        exit 1
    fi
    runc=runc
    if [ -x "${bin%/*}/runc" ]; then runc=${bin%/*}/runc; fi
    echo "test.sh: the core suite also on $("$bin" --version | awk '{print $3}') ($bin), runc $("$runc" --version | head -n1 | awk '{print $3}')"
    bash scripts/test-pool.sh list --label "$series" --env "OXLET_TEST_CONTAINERD=$bin" \
        --skip crash_loop_back_off_doubles_from_ten_seconds -- "${CORE[@]/#/--test=}" >>"$jobs"
done
phase "the host suite"
bash scripts/test-pool.sh run -j "${OXLET_TEST_JOBS:-4}" "$jobs"
phase "the host suite done"

# A kind-shaped node in a qemu guest (systemd as PID 1, cgroup v2, containerd 2.x with
# SystemdCgroup = true): oxlet as kind's kubelet.service with the systemd cgroup driver.
# Software emulation: one boot and test take several minutes (docs/architecture.md).
phase "the VM test bed"
if ! wait "$vm_image_pid"; then
    cat "$vm_image_log" >&2
    echo "test.sh: building the VM image failed (scripts/vm/build-image.sh, log above)" >&2
    exit 1
fi
cargo test --test vm_kind_node -- --nocapture
cargo test --test vm_node_lifecycle -- --nocapture
cargo test --test vm_node_logs -- --nocapture
cargo test --test vm_cluster_node -- --nocapture
cargo test --test vm_node_swap -- --nocapture
phase "the VM test bed done"

phase "the fuzz build"
# Every parser fuzzed for 30 s (docs/reliability.md): a crash prints its input and fails
# the run. About 3 minutes of build on a fresh machine, then 30 s per target.
FUZZ_DEV=1 bash scripts/fuzz.sh 30
phase "done"
