#!/usr/bin/env bash
# Fetch the newer containerd releases the core suite also runs against, into a private
# folder: containerd 1.7 from Debian trixie and 2.x from Debian sid, beside the system's 1.6
# (bookworm). Nothing is installed: the packages are downloaded with a private apt state
# and unpacked with `dpkg -x`, and only their binaries are kept, one folder per series:
#
#   <dest>/containerd-1.7/bin/{containerd,containerd-shim-runc-v2,ctr}
#   <dest>/containerd-2/bin/{containerd,containerd-shim-runc-v2,ctr}
#
# Debian 12's runc (1.1.5) serves 1.6 and 1.7. containerd 2.x gets sid's runc (1.3 today; 1.2 or newer is required)
# beside it, as kind's nodes have: runc 1.2 or newer is what makes containerd report user
# namespace support. sid's runc needs sid's C library, so that library and libseccomp are
# kept in <dest>/containerd-2/runc-lib and runc is pointed at them (patchelf: its
# interpreter and library path); nothing on the host changes:
#
#   <dest>/containerd-2/bin/runc, <dest>/containerd-2/runc-lib/{ld-linux-x86-64.so.2,libc.so.6,libseccomp.so.2}
#
# A managed containerd's PATH starts with its own folder, so its shim finds that runc.
# A folder whose containerd (and runc) already reports the wanted series is kept, so a
# prepared machine needs no network.
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

# containerd 2.x's runc: 1.2 or newer (user namespaces), in its folder.
runc_dir=$dest/containerd-2
have_runc() {
    local v
    [ -x "$runc_dir/bin/runc" ] || return 1
    v=$("$runc_dir/bin/runc" --version 2>/dev/null | head -n1 | awk '{print $3}')
    [[ $v =~ ^([0-9]+)\.([0-9]+) ]] || return 1
    ((BASH_REMATCH[1] > 1 || (BASH_REMATCH[1] == 1 && BASH_REMATCH[2] >= 2)))
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
need_runc=
if [[ " ${needed[*]} " == *" containerd-2 "* ]]; then
    need_runc=1 # its folder is made anew
elif have_runc; then
    echo "fetch-runtimes: runc for containerd-2 present ($("$runc_dir/bin/runc" --version | head -n1 | awk '{print $3}'))"
else
    need_runc=1
fi
[ ${#needed[@]} -eq 0 ] && [ -z "$need_runc" ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/etc"
mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    head -n1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
suites=()
for s in "${needed[@]}"; do
    read -r _ suite _ <<<"$s"
    suites+=("$suite")
done
if [ -n "$need_runc" ]; then suites+=(sid); fi
printf '%s\n' "${suites[@]}" | sort -u | while read -r suite; do
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

# sid's runc, with sid's C library and libseccomp beside it.
if [ -n "$need_runc" ]; then
    command -v patchelf >/dev/null || {
        echo "fetch-runtimes: patchelf is needed (apt-get install patchelf)" >&2
        exit 1
    }
    [ -x "$runc_dir/bin/containerd" ] || {
        echo "fetch-runtimes: $runc_dir/bin/containerd missing; runc goes beside it" >&2
        exit 1
    }
    rm -f "$work"/*.deb
    (cd "$work" && apt-get "${apt_opts[@]}" -q download runc/sid libc6/sid libseccomp2/sid >/dev/null)
    rm -rf "$work/r" && mkdir "$work/r"
    for deb in "$work"/runc_*.deb "$work"/libc6_*.deb "$work"/libseccomp2_*.deb; do
        dpkg -x "$deb" "$work/r"
    done
    lib=$runc_dir/runc-lib
    rm -rf "$lib" && mkdir -p "$lib"
    for l in ld-linux-x86-64.so.2 libc.so.6 libseccomp.so.2; do
        install -m 0755 "$(readlink -f "$work/r/usr/lib/x86_64-linux-gnu/$l")" "$lib/$l"
    done
    install -m 0755 "$work/r/usr/sbin/runc" "$runc_dir/bin/runc"
    patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --set-rpath "$lib" "$runc_dir/bin/runc"
    if ! have_runc; then
        echo "fetch-runtimes: $(basename "$work"/runc_*.deb) does not run as runc 1.2 or newer" >&2
        "$runc_dir/bin/runc" --version >&2 || true
        exit 1
    fi
    echo "fetch-runtimes: containerd-2 runs runc $("$runc_dir/bin/runc" --version | head -n1 | awk '{print $3}') (from $(basename "$work"/runc_*.deb))"
fi
