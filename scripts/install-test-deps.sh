#!/usr/bin/env bash
# Install what the test suite (scripts/test.sh) needs, as root on Debian: the runtime
# parts of scripts/install-deps.sh, then openssl, docker-registry (its service never
# started), dbus, g++, kubectl, jq, the VM test bed's qemu-system-x86, debootstrap and
# openssh-client, containerd 1.7 and 2.x in target/runtimes (fetched, not
# installed) and cargo-fuzz. The same rules hold: nothing already there is replaced,
# Docker's containerd.io is refused, no service is disabled.
set -euo pipefail
exec bash "${BASH_SOURCE[0]%/*}/install-deps.sh" --test "$@"
