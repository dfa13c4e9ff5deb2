#!/usr/bin/env bash
# Installs what building and testing tf-cluster needs on a Debian host, and
# fails (never skips) when something cannot be had:
#   libslurm-dev  slurm/spank.h and slurm_version.h, read by build.rs
#   libclang1-14  what bindgen loads to parse them
#   libclang-common-14-dev  clang's stddef.h, which slurm.h needs
#   debootstrap   builds the testbed's base image when no registry is reachable
#   valgrind      the memory checks (tests/memcheck.sh)
#   rpm           rpmbuild and rpm: the RPM is built and inspected (packaging/rpm.sh, tests/packages.rs)
#   cpio          unpacks the RPM to check where its docs land (tests/packages.rs)
#   docker        runs the testbed
# With arguments, only those packages (docker/demo.sh: what the demo needs).
set -euo pipefail

pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(libslurm-dev libclang1-14 libclang-common-14-dev debootstrap valgrind rpm cpio)
need=()
for pkg in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "prerequisites: installing ${need[*]}" >&2
    sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "prerequisites: cargo (Rust ≥ 1.85) is not installed" >&2; exit 1; }
command -v docker >/dev/null || { echo "prerequisites: docker is not installed" >&2; exit 1; }

# The daemon. A machine may start dockerd just before this runs (a CI machine's
# init, under load) or not at all: wait for it up to TFC_DOCKER_WAIT seconds
# (120), and where no dockerd runs and this is root, start one (systemd's unit,
# else dockerd detached, logging to /var/log/dockerd.log).
start_dockerd() {
    if [ -d /run/systemd/system ]; then
        systemctl start docker || true
    else
        setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
    fi
}
wait_for_dockerd() {
    local limit=${TFC_DOCKER_WAIT:-120} t0=$SECONDS started= said=
    until docker info >/dev/null 2>&1; do
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            local why
            why=$(docker info 2>&1 >/dev/null | grep -v '^ *$' | tail -n 1 || true)
            echo "prerequisites: the Docker daemon is not reachable after $limit s${started:+ (dockerd started)}: ${why:-docker info failed}" >&2
            exit 1
        fi
        if [ -z "$started" ] && [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null &&
            ! pgrep -x dockerd >/dev/null; then
            echo "prerequisites: no dockerd runs: starting it" >&2
            start_dockerd
            started=1
        elif [ -z "$said" ]; then
            echo "prerequisites: waiting for the Docker daemon (up to $limit s)" >&2
            said=1
        fi
        sleep 1
    done
}
wait_for_dockerd

# Docker's storage driver. Some machines' Docker is set to fuse-overlayfs, where every
# file a container opens goes through a FUSE daemon and each image layer's commit walks
# the whole tree: the testbeds' Python frameworks open thousands of files each, and that
# driver was about a tenth of the suite's CPU (docs/testing.md). Where the kernel's own
# overlay mounts on Docker's data root, the daemon is restarted with overlay2, and
# only while it holds no image and no container (a fresh machine: nothing to hide, since
# a driver sees only the images built under it). TFC_DOCKER_DRIVER=keep leaves the
# daemon as it is; TFC_DOCKER_DRIVER=overlay2 switches with images there too (they stay
# on disk, seen again once the driver is set back).
docker_driver() { docker info --format '{{.Driver}}' 2>/dev/null; }
restart_dockerd() {
    if [ -d /run/systemd/system ]; then
        systemctl restart docker
    else
        # No systemd (a VM whose init started dockerd): stop it, start it detached.
        local pid
        pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)
        [ -z "$pid" ] || kill "$pid"
        for _ in $(seq 60); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        setsid nohup dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
    fi
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
    return 1
}
switch_to_overlay2() {
    local root probe
    root=$(docker info --format '{{.DockerRootDir}}')
    probe=$(mktemp -d "$root/tmp/tfc-overlay.XXXXXX" 2>/dev/null || mktemp -d)
    mkdir -p "$probe"/{l,u,w,m}
    if ! mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
        rm -rf "$probe"
        echo "prerequisites: Docker stays on fuse-overlayfs: the kernel's overlay does not mount on $root" >&2
        return 0
    fi
    umount "$probe/m"
    rm -rf "$probe"
    local conf=/etc/docker/daemon.json
    cp "$conf" "$conf.tfc-fuse-overlayfs" 2>/dev/null || echo '{}' >"$conf.tfc-fuse-overlayfs"
    python3 -c 'import json, sys
p = sys.argv[1]
try:
    d = json.load(open(p))
except FileNotFoundError:
    d = {}
d["storage-driver"] = "overlay2"
json.dump(d, open(p, "w"), indent=2)' "$conf"
    echo "prerequisites: Docker's storage driver: fuse-overlayfs -> overlay2 (the old $conf kept as $conf.tfc-fuse-overlayfs)" >&2
    if restart_dockerd && [ "$(docker_driver)" = overlay2 ]; then return 0; fi
    echo "prerequisites: dockerd did not come up with overlay2 (/var/log/dockerd.log); back to fuse-overlayfs" >&2
    cp "$conf.tfc-fuse-overlayfs" "$conf"
    restart_dockerd || { echo "prerequisites: the Docker daemon did not come back" >&2; exit 1; }
}
if [ "$(docker_driver)" = fuse-overlayfs ] && [ "${TFC_DOCKER_DRIVER:-}" != keep ] && [ "$(id -u)" = 0 ]; then
    if [ "${TFC_DOCKER_DRIVER:-}" = overlay2 ] ||
        [ -z "$(docker images -aq)$(docker ps -aq)" ]; then
        switch_to_overlay2
    else
        echo "prerequisites: Docker stays on fuse-overlayfs: it holds images or containers (TFC_DOCKER_DRIVER=overlay2 switches anyway)" >&2
    fi
fi
