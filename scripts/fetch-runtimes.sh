#!/usr/bin/env bash
# Fetch the newer containerd releases the core suite also runs against, into a private
# folder: containerd 1.7 from Debian trixie and 2.x from Debian sid, beside the system's 1.6
# (bookworm). Nothing is installed: the packages are downloaded with a private apt state
# and unpacked with `dpkg -x`, and only their binaries are kept, one folder per series:
#
#   <dest>/containerd-1.7/bin/{containerd,containerd-shim-runc-v2,ctr}
#   <dest>/containerd-2/bin/{containerd,containerd-shim-runc-v2,ctr}
#
# Debian 12's runc serves all three. A folder whose containerd already reports the wanted
# series is kept, so a prepared machine needs no network.
#
# Usage: fetch-runtimes.sh [dest]   (default: target/runtimes under the repo)
set -euo pipefail
cd "$(dirname "$0")/.."

dest=${1:-${OXLET_RUNTIMES:-$PWD/target/runtimes}}
mkdir -p "$dest"

# series name, Debian suite, the version prefix `containerd --version` must show (upstream
# builds print a leading "v", Debian's do not)
SERIES=("containerd-1.7 trixie 1.7." "containerd-2 sid 2.")

have() { # folder, version prefix
    local bin=$1/bin/containerd
    [ -x "$bin" ] && "$bin" --version 2>/dev/null | awk '{print $3}' | grep -Eq "^v?$2"
}

needed=()
for s in "${SERIES[@]}"; do
    read -r name suite prefix <<<"$s"
    if have "$dest/$name" "$prefix"; then
        echo "fetch-runtimes: $name present ($("$dest/$name/bin/containerd" --version | awk '{print $3}'))"
    else
        needed+=("$s")
    fi
done
[ ${#needed[@]} -eq 0 ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/etc"
mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    head -n1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
for s in "${needed[@]}"; do
    read -r _ suite _ <<<"$s"
    echo "deb [signed-by=$keyring] ${mirror%/} $suite main" >>"$work/etc/sources.list"
done
apt_opts=(
    -o "Dir::State=$work/state" -o "Dir::State::Lists=$work/state/lists"
    -o "Dir::State::status=/dev/null" -o "Dir::Cache=$work/cache"
    -o "Dir::Etc::SourceList=$work/etc/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "APT::Get::List-Cleanup=false" -o "APT::Sandbox::User=root"
)
echo "fetch-runtimes: reading the package lists of ${mirror%/} ($(awk '{print $4}' "$work/etc/sources.list" | xargs))"
apt-get "${apt_opts[@]}" -q update >"$work/update.log" 2>&1 || {
    cat "$work/update.log" >&2
    exit 1
}

for s in "${needed[@]}"; do
    read -r name suite prefix <<<"$s"
    (cd "$work" && apt-get "${apt_opts[@]}" -q download "containerd/$suite" >/dev/null)
    deb=$(ls -t "$work"/containerd_*.deb | head -n1)
    rm -rf "$work/x" && mkdir "$work/x" && dpkg -x "$deb" "$work/x"
    rm -rf "${dest:?}/$name" && mkdir -p "$dest/$name/bin"
    for b in containerd containerd-shim-runc-v2 ctr; do
        install -m 0755 "$work/x/usr/bin/$b" "$dest/$name/bin/$b"
    done
    rm -f "$deb"
    if ! have "$dest/$name" "$prefix"; then
        echo "fetch-runtimes: $deb from $suite does not report containerd $prefix*" >&2
        exit 1
    fi
    echo "fetch-runtimes: $name is $("$dest/$name/bin/containerd" --version | awk '{print $3}') (from $(basename "$deb"))"
done
