#!/usr/bin/env bash
# Remove what test beds of dead test processes left behind (the shell twin of
# tests/common `sweep_leftovers`, for CI before and after a run and for people):
#   /tmp/oxlet-testbed-*   containerd, shims, containers, mounts, the dir itself
#   /run/oxlet-testbed     network slot claims; their `oxt<N>` bridges and pinned pod
#                          network namespaces (pods in 10.234.<N>.0/24)
# A bed or slot whose owner ("pid starttime" in <dir>/owner or the slot file) still runs
# is left alone, so this is safe while other test runs are going on.
set -uo pipefail

SLOT_DIR=/run/oxlet-testbed
KEEP_YOUNG_SECS=60

log() { echo "sweep-testbeds: $*"; }

start_time() { # pid -> starttime (field 22 of /proc/pid/stat), or nothing
    local stat rest
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    local -a f
    read -ra f <<<"$rest"
    echo "${f[19]}"
}

owner_alive() { # file with "pid starttime" -> 0 if that process still runs
    local pid st
    read -r pid st _ <"$1" 2>/dev/null || return 1
    [ -n "${pid:-}" ] && [ -n "${st:-}" ] && [ "$(start_time "$pid" 2>/dev/null)" = "$st" ]
}

live_pids() { # every pid that is neither a zombie nor exiting, as "pid ppid"
    local d stat rest
    for d in /proc/[0-9]*; do
        stat=$(cat "$d/stat" 2>/dev/null) || continue
        rest=${stat##*) }
        local -a f
        read -ra f <<<"$rest"
        [ "${f[0]}" = Z ] || [ "${f[0]}" = X ] && continue
        (((f[6] & 4) != 0)) && continue # PF_EXITING
        echo "${d#/proc/} ${f[1]}"
    done
}

pids_of_dir() { # processes started with DIR on their command line, container inits, descendants
    local dir=$1 table pid ppid
    table=$(live_pids)
    local -a found=()
    while read -r pid ppid; do
        [ "$pid" = $$ ] && continue
        if { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "$dir"; then
            found+=("$pid")
        fi
    done <<<"$table"
    local f id
    for f in "$dir"/state/io.containerd.runtime.v2.task/*/*/init.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f" 2>/dev/null)
        id=$(basename "$(dirname "$f")")
        if [ -n "$pid" ] && grep -q "^$pid " <<<"$table" && grep -qF "$id" "/proc/$pid/cgroup" 2>/dev/null; then
            found+=("$pid")
        fi
    done
    local i=0
    while [ $i -lt ${#found[@]} ]; do
        while read -r pid ppid; do
            if [ "$ppid" = "${found[$i]}" ] && [[ " ${found[*]} " != *" $pid "* ]]; then
                found+=("$pid")
            fi
        done <<<"$table"
        i=$((i + 1))
    done
    echo "${found[*]}"
}

teardown_dir() {
    local dir=$1 pids tries=0
    while pids=$(pids_of_dir "$dir") && [ -n "$pids" ]; do
        if [ $tries -ge 50 ]; then
            log "processes of $dir survive SIGKILL: $pids"
            break
        fi
        log "killing processes of $dir: $pids"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
        sleep 0.1
        tries=$((tries + 1))
    done
    # Mount points under the dir, deepest (latest) first; mountinfo escapes spaces as \040.
    awk -v d="$dir" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' \
        /proc/self/mountinfo | tac | while IFS= read -r m; do
        umount -l "$m" 2>/dev/null || log "umount $m failed"
    done
    rm -rf "$dir" 2>/dev/null || log "could not remove $dir"
}

# 1. Dirs of dead owners.
for dir in /tmp/oxlet-testbed-*; do
    [ -d "$dir" ] || continue
    if [ -f "$dir/owner" ]; then
        owner_alive "$dir/owner" && continue
    else
        age=$(($(date +%s) - $(stat -c %Y "$dir")))
        [ "$age" -lt $KEEP_YOUNG_SECS ] && continue
    fi
    log "removing leftover $dir"
    teardown_dir "$dir"
done

# 2. containerds and shims whose dir is already gone.
for d in /proc/[0-9]*; do
    cmd=$({ tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in
        *containerd*/tmp/oxlet-testbed-*) ;;
        *) continue ;;
    esac
    bed=$(grep -o '/tmp/oxlet-testbed-[^/ ]*' <<<"$cmd" | head -1)
    if [ -n "$bed" ] && [ ! -e "$bed" ]; then
        log "killing leftover ${d#/proc/}: $cmd"
        kill -KILL "${d#/proc/}" 2>/dev/null
    fi
done

# 3. Cgroup roots of tests (oxlet runs with --cgroup-root=/oxtest-<test dir below /tmp>)
#    whose dir is gone: kill what is left inside, then rmdir deepest first.
for top in /sys/fs/cgroup/oxtest-* /sys/fs/cgroup/*/oxtest-*; do
    [ -d "$top" ] || continue
    name=$(basename "$top")
    [ -e "/tmp/${name#oxtest-}" ] && continue
    log "removing leftover cgroup tree $top"
    find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    sleep 0.1
    find "$top" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove $top"
done

# 4. Network slots of dead owners: pinned netns, bridge, claim.
mkdir -p "$SLOT_DIR"
exec 9>"$SLOT_DIR/lock"
flock 9
dead=()
for n in $(seq 0 255); do
    f=$SLOT_DIR/slot-$n
    if [ -f "$f" ] && owner_alive "$f"; then
        continue
    fi
    dead+=("$n")
done
is_dead() { [[ " ${dead[*]} " == *" $1 "* ]]; }

for ns in /run/netns/*; do
    [ -e "$ns" ] || continue
    name=$(basename "$ns")
    for a in $(ip -n "$name" -4 -o addr show 2>/dev/null | grep -o ' 10\.234\.[0-9]*\.' | cut -d. -f3); do
        if is_dead "$a"; then
            log "removing leftover netns $name"
            ip netns delete "$name" 2>/dev/null
            break
        fi
    done
done
for link in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    case "$link" in
        oxt[0-9]*) ;;
        *) continue ;;
    esac
    n=${link#oxt}
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    if is_dead "$n"; then
        log "deleting leftover bridge $link"
        ip link del "$link" 2>/dev/null
    fi
done
for n in "${dead[@]}"; do
    rm -f "$SLOT_DIR/slot-$n"
done
exit 0
