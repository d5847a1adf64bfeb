#!/usr/bin/env bash
# Install what oxlet's real-runtime tests and examples need, as root on Debian:
# containerd (with CRI), runc, the CNI plugins, a static busybox (test images),
# protoc (the k8s-cri build script), iproute2, openssl (test certificates), kubectl, g++ and
# cargo-fuzz (the fuzz targets),
# docker-registry (distribution 2.8: the pull tests run it on loopback; its service is never
# started), and dbus (dbus-daemon: the graceful node shutdown tests run a private system bus
# with a logind of their own on it; the system's bus is never started). Only missing packages
# are installed, so a prepared machine costs nothing (and no network). containerd 1.7 and
# 2.x, which the core of the integration suite also runs against, are fetched into
# target/runtimes without being installed (scripts/fetch-runtimes.sh).
#
# No system containerd is started: oxlet and the test bed run their own, and a system
# one would only compete for nothing. A policy-rc.d that forbids service starts is put in
# place for the duration of the install.
set -euo pipefail

# g++: libFuzzer, which the fuzz targets link (scripts/fuzz.sh), is C++ built from source.
PKGS=(containerd runc containernetworking-plugins busybox-static protobuf-compiler iproute2 openssl
    docker-registry dbus g++)
# kubectl (Debian's 1.20) shows in tests/test_apiserver.rs that the test apiserver speaks the real
# protocol; any kubectl already on PATH does as well.
if ! command -v kubectl >/dev/null 2>&1; then
    PKGS+=(kubernetes-client)
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: must run as root" >&2
    exit 1
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
# containerd 1.7 and 2.x, and cargo-fuzz (pinned in scripts/fuzz.sh).
fetch_runtimes() {
    bash "$(dirname "$0")/fetch-runtimes.sh"
    bash "$(dirname "$0")/fuzz.sh" --install
}
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all present (${PKGS[*]})"
    fetch_runtimes
    exit 0
fi
echo "install-deps: installing ${missing[*]}"

export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
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

# Should a service manager have started containerd or the registry anyway, stop them:
# they are not ours.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now containerd.service docker-registry.service >/dev/null 2>&1 || true
fi
for bin in containerd runc ctr containerd-shim-runc-v2 ip protoc /usr/lib/cni/bridge /bin/busybox \
    docker-registry dbus-daemon; do
    if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "$bin" ]; then
        echo "install-deps: $bin still missing after install" >&2
        exit 1
    fi
done
fetch_runtimes
echo "install-deps: done"
