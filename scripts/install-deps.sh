#!/usr/bin/env bash
# Install what `scripts/run-example.sh` needs, as root on Debian, and nothing else:
# containerd (with CRI), runc, the CNI plugins, a static busybox (the example's images),
# protoc (the k8s-cri build script) and iproute2. The test tooling comes with
# `scripts/install-test-deps.sh`, which runs this first (and, with --test, the VM test
# bed's qemu, debootstrap and ssh client).
#
# It never touches a runtime it did not install:
# - a part already there is used as it is: a `containerd` or `runc` on PATH (an upstream
#   build in /usr/local/bin as well as Debian's) is never replaced, so only what is
#   missing is installed, and a prepared machine costs nothing (and no network);
# - Docker's `containerd.io` package is refused outright, before anything changes:
#   apt would remove it to install Debian's containerd or runc, and its containerd
#   runs without the CRI plugin oxlet needs;
# - no service is started while packages install (a policy-rc.d forbids it), none is
#   ever disabled, and a service is stopped only when it was not running before the
#   install and is running after it (the install started it).
#
# OXLET_INSTALL_ROOT (tests only) prefixes the files looked at and written
# (/usr/lib/cni, /usr/sbin/policy-rc.d), so a test can run the script against a
# tree of its own with stub dpkg-query, apt-get and systemctl on PATH.
#
# Usage: install-deps.sh [--test]   (--test: the test tooling too; install-test-deps.sh)
set -euo pipefail

ROOT=${OXLET_INSTALL_ROOT:-}
here=${BASH_SOURCE[0]%/*}
test_tools=
if [ "${1:-}" = --test ]; then
    test_tools=1
fi

say() { echo "install-deps: $*"; }
fail() {
    echo "install-deps: $*" >&2
    exit 1
}

if [ "$(id -u)" -ne 0 ]; then
    fail "must run as root"
fi

installed() { # package
    local status
    status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
    [ "$status" = "install ok installed" ]
}
on_path() { command -v "$1" >/dev/null 2>&1; }

if installed containerd.io; then
    fail "Docker's containerd.io package is installed; nothing was changed.
  Installing Debian's containerd or runc would make apt remove it (and Docker's runtime with
  it), and its containerd runs without the CRI plugin oxlet needs. To run oxlet beside it,
  enable that plugin yourself (remove \"cri\" from disabled_plugins in
  /etc/containerd/config.toml, then restart containerd), install
  containernetworking-plugins busybox-static protobuf-compiler iproute2, and start oxlet."
fi

# Each part: the package, and whether the machine already has it.
missing=()
want() { # package, present?
    if [ "$2" = no ]; then
        missing+=("$1")
    fi
}
has() { if "$@"; then echo yes; else echo no; fi; }
# A containerd or runc already on PATH is used, whoever installed it.
want containerd "$(has on_path containerd)"
want runc "$(has on_path runc)"
want containernetworking-plugins "$(has test -x "$ROOT/usr/lib/cni/bridge")"
want busybox-static "$(has installed busybox-static)"
want protobuf-compiler "$(has on_path protoc)"
want iproute2 "$(has on_path ip)"
services=(containerd.service)
if [ -n "$test_tools" ]; then
    # openssl: test certificates. docker-registry (distribution 2.8): the pull tests run it
    # on loopback. dbus (dbus-daemon): the graceful node shutdown tests run a private system
    # bus with a logind of their own on it. g++: libFuzzer, which the fuzz targets link
    # (scripts/fuzz.sh), is C++ built from source. kubectl (Debian's 1.20) shows in
    # tests/test_apiserver.rs that the test apiserver speaks the real protocol; any kubectl
    # already on PATH does as well. jq: scripts/test-pool.sh reads cargo's list of test
    # binaries with it.
    want openssl "$(has on_path openssl)"
    want jq "$(has on_path jq)"
    want docker-registry "$(has on_path docker-registry)"
    want dbus "$(has on_path dbus-daemon)"
    want g++ "$(has on_path g++)"
    want kubernetes-client "$(has on_path kubectl)"
    # patchelf: fetch-runtimes.sh points sid's runc at sid's C library, kept beside it.
    want patchelf "$(has on_path patchelf)"
    services+=(docker-registry.service)
fi

systemd_runs() { on_path systemctl && [ -d "$ROOT/run/systemd/system" ]; }
active() { systemctl is-active --quiet "$1" 2>/dev/null; }

if [ ${#missing[@]} -eq 0 ]; then
    say "all present"
else
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The services running before the install: never stopped afterwards.
    before=()
    if systemd_runs; then
        for s in "${services[@]}"; do
            if active "$s"; then before+=("$s"); fi
        done
    fi
    policy=$ROOT/usr/sbin/policy-rc.d
    created_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# oxlet install-deps: no service starts during install\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        created_policy=1
    fi
    cleanup() { if [ -n "$created_policy" ]; then rm -f "$policy"; fi; }
    trap cleanup EXIT

    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null

    # Should a service manager have started one anyway, stop it: this install started
    # it. One that ran before is the machine's, and is left alone.
    if systemd_runs; then
        for s in "${services[@]}"; do
            if [[ " ${before[*]} " != *" $s "* ]] && active "$s"; then
                say "stopping $s, which the install started"
                systemctl stop "$s" || true
            fi
        done
    fi
    bins=(containerd runc ip protoc)
    if [ -n "$test_tools" ]; then bins+=(openssl jq docker-registry dbus-daemon g++ kubectl patchelf); fi
    for bin in "${bins[@]}"; do
        on_path "$bin" || fail "$bin still missing after install"
    done
    [ -x "$ROOT/usr/lib/cni/bridge" ] || fail "/usr/lib/cni/bridge still missing after install"
fi

if [ -n "$test_tools" ]; then
    # The VM test bed (scripts/vm/build-image.sh, tests/vm_kind_node.rs): qemu with 9p,
    # debootstrap, mkfs.ext4 and the ssh client. Debian 12's cloud image may carry
    # qemu-utils 10.x from backports, which conflicts with bookworm's qemu-system-x86:
    # bookworm's qemu-utils is taken (a downgrade). No package here has a service.
    vm_missing=()
    on_path qemu-system-x86_64 || vm_missing+=(qemu-system-x86 qemu-utils/bookworm)
    on_path debootstrap || vm_missing+=(debootstrap)
    on_path ssh || vm_missing+=(openssh-client)
    on_path mkfs.ext4 || vm_missing+=(e2fsprogs)
    if [ ${#vm_missing[@]} -gt 0 ]; then
        say "installing for the VM test bed: ${vm_missing[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades \
            --no-install-recommends "${vm_missing[@]}" </dev/null
        for bin in qemu-system-x86_64 debootstrap ssh mkfs.ext4; do
            on_path "$bin" || fail "$bin still missing after install (the VM test bed needs it)"
        done
    fi
    # containerd 1.7 and 2.x (2.x with runc 1.3) into target/runtimes (nothing
    # installed), and cargo-fuzz
    # (pinned in scripts/fuzz.sh).
    bash "$here/fetch-runtimes.sh"
    bash "$here/fuzz.sh" --install
fi
say "done"
