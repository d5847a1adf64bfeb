#!/usr/bin/env bash
# Build oxlet's two local test images as OCI image-layout tar archives, fully offline:
#   OUTDIR/oxlet-busybox.tar  localhost/oxlet/busybox:1  (Cmd ["sh"])
#   OUTDIR/oxlet-pause.tar    localhost/oxlet/pause:1    (Entrypoint sleep forever; the CRI sandbox image)
# Both share one gzipped layer: /bin/busybox plus a symlink per applet.
# Import with: ctr -a SOCK -n k8s.io images import OUTDIR/oxlet-busybox.tar
#
# Why a script and not a registry: these machines cannot pull images. The output is
# deterministic (fixed mtimes, owners, sort order, gzip -n), so rebuilding gives the same
# digests; an up-to-date OUTDIR is left alone (stamp = hash of the inputs), and concurrent
# callers are serialised with flock and only ever see complete archives (write, then rename).
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
OUTDIR=$1
BUSYBOX=${BUSYBOX:-/bin/busybox}
BUSYBOX_REF=localhost/oxlet/busybox:1
PAUSE_REF=localhost/oxlet/pause:1
# Fixed timestamp for every file and for the image configs (2024-01-01T00:00:00Z).
EPOCH=1704067200
CREATED=2024-01-01T00:00:00Z

if [ ! -x "$BUSYBOX" ]; then
    echo "build-images: $BUSYBOX not found; install busybox-static (scripts/install-deps.sh)" >&2
    exit 1
fi
# A dynamically linked busybox would not run in an image that holds nothing else.
if command -v file >/dev/null 2>&1 && file -L "$BUSYBOX" | grep -q 'dynamically linked'; then
    echo "build-images: $BUSYBOX is dynamically linked; install busybox-static" >&2
    exit 1
fi

case "$(uname -m)" in
    x86_64) ARCH=amd64 ;;
    aarch64 | arm64) ARCH=arm64 ;;
    armv7l) ARCH=arm ;;
    ppc64le) ARCH=ppc64le ;;
    s390x) ARCH=s390x ;;
    riscv64) ARCH=riscv64 ;;
    *) echo "build-images: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

# One builder at a time per OUTDIR (test processes may race to build).
exec 9>"$OUTDIR/.build.lock"
flock 9

SELF_HASH=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
BB_HASH=$(sha256sum "$BUSYBOX" | cut -d' ' -f1)
STAMP="$SELF_HASH $BB_HASH $ARCH"
if [ -f "$OUTDIR/oxlet-busybox.tar" ] && [ -f "$OUTDIR/oxlet-pause.tar" ] &&
    [ "$(cat "$OUTDIR/.stamp" 2>/dev/null || true)" = "$STAMP" ]; then
    echo "build-images: $OUTDIR is up to date"
    exit 0
fi

WORK=$(mktemp -d "$OUTDIR/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
umask 022

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# Deterministic tar of the current directory's listed entries.
det_tar() {
    local out=$1
    shift
    tar --create --file="$out" --format=gnu --sort=name --mtime="@$EPOCH" \
        --owner=0 --group=0 --numeric-owner --no-acls --no-xattrs --no-selinux "$@"
}

# --- the shared layer ------------------------------------------------------------
ROOTFS=$WORK/rootfs
mkdir -p "$ROOTFS/bin" "$ROOTFS/etc" "$ROOTFS/tmp" "$ROOTFS/root" "$ROOTFS/var/www"
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
chmod 0755 "$ROOTFS/bin/busybox"
chmod 1777 "$ROOTFS/tmp"
chmod 0700 "$ROOTFS/root"
n=0
while IFS= read -r applet; do
    case "$applet" in
        "" | busybox | */*) continue ;;
    esac
    ln -s busybox "$ROOTFS/bin/$applet"
    n=$((n + 1))
done < <("$BUSYBOX" --list)
for required in sh sleep cat echo true false env ls nc wget httpd; do
    if [ ! -L "$ROOTFS/bin/$required" ]; then
        echo "build-images: $BUSYBOX has no '$required' applet" >&2
        exit 1
    fi
done
# Enough of /etc for user lookups (runAsUser, whoami) inside the test containers.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$ROOTFS/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOTFS/etc/group"
chmod 0644 "$ROOTFS/etc/passwd" "$ROOTFS/etc/group"

(cd "$ROOTFS" && det_tar "$WORK/layer.tar" bin etc root tmp var)
DIFF_ID=$(sha "$WORK/layer.tar")
gzip -n -9 -c "$WORK/layer.tar" >"$WORK/layer.tar.gz"
LAYER_DIGEST=$(sha "$WORK/layer.tar.gz")
LAYER_SIZE=$(size "$WORK/layer.tar.gz")

# --- one image: config, manifest, index, archive ----------------------------------
# build_image REF OUTFILE CONFIG_JSON_FRAGMENT
build_image() {
    local ref=$1 outfile=$2 cfg=$3
    local dir=$WORK/$(basename "$outfile" .tar)
    local blobs=$dir/blobs/sha256
    mkdir -p "$blobs"
    cp "$WORK/layer.tar.gz" "$blobs/$LAYER_DIGEST"

    printf '{"created":"%s","architecture":"%s","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":"oxlet scripts/build-images.sh: busybox with %d applets"}]}' \
        "$CREATED" "$ARCH" "$cfg" "$DIFF_ID" "$CREATED" "$n" >"$dir/config.json"
    local config_digest config_size
    config_digest=$(sha "$dir/config.json")
    config_size=$(size "$dir/config.json")
    mv "$dir/config.json" "$blobs/$config_digest"

    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%d}]}' \
        "$config_digest" "$config_size" "$LAYER_DIGEST" "$LAYER_SIZE" >"$dir/manifest.json"
    local manifest_digest manifest_size
    manifest_digest=$(sha "$dir/manifest.json")
    manifest_size=$(size "$dir/manifest.json")
    mv "$dir/manifest.json" "$blobs/$manifest_digest"

    # containerd names the image from io.containerd.image.name; the OCI annotation holds the tag.
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$manifest_digest" "$manifest_size" "$ref" "${ref##*:}" >"$dir/index.json"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
    chmod -R u=rwX,go=rX "$dir"

    (cd "$dir" && det_tar "$WORK/out.tar" oci-layout index.json blobs)
    mv -f "$WORK/out.tar" "$OUTDIR/$outfile"
    echo "build-images: $OUTDIR/$outfile = $ref (manifest sha256:$manifest_digest)"
}

ENV='"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
build_image "$BUSYBOX_REF" oxlet-busybox.tar "$ENV,\"Cmd\":[\"sh\"]"
# sleep's argument must fit a 32-bit int in busybox; 2^31-1 seconds is 68 years.
build_image "$PAUSE_REF" oxlet-pause.tar "$ENV,\"Entrypoint\":[\"sleep\",\"2147483647\"]"

echo "$STAMP" >"$OUTDIR/.stamp"
