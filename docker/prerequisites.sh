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
docker info >/dev/null 2>&1 || { echo "prerequisites: the Docker daemon is not reachable" >&2; exit 1; }
