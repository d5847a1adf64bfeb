#!/usr/bin/env bash
# Fuzzes every parser (fuzz/, docs/reliability.md): installs cargo-fuzz if missing,
# builds the targets with libFuzzer's coverage instrumentation on stable Rust
# (`--sanitizer none`: the sanitizers need nightly), seeds each target's corpus with
# the repository's manifests and configs and this machine's /proc and cgroup files,
# and runs each target for SECONDS (default 30), FUZZ_JOBS at a time (default: one per
# core). Any crash, timeout or memory overrun fails the script, printing the input that
# did it and the command that replays it.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (FUZZ_DEV=1: an unoptimized build)
#   scripts/fuzz.sh --install     (only the install; scripts/install-test-deps.sh runs it)
#
# FUZZ_STATS=<file> appends one line per target: name, executions, seconds, coverage
# (edges), features, peak RSS (MiB), corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."

# cargo-fuzz, pinned: a fresh machine installs the same one.
CARGO_FUZZ_VERSION=0.13.2

if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
    echo "fuzz.sh: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install --locked --version "$CARGO_FUZZ_VERSION" cargo-fuzz
fi
if [ "${1:-}" = "--install" ]; then
    exit 0
fi
seconds=${1:-30}
shift || true

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi

build_start=$(date +%s)
# 16 codegen units: oxlet is one large crate, and with cargo-fuzz's default of one its
# optimization runs on one core alone (10 minutes here); two cores halve that.
# FUZZ_DEV=1 (the CI's 30 s smoke run) builds without optimizations: the build is
# several times quicker on 2 cores, the runs several times slower, which 30 s can afford.
if [ -n "${FUZZ_DEV:-}" ]; then
    (cd fuzz && cargo fuzz build --sanitizer none --dev)
    bin=fuzz/target/x86_64-unknown-linux-gnu/debug
else
    (cd fuzz && cargo fuzz build --sanitizer none --codegen-units 16)
    bin=fuzz/target/x86_64-unknown-linux-gnu/release
fi
echo "fuzz.sh: built ${#targets[@]} targets in $(($(date +%s) - build_start)) s"
# The binaries are run as built (not through `cargo fuzz run`, which would rebuild
# them should the sources change during a long run).

# The seeds: fuzz/seeds/<target>/ (small inputs written for the targets) and the
# repository's and this machine's real files, copied into the working corpus.
seed() {
    local target=$1 corpus=$2
    cp fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
    local f
    case $target in
    manifest) for f in examples/manifests/*.yaml; do cp "$f" "$corpus/"; done ;;
    kubelet_config) cp tests/data/kind/config.yaml tests/data/kind/instance-config.yaml "$corpus/" ;;
    kubeconfig) cp tests/data/kind/kubelet.conf "$corpus/" ;;
    procfs)
        for f in /proc/stat /proc/meminfo /proc/loadavg /proc/net/dev /proc/net/route \
            /proc/self/stat /proc/self/status /etc/os-release; do
            cat "$f" >"$corpus/machine-$(echo "${f#/}" | tr / -)" 2>/dev/null || true
        done
        ;;
    cgroup)
        # One cgroup's files in the target's order (oxlet::fuzzing's CGROUP_FILES),
        # NUL-separated, from this machine's root cgroups of either layout.
        local root=/sys/fs/cgroup
        {
            for f in cpu/cpu.stat memory/memory.usage_in_bytes memory/memory.stat \
                memory/memory.limit_in_bytes pids/pids.current cpuacct/cpuacct.usage \
                cpu/cpu.pressure cpu/cpu.cfs_quota_us cpu/cpu.shares cpu/cpu.cfs_period_us \
                pids/pids.max cpuset/cpuset.cpus; do
                cat "$root/$f" 2>/dev/null || true
                printf '\0'
            done
        } >"$corpus/machine-v1"
        {
            for f in cpu.stat memory.current memory.stat memory.max pids.current \
                cpu.pressure memory.pressure cpu.max cpu.weight io.pressure pids.max \
                cpuset.cpus.effective; do
                cat "$root/$f" 2>/dev/null || true
                printf '\0'
            done
        } >"$corpus/machine-v2"
        ;;
    esac
}

# One target for $seconds s: its summary line, and on a crash the input and how to replay
# it; the exit status is the fuzzer's.
fuzz_one() {
    local t=$1 corpus=fuzz/corpus/$1 scratch log rc
    mkdir -p "$corpus" fuzz/artifacts/"$t"
    seed "$t" "$corpus"
    # Each run's files (the parsers that read files read them from here) go with it.
    scratch=$(mktemp -d)
    log=$scratch/libfuzzer.log
    # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: memory stays bounded
    # (and one allocation may not take more); -max_len: manifests and configs are small.
    set +e
    TMPDIR=$scratch "$bin/$t" "$corpus" -artifact_prefix=fuzz/artifacts/"$t"/ \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=16384 \
        -print_final_stats=1 -close_fd_mask=1 </dev/null >"$log" 2>&1
    rc=$?
    set -e
    local done_line execs rss cov ft corp artifact
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$done_line")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$done_line")
    corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$done_line")
    echo "fuzz.sh: $t: ${execs:-?} executions in $seconds s, coverage ${cov:-?} edges, ${ft:-?} features, peak RSS ${rss:-?} MiB, corpus ${corp:-?}"
    if [ -n "${FUZZ_STATS:-}" ]; then
        echo "$t ${execs:-?} $seconds ${cov:-?} ${ft:-?} ${rss:-?} ${corp:-?}" >>"$FUZZ_STATS"
    fi
    if [ $rc -ne 0 ]; then
        tail -60 "$log"
        artifact=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
        echo "fuzz.sh: $t FAILED (exit $rc); input: ${artifact:-fuzz/artifacts/$t/}"
        if [ -n "$artifact" ]; then
            echo "fuzz.sh: the input, escaped: $(od -An -c "$artifact" | head -c 2000)"
        fi
        echo "fuzz.sh: replay: $bin/$t ${artifact:-fuzz/artifacts/$t/<file>}"
    fi
    rm -rf "$scratch"
    return $rc
}

# FUZZ_JOBS targets at a time (default: one per core; each fuzzer is one process on one
# core). Each target's lines are printed when it ends, whole.
mkdir -p fuzz/corpus fuzz/artifacts
out=$(mktemp -d)
parallel=${FUZZ_JOBS:-$(nproc)}
echo "fuzz.sh: ${#targets[@]} targets for $seconds s each, $parallel at a time"
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do
        wait -n || true
    done
    (
        rc=0
        fuzz_one "$t" >"$out/$t.log" 2>&1 || rc=$?
        cat "$out/$t.log"
        echo "$rc" >"$out/$t.rc"
    ) &
done
wait
failed=()
for t in "${targets[@]}"; do
    [ "$(cat "$out/$t.rc" 2>/dev/null)" = 0 ] || failed+=("$t")
done
rm -rf "$out"

if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, $seconds s each, no crash"
