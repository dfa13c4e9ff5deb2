#!/usr/bin/env bash
# Make sure the Debian base image `debian:<suite>` (or TAG) exists locally:
#   docker/base-image.sh [SUITE [TAG]]   SUITE bookworm, TAG debian:SUITE
# Where a registry is reachable, `docker pull` would do; this machine has none, so
# when the image is absent we debootstrap the suite and `docker import` it under the
# conventional tag. docker/node/Dockerfile's FROM names it (its ARG BASE).
set -euo pipefail
suite=${1:-bookworm}
tag=${2:-debian:$suite}

if docker image inspect "$tag" >/dev/null 2>&1; then
    exit 0
fi
if [ "${TF_CLUSTER_PULL:-0}" = 1 ] && docker pull "$tag"; then
    exit 0
fi

# Use the mirror the host's apt already uses (DEBIAN_MIRROR overrides).
mirror=${DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list.d/*.list 2>/dev/null |
    grep -oE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' | grep -oE 'https?://[^ ]+' | head -n1 || true)}
if [ -z "$mirror" ]; then
    echo "base-image: no Debian mirror found in /etc/apt; set DEBIAN_MIRROR" >&2
    exit 1
fi
command -v debootstrap >/dev/null || {
    echo "base-image: debootstrap is not installed (apt-get install debootstrap)" >&2
    exit 1
}

# A suite newer than the host's debootstrap (bookworm's knows trixie, not forky)
# is bootstrapped with the script of sid, which every newer suite shares.
script=
[ -e "/usr/share/debootstrap/scripts/$suite" ] || script=/usr/share/debootstrap/scripts/sid

root=$(mktemp -d /var/tmp/tfc-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base-image: debootstrap $suite from $mirror (a few minutes)" >&2
debootstrap --variant=minbase "$suite" "$root" "$mirror" $script >"$root.log" 2>&1 || {
    tail -n 20 "$root.log" >&2
    exit 1
}
rm -f "$root.log"
# Same apt sources as the official image so `apt-get update` works inside.
echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
# Testing's Release file expires a week after it is signed (Valid-Until); a mirror
# or snapshot that lags behind (this machine's forky: "Release file ... is expired
# (invalid since 15d ...)") would then make every `apt-get update` in the image fail.
if grep -q '^Valid-Until:' "$root/var/lib/apt/lists/"*_dists_"${suite}"_*Release 2>/dev/null; then
    echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99tfc-no-valid-until"
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$tag" >/dev/null
echo "base-image: imported $tag" >&2
