#!/usr/bin/env bash
# The main job on a fresh machine: install the runtime packages (never over a runtime the
# machine already has; scripts/install-deps.sh), build oxlet, put the
# local images where oxlet imports them at start (<root-dir>/images), and run oxlet on the
# example static pods. oxlet starts its own containerd under <root-dir>/containerd unless
# one answers at the default socket.
#   sudo scripts/run-example.sh            (OXLET_ROOT_DIR overrides /var/lib/oxlet)
#   scripts/run-example.sh --print-args    (the arguments it runs oxlet with; nothing else)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

ROOT_DIR=${OXLET_ROOT_DIR:-/var/lib/oxlet}

# Loopback only: with flags alone kubelet's defaults let anyone who reaches the secure
# port exec into the pods (anonymous requests, every request authorized), so the example
# serves the secure and read-only ports to this machine alone.
args=(--pod-manifest-path examples/manifests --address=127.0.0.1 -v=2)
# Like kubelet since 1.35, oxlet refuses a cgroup v1 host unless told otherwise.
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo "run-example: this host uses cgroup v1; passing --fail-cgroupv1=false" >&2
    args+=(--fail-cgroupv1=false)
fi
if [ "$ROOT_DIR" != /var/lib/oxlet ]; then
    args+=(--root-dir "$ROOT_DIR")
fi
# `--print-args`: the arguments alone, one a line, nothing installed or built (the test
# of the example's node, tests/example_node.rs, runs oxlet with exactly these).
if [ "${1:-}" = --print-args ]; then
    printf '%s\n' "${args[@]}"
    exit 0
fi

bash scripts/install-deps.sh
cargo build --release
bash scripts/build-images.sh "$ROOT_DIR/images"
exec target/release/oxlet "${args[@]}"
