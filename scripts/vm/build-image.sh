#!/usr/bin/env bash
# Build the guest image of the VM test bed: a kind-shaped host (Debian 12, systemd 252 as
# PID 1, cgroup v2 only) that tests/vm_kind_node.rs boots under qemu. This machine is
# cgroup v1 without systemd, so the systemd cgroup driver can only be seen for real in a
# guest. Everything comes from Debian's packages (debootstrap from this machine's mirror);
# containerd 2.x, oxlet and the test images are not in the image: the harness hands them
# in at boot through a read-only 9p share mounted at /mnt/oxlet.
#
#   ${OXLET_VM_CACHE:-/var/cache/oxlet/vm}/<hash>/
#       rootfs.img      ext4, 3 GiB sparse; booted with -snapshot, so never modified
#       vmlinuz, initrd.img
#       id_ed25519[.pub] the key the harness logs in with (root's authorized key)
#       host_key.pub    the guest's dropbear host key, for a strict known_hosts
# <hash> covers this script and scripts/vm/guest/ (the files copied into the image) and
# the mirror: an unchanged recipe reuses the image. The directory is 0700, root's alone.
# The three images used last are kept, older ones removed after a build.
# Builds are serialised with flock and written to a temporary directory that is renamed
# into place, so a reader sees a whole image or none. The host's cgroups and network are
# not touched: no service starts in the chroot (policy-rc.d) and dropbear-bin ships none.
#
# TESTING (as root):
#   bash scripts/vm/build-image.sh          build (3.5 min cold here, most of it the mirror;
#                                           about 1 GB in the cache) or reuse (0.03 s)
#   bash scripts/vm/build-image.sh --check  print the image dir, or fail if not built
#   cargo test --test vm_kind_node -- --nocapture
# The test boots the image under software emulation (ssh answers after 35-45 s) and
# takes about 2 minutes in all, power-off included. To look around in a guest by hand,
# run the qemu command line of tests/vm/mod.rs (qemu_args) and ssh in with
# id_ed25519 as root.
# Needs debootstrap, mkfs.ext4 (e2fsprogs) and ssh-keygen (openssh-client);
# scripts/install-test-deps.sh installs them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=${OXLET_VM_CACHE:-/var/cache/oxlet/vm}
suite=bookworm
size=3G
# kind's node has systemd, dbus and runc; the rest is what the tests drive the guest with.
packages=systemd,systemd-sysv,dbus,linux-image-amd64,iproute2,kmod,udev,ca-certificates,runc
packages+=,containernetworking-plugins,busybox-static,iptables,dropbear-bin,procps

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    head -n1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}

hash=$( (
    cd "$here"
    sha256sum build-image.sh
    find guest -type f -print0 | sort -z | xargs -0 sha256sum
    echo "$mirror $suite $size $packages"
) | sha256sum | cut -c1-16)
dir=$base/$hash

complete() {
    local f
    for f in rootfs.img vmlinuz initrd.img id_ed25519 id_ed25519.pub host_key.pub; do
        [ -s "$1/$f" ] || return 1
    done
}

if $check; then
    if [ -d "$base" ]; then
        # Wait for a build under way (scripts/test.sh starts one in the background).
        exec 9>"$base/.lock"
        flock 9
    fi
    if complete "$dir"; then
        touch "$dir"
        echo "$dir"
        exit 0
    fi
    echo "build-image: no VM image at $dir for this recipe; build it with: bash scripts/vm/build-image.sh" >&2
    exit 1
fi

for tool in debootstrap mkfs.ext4 ssh-keygen flock; do
    command -v "$tool" >/dev/null || {
        echo "build-image: $tool is missing; run scripts/install-test-deps.sh" >&2
        exit 1
    }
done
[ "$(id -u)" = 0 ] || { echo "build-image: debootstrap needs root" >&2; exit 1; }

mkdir -p "$base"
chmod 0700 "$base"
exec 9>"$base/.lock"
flock 9
if complete "$dir"; then
    touch "$dir" # its mtime is its last use: prune() keeps the recent ones
    echo "build-image: reusing $dir" >&2
    echo "$dir"
    exit 0
fi

# Images of other recipes (another checkout, an older commit) are kept while they are
# among the three used last; older ones go. Only our own <16 hex> names are looked at,
# and a guest still running from a removed image keeps its open file.
prune() {
    local old
    for old in $(find "$base" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
        -regex '.*/[0-9a-f]{16}' -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2); do
        echo "build-image: removing the image of an older recipe, $old" >&2
        rm -rf --one-file-system "$old"
    done
}

started=$(date +%s)
work=$(mktemp -d "$base/.build.XXXXXX")
root=$work/root
# debootstrap mounts /proc and /sys in the target; a failed run can leave them. Unmount
# whatever is below our directory, deepest first, and never cross into another file system.
cleanup() {
    local m
    for m in $(awk -v w="$work/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -l "$m" || true
    done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

echo "build-image: debootstrap $suite from $mirror into $root (minutes)" >&2
mkdir -p "$root/usr/sbin"
# No package's maintainer script may start a service on this host.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 40 "$work/debootstrap.log" >&2
    [ -f "$root/debootstrap/debootstrap.log" ] && tail -n 40 "$root/debootstrap/debootstrap.log" >&2
    echo "build-image: debootstrap failed (log above)" >&2
    exit 1
fi
rm -f "$root/usr/sbin/policy-rc.d"

cp -a "$here/guest/." "$root/"
chown -R root:root "$root/etc/containerd" "$root/etc/cni" "$root/etc/systemd"
mkdir -p "$root/mnt/oxlet" "$root/etc/dropbear" "$root/root/.ssh" "$root/etc/systemd/system/kubelet.service.d"
chmod 0700 "$root/root/.ssh"
ssh-keygen -q -t ed25519 -N '' -C "oxlet-vm-test-bed" -f "$work/id_ed25519"
cp "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
chmod 0600 "$root/root/.ssh/authorized_keys"
chroot "$root" dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null 2>&1
chroot "$root" dropbearkey -y -f /etc/dropbear/dropbear_ed25519_host_key | grep '^ssh-ed25519 ' | cut -d' ' -f1,2 >"$work/host_key.pub"

# Units: networkd and dropbear on, containerd on (it waits for the share), no getty on
# the serial console (it would hang up the console the harness logs).
wants=$root/etc/systemd/system/multi-user.target.wants
mkdir -p "$wants"
ln -sf /lib/systemd/system/systemd-networkd.service "$wants/systemd-networkd.service"
ln -sf /etc/systemd/system/dropbear.service "$wants/dropbear.service"
ln -sf /etc/systemd/system/containerd.service "$wants/containerd.service"
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"

kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -n1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -n1)
install -m 0600 "$kernel" "$work/vmlinuz"
install -m 0600 "$initrd" "$work/initrd.img"

echo "build-image: making the ext4 image ($size, sparse)" >&2
truncate -s "$size" "$work/rootfs.img"
mkfs.ext4 -q -F -L oxlet-vm -d "$root" "$work/rootfs.img"
rm -rf --one-file-system "$root"
chmod 0600 "$work"/rootfs.img "$work"/id_ed25519* "$work/host_key.pub"
rm -f "$work/debootstrap.log"
chmod 0700 "$work"
complete "$work" || { echo "build-image: the build in $work lacks a part (see complete())" >&2; exit 1; }
mv -T "$work" "$dir"
trap - EXIT
echo "build-image: built $dir in $(($(date +%s) - started)) s" >&2
prune
echo "$dir"
