#!/usr/bin/env bash
# Runs test binaries as one pool of N lanes (a small cousin of cargo-nextest, which would
# take minutes to build on every fresh machine): each integration test is its own process,
# so a lane never idles behind the slowest test of a binary, and the lib and bin unit
# tests run as one job per binary (a thousand fast tests, not worth a process each).
# Why a pool: the integration tests mostly wait (probes, grace periods, back-offs,
# idle timeouts) on a few test beds at a time, so `cargo test`'s one binary after another
# left the two cores idle for most of the suite.
#
#   scripts/test-pool.sh list [--label L] [--env K=V]... [--skip SUBSTR]... -- CARGO-TEST-ARGS
#       builds the tests (`cargo test --no-run CARGO-TEST-ARGS`) and prints one job a line
#   scripts/test-pool.sh run [-j N] [--timeout SECS] JOBS-FILE
#       runs the jobs, longest first, N at a time; prints a line per job and, for each
#       failure, its log; exits non-zero when any job failed, timed out or ran no test
#
# A job line: label, environment (K=V,... or -), the directory it runs in (its package's, as
# cargo test runs it), executable, test name (or * and the skips for the whole binary),
# target name; tab-separated. Logs go to target/test-pool/logs/, durations to
# target/test-pool/durations.tsv (read back to order the next run; scripts/test-durations.tsv
# orders a fresh clone's, and an unknown test goes first).
set -euo pipefail
cd "$(dirname "$0")/.."

POOL_DIR=target/test-pool
KNOWN_DURATIONS=scripts/test-durations.tsv

die() {
    echo "test-pool: $*" >&2
    exit 2
}

# --- list ---------------------------------------------------------------------------

list_jobs() {
    local label=host env=- skips=()
    while [ $# -gt 0 ]; do
        case "$1" in
        --label) label=$2; shift 2 ;;
        --env) if [ "$env" = - ]; then env=$2; else env="$env,$2"; fi; shift 2 ;;
        --skip) skips+=("$2"); shift 2 ;;
        --) shift; break ;;
        *) die "list: unknown option $1" ;;
        esac
    done
    local artifacts kind name exe dir
    artifacts=$(cargo test --no-run --message-format=json-render-diagnostics "$@" |
        jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
               | [.target.kind[0], .target.name, .executable,
                  (.manifest_path | sub("/Cargo.toml$"; ""))] | @tsv')
    while IFS=$'\t' read -r kind name exe dir; do
        case "$kind" in
        test)
            # libtest's --list in terse form: "<name>: test" a line.
            "$exe" --list --format terse | sed -n 's/: test$//p' | while read -r t; do
                skipped "$t" "${skips[@]}" || printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$env" "$dir" "$exe" "$t" "$name"
            done
            ;;
        *)
            # The unit tests of a lib or bin: the whole binary is one job (its --skip
            # patterns go with it).
            if [ "$("$exe" --list --format terse | grep -c ': test$')" -gt 0 ]; then
                printf '%s\t%s\t%s\t%s\t*%s\t%s\n' "$label" "$env" "$dir" "$exe" "$(join_skips "${skips[@]}")" "$name ($kind)"
            fi
            ;;
        esac
    done <<<"$artifacts"
}

# Whether test name $1 contains any of the patterns after it (libtest's --skip).
skipped() {
    local t=$1 p
    shift
    for p in "$@"; do
        [[ "$t" == *"$p"* ]] && return 0
    done
    return 1
}

join_skips() {
    local p
    for p in "$@"; do printf ' %s' "$p"; done
}

# --- run ----------------------------------------------------------------------------

# One job: runs it under a time limit, writes its log, prints its line and appends its
# result ("status<TAB>seconds<TAB>key<TAB>log") to the results file.
run_one() {
    local line=$1 label env dir exe test name
    IFS=$'\t' read -r label env dir exe test name <<<"$line"
    local key="$label/$name/$test" log args=() envs=()
    log="$POOL_DIR/logs/$label/$name/$(printf '%s' "${test%% *}" | tr -c 'A-Za-z0-9_.-' '_').log"
    mkdir -p "$(dirname "$log")"
    if [ "$env" != - ]; then IFS=, read -r -a envs <<<"$env"; fi
    if [[ "$test" == \** ]]; then
        local p
        for p in ${test#\*}; do args+=(--skip "$p"); done
        args+=(--test-threads=2)
    else
        args=(--exact "$test" --test-threads=1)
    fi
    local start status=ok rc=0
    start=$(date +%s%N)
    (cd "$dir" && env "${envs[@]}" timeout --kill-after=15 "$TIMEOUT" "$exe" "${args[@]}") >"$log" 2>&1 || rc=$?
    local secs
    secs=$((($(date +%s%N) - start) / 100000000))
    secs="$((secs / 10)).$((secs % 10))"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="TIMEOUT"
    elif [ "$rc" != 0 ]; then
        status="FAILED"
    elif ! grep -qE '^test result: ok\. [1-9][0-9]* passed' "$log"; then
        # --exact with a name that no longer matches runs nothing and still exits 0.
        status="NO-TEST"
    fi
    printf '%-7s %7s s  %s %s::%s\n' "$status" "$secs" "$label" "$name" "${test%% *}"
    printf '%s\t%s\t%s\t%s\n' "$status" "$secs" "$key" "$log" >>"$RESULTS"
}

# The jobs on stdin, longest first by the recorded durations (unknown ones first of all).
order_jobs() {
    local known
    known=$(mktemp)
    cat "$KNOWN_DURATIONS" "$POOL_DIR/durations.tsv" 2>/dev/null | grep -v '^#' >"$known" || true
    awk -F'\t' -v OFS='\t' '
        FILENAME == ARGV[1] { secs[$2] = $1; next }
        { key = $1 "/" $6 "/" $5; print (key in secs ? secs[key] : 1e9), $0 }
    ' "$known" - | sort -t$'\t' -k1,1 -g -r | cut -f2-
    rm -f "$known"
}

run_jobs() {
    local jobs=2 file=
    TIMEOUT=900
    while [ $# -gt 0 ]; do
        case "$1" in
        -j) jobs=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        *) file=$1; shift ;;
        esac
    done
    [ -n "$file" ] || die "run: no jobs file"
    mkdir -p "$POOL_DIR"
    rm -rf "$POOL_DIR/logs"
    RESULTS="$POOL_DIR/results.tsv"
    : >"$RESULTS"
    export POOL_DIR RESULTS TIMEOUT
    export -f run_one
    local total started
    total=$(grep -c . "$file" || true)
    started=$(date +%s)
    echo "test-pool: $total jobs, $jobs at a time, ${TIMEOUT} s limit each"
    order_jobs <"$file" | xargs -d '\n' -P "$jobs" -n 1 bash -c 'run_one "$1"' _ || true
    summarize "$total" "$(($(date +%s) - started))"
}

# Records the durations, prints the slowest jobs and the failures; fails the run when a
# job failed or did not run.
summarize() {
    local total=$1 wall=$2 done_count bad busy
    done_count=$(grep -c . "$RESULTS" || true)
    bad=$(grep -vc '^ok' "$RESULTS" || true)
    busy=$(awk -F'\t' '{s += $2} END {printf "%.0f", s}' "$RESULTS")
    # Durations of the jobs that passed, merged over what earlier runs recorded.
    {
        awk -F'\t' -v OFS='\t' '$1 == "ok" {print $2, $3}' "$RESULTS"
        cat "$POOL_DIR/durations.tsv" 2>/dev/null || true
    } | awk -F'\t' '!seen[$2]++' >"$POOL_DIR/durations.new"
    mv "$POOL_DIR/durations.new" "$POOL_DIR/durations.tsv"
    echo "test-pool: the slowest jobs:"
    # (awk reads it all: a head that stopped early would end sort with SIGPIPE.)
    sort -t$'\t' -k2,2 -g -r "$RESULTS" | awk -F'\t' 'NR <= 8 {printf "  %7.1f s  %s\n", $2, $3}'
    echo "test-pool: $done_count of $total jobs ran in ${wall} s of wall time (${busy} s of job time); $bad not ok"
    if [ "$done_count" != "$total" ] || [ "$bad" != 0 ]; then
        # The failures' logs, after the run so that no other job's lines cut into them.
        local status secs key log
        while IFS=$'\t' read -r status secs key log; do
            [ "$status" = ok ] && continue
            echo "----- $status $key: the last 200 lines of $log -----"
            tail -n 200 "$log"
            echo "----- end of $key -----"
        done <"$RESULTS"
        grep -v '^ok' "$RESULTS" | awk -F'\t' '{printf "test-pool: %s %s\n", $1, $3}'
        exit 1
    fi
}

case "${1:-}" in
list) shift; list_jobs "$@" ;;
run) shift; run_jobs "$@" ;;
*) die "usage: $0 list [--label L] [--env K=V]... [--skip SUBSTR]... -- CARGO-TEST-ARGS | run [-j N] [--timeout SECS] JOBS-FILE" ;;
esac
