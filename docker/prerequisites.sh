#!/usr/bin/env bash
# Installs what building and testing tf-cluster needs on a Debian host, and
# fails (never skips) when something cannot be had:
#   libslurm-dev  slurm/spank.h and slurm_version.h, read by build.rs
#   libclang1-14  what bindgen loads to parse them
#   libclang-common-14-dev  clang's stddef.h, which slurm.h needs
#   debootstrap   builds the testbed's base image when no registry is reachable
#   valgrind      the memory checks (tests/memcheck.sh)
#   libclang-rt-14-dev  libFuzzer, prebuilt, for the fuzz targets (fuzz/run.sh)
#   rpm           rpmbuild and rpm: the RPM is built and inspected (packaging/rpm.sh, tests/packages.rs)
#   cpio          unpacks the RPM to check where its docs land (tests/packages.rs)
#   docker        runs the testbed
# With arguments, only those packages (docker/demo.sh: what the demo needs).
set -euo pipefail

pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(libslurm-dev libclang1-14 libclang-common-14-dev libclang-rt-14-dev debootstrap valgrind
    rpm cpio)
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
# init, under load): wait for it up to TFC_DOCKER_WAIT seconds (120). Where no
# dockerd runs, this script starts one only when asked (TFC_DOCKER_START=1, as
# root: systemd's unit, else dockerd detached, logging to /var/log/dockerd.log);
# otherwise it says how and stops.
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
        if [ -z "$started" ] && command -v dockerd >/dev/null && ! pgrep -x dockerd >/dev/null; then
            if [ "${TFC_DOCKER_START:-0}" != 1 ] || [ "$(id -u)" != 0 ]; then
                echo "prerequisites: no Docker daemon runs: start it (systemctl start docker), or run this as root with TFC_DOCKER_START=1 to let it start one" >&2
                exit 1
            fi
            echo "prerequisites: no dockerd runs: starting it (TFC_DOCKER_START=1)" >&2
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
# driver was about a tenth of the suite's CPU (docs/testing.md). Changing it restarts
# Docker, so only when asked: TFC_DOCKER_DRIVER=overlay2 (as root, where the kernel's
# own overlay mounts on Docker's data root) sets overlay2 in /etc/docker/daemon.json,
# the old file kept beside it, and restarts the daemon; images built under the other
# driver stay on disk, seen again once it is set back. Without it, one line says so.
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
if [ "$(docker_driver)" = fuse-overlayfs ]; then
    if [ "${TFC_DOCKER_DRIVER:-}" = overlay2 ] && [ "$(id -u)" = 0 ]; then
        switch_to_overlay2
    else
        echo "prerequisites: Docker uses fuse-overlayfs, which makes the testbeds slower; TFC_DOCKER_DRIVER=overlay2 (as root) switches it to overlay2 and restarts Docker" >&2
    fi
fi
