#!/usr/bin/env bash
# Multi-node Slurm testbed for tf-cluster: one controller + three compute nodes in
# Docker containers (plain `docker`, no compose), Debian's Slurm, 4 fake GPUs per node.
#
#   docker/testbed.sh up          build image, (re)create network + containers, wait
#                                 until node[1-3] are idle (idempotent: running
#                                 containers with unchanged config are kept, drained
#                                 nodes resumed; any failure exits non-zero)
#   docker/testbed.sh down        remove containers and network (docker/run/ is kept)
#   docker/testbed.sh status      containers, sinfo, squeue
#   docker/testbed.sh exec CMD..  run CMD in tfc-ctl as alice, cwd /home/alice,
#                                 e.g. `docker/testbed.sh exec srun -N3 -n6 hostname`
#   docker/testbed.sh admin CMD.. run CMD in tfc-ctl as root (scontrol update ...)
#   docker/testbed.sh node-exec NODE CMD..  run CMD as root in tfc-NODE (NODE=node1..)
#   docker/testbed.sh logs [ctl|node1|..] [LINES]   tail slurmctld/slurmd logs
#   docker/testbed.sh plugstack FILE|default|empty   swap /etc/slurm/plugstack.conf
#   docker/testbed.sh headers DIR build the image and copy its Slurm's headers to
#                                 DIR/slurm: SLURM_INCLUDE_DIR=DIR builds the plugin for
#                                 exactly the Slurm of TFC_SUITE (docker/matrix.sh does)
#
# Containers: tfc-ctl (hostname ctl: munged + slurmctld, and MariaDB + slurmdbd
# for real accounting; the submit host, tests run srun/sbatch there) and tfc-node1..3 (hostnames node1..3: munged + slurmd -D,
# /dev/nvidia0..3 fake GPUs). Every name (ctl, node1..3) resolves in
# every container through the user-defined network `tfc` (eth0). A second network,
# `tfc-ib` (eth1 in every container: Docker names the interfaces), is the "fast
# network": only there do node1-ib..node3-ib (and ctl-ib) resolve, to the eth1
# addresses (host-template={}-ib; tests/testbed/network.rs disconnects a node from it).
#
# The Slurm configuration is in docker/config/ (slurm.conf, gres.conf, cgroup.conf,
# and topology/NAME/ for TFC_TOPOLOGY=NAME); `up` copies it to the run dir.
# Generated files (git-ignored) live in docker/run/ (TFC_RUN_DIR): etc/ is
# bind-mounted as /etc/slurm (slurm.conf, gres.conf, cgroup.conf, plugstack.conf)
# in every container, munge.key is the shared key, log/<host>/ holds each daemon's
# log (also readable after a container died), home/ is /home in every container
# (shared like NFS on a real cluster: /home/alice = docker/run/home/alice, uid 1000;
# sbatch output files land there; `down` deletes it).
#
# The nodes are NOT privileged: the default device cgroup already allows mknod of
# the fake GPUs and /sys/fs/cgroup is visible read-only, which is all slurmd needs
# with proctrack/linuxproc + task/none. (--privileged fails on a Docker daemon that
# lacks a capability itself, e.g. "unable to apply caps: operation not permitted".)
# The nodes run without Docker's seccomp filter (--security-opt seccomp=unconfined,
# no capability added): a container runtime (the tests' stand-in of pyxis, rootless
# runc) creates user and mount namespaces as the job's user, which that filter
# refuses without CAP_SYS_ADMIN.
# TFC_NODE_FLAGS adds `docker run` flags for the nodes, e.g. TFC_NODE_FLAGS=--privileged.
#
# The plugin, as admins install it: the Debian package in ${TFC_DEB_DIR:-<repo>/target/deb}
# (packaging/deb.sh; docker/matrix.sh builds one per suite) is mounted at
# /opt/tfc-deb and every container `apt-get install`s it at start (entrypoint.sh),
# so images stay shared and the package's own plugstack snippet enables it:
# /etc/slurm/plugstack.conf.d/ is a per-container directory
# (docker/run/plugstack.d/<host>, emptied when the container is created) mounted
# over the shared /etc/slurm, and the default plugstack.conf is the one
# slurm-wlm-basic-plugins ships (`include /etc/slurm/plugstack.conf.d/*.conf`).
# A new .deb recreates the containers at the next `up`.
# Without a .deb there (a development shortcut, e.g. docker/launch-bench.sh), the
# bare .so is used: the default plugstack.conf is then plugstack.conf.example with
# its path replaced by /opt/tf-cluster/libtf_cluster.so; with neither, an empty
# plugstack.conf (with a warning). ${TFC_PLUGIN_DIR:-<repo>/target/release} is
# mounted read-only at /opt/tf-cluster in all containers either way (it holds the
# fault-injection build tests/testbed/faults.rs and hostile.rs point plugstack lines at).
# TFC_PLUGSTACK=FILE|empty at `up` overrides the default.
#
# Swapping plugstack.conf at run time (no restart needed for srun/sbatch and new
# steps: srun and every slurmstepd read it afresh; slurmd itself only reads it at
# start, which matters only for job prolog/epilog callbacks):
#   docker/testbed.sh plugstack my-plugstack.conf   # copy FILE in (atomic rename)
#   docker/testbed.sh plugstack empty               # no plugin at all
#   docker/testbed.sh plugstack default             # back to the generated default
# or do the same from a test: write docker/run/etc/.plugstack.conf.XXXX, then
# rename(2) it onto docker/run/etc/plugstack.conf (same directory => atomic).
# Never rewrite the file in place: a step starting meanwhile could read half a file.
#
# Slurm versions: TFC_SUITE picks the Debian suite and so the Slurm (bookworm 22.05,
# trixie 24.11, forky 26.05). The config differs only where the version demands:
# from 24.11 on cgroup.conf says CgroupPlugin=disabled (nothing here needs cgroups,
# and an unprivileged container cannot manage them), before that autodetect (22.05
# always loads one). TFC_TOPOLOGY=tree adds TopologyPlugin=topology/tree with the
# switches s1 = node[1,3] and s2 = node2, under which Slurm 26.05 (not 22.05/24.11)
# lays block distributions out as node1, node3, node2 (tests/testbed_topology_tree/).
# TFC_TOPOLOGY=tree2: switches s1 = node[2-3], s2 = node1; 26.05 starts block
# layouts on node2 (node2, node3, node1), so rank 0 is not on node1
# (tests/testbed_topology_tree2.rs). TFC_TOPOLOGY=block: topology/block with the
# one-node blocks b1 = node3, b2 = node1, b3 = node2; 26.05 lays blocks out as
# node3, node1, node2 (tests/testbed_topology_block.rs). Slurm before 23.11 has no
# topology/block: there `block` configures no topology plugin (with a warning).
#
# TFC_GRES=NAME: docker/config/gres/NAME.conf in place of gres.conf (vendors: each
# node another vendor's environment flag, tests/testbed_topology_tree/gpu_vendors.rs).
#
# TFC_STEPMGR=1 adds SlurmctldParameters=enable_stepmgr and PrologFlags=Contain:
# every job's steps go to its step manager, which `srun --async` (26.05) needs
# (tests/testbed_stepmgr.rs).
#
# Environment: TFC_PREFIX (tfc: containers tfc-ctl, tfc-node1..3, networks tfc and
# tfc-ib, run dir docker/run; another prefix P gives P-ctl …, networks P and P-ib,
# docker/run-P),
# TFC_SUITE (bookworm), TFC_IMAGE_STAGE (full, see below), TFC_IMAGE (tfc-node:$TFC_SUITE),
# TFC_BASE_IMAGE (debian:$TFC_SUITE: the base; another tag, e.g. a fresh one to time a build
# from nothing, is made by docker/base-image.sh too), TFC_TOPOLOGY, TFC_GRES, TFC_STEPMGR, TFC_RUN_DIR,
# TFC_DEB_DIR, TFC_PLUGIN_DIR, TFC_PLUGSTACK, TFC_PLUGSTACK_EXAMPLE (<repo>/plugstack.conf.example),
# TFC_NODE_FLAGS, TFC_UP_TIMEOUT (seconds to wait for idle nodes, 120).
#
# TFC_IMAGE_STAGE=slurm builds and runs only the first stage of docker/node/Dockerfile
# (`docker build --target slurm`, image tfc-node-slurm:$TFC_SUITE): Slurm, munge and
# the small tools, a few minutes to build where the full image (the default stage, full:
# TensorFlow, PyTorch, JAX, MariaDB…) takes twenty; docker/demo.sh uses it. What that
# image lacks is left out at start-up: without slurmdbd and MariaDB, slurm.conf's
# accounting lines are dropped (no sacct; `up` waits for no database); without
# busybox-static and squashfs-tools the container tests' images are not made. The
# tests need the full image.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
SUITE=${TFC_SUITE:-bookworm}
# The stage of docker/node/Dockerfile: full (the tests') or slurm (the demo's).
STAGE=${TFC_IMAGE_STAGE:-full}
case "$STAGE" in
full) IMAGE=${TFC_IMAGE:-tfc-node:$SUITE} ;;
slurm) IMAGE=${TFC_IMAGE:-tfc-node-slurm:$SUITE} ;;
*) echo "testbed: error: TFC_IMAGE_STAGE must be full or slurm, not '$STAGE'" >&2; exit 1 ;;
esac
# The Debian image it is built on (docker/base-image.sh makes it when absent).
BASE=${TFC_BASE_IMAGE:-debian:$SUITE}
# Whether the image has slurmdbd and MariaDB (build_image tells): else no accounting.
ACCOUNTING=1
# TFC_PREFIX names an independent testbed (containers, network, run dir), so
# several can run side by side, e.g. one per Slurm version.
PREFIX=${TFC_PREFIX:-tfc}
NET=$PREFIX
# The second ("fast") network, eth1 in every container.
NET_IB=$PREFIX-ib
if [ "$PREFIX" = tfc ]; then RUN=${TFC_RUN_DIR:-$here/run}; else RUN=${TFC_RUN_DIR:-$here/run-$PREFIX}; fi
PLUGIN_DIR=${TFC_PLUGIN_DIR:-$repo/target/release}
DEB_DIR=${TFC_DEB_DIR:-$repo/target/deb}
UP_TIMEOUT=${TFC_UP_TIMEOUT:-120}
NODES=(node1 node2 node3)
CTL=$PREFIX-ctl
PLUGIN_SO=/opt/tf-cluster/libtf_cluster.so

die() { echo "testbed: error: $*" >&2; exit 1; }
note() { echo "testbed: $*" >&2; }
exists() { docker container inspect "$1" >/dev/null 2>&1; }
running() { [ "$(docker container inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }
all_containers() { echo "$CTL"; for n in "${NODES[@]}"; do echo "$PREFIX-$n"; done; }
state_of() { local s; s=$(docker container inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$1" 2>/dev/null) || s=absent; echo "$s"; }
host_of() { case "$1" in "$PREFIX"-*) echo "${1#"$PREFIX"-}" ;; *) echo "$1" ;; esac; }

command -v docker >/dev/null || die "docker is not installed"

# By concern, each file's functions: the configuration written to the run dir,
# the image, the containers.
# shellcheck source=docker/testbed/config.sh
source "$here/testbed/config.sh"
# shellcheck source=docker/testbed/image.sh
source "$here/testbed/image.sh"
# shellcheck source=docker/testbed/containers.sh
source "$here/testbed/containers.sh"

sub=${1:-}
[ $# -gt 0 ] && shift
case "$sub" in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
status) cmd_status "$@" ;;
exec) cmd_exec "$@" ;;
admin) cmd_admin "$@" ;;
node-exec) cmd_node_exec "$@" ;;
logs) cmd_logs "$@" ;;
plugstack) cmd_plugstack "$@" ;;
headers) cmd_headers "$@" ;;
help | -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
   die "unknown subcommand '${sub}' (see above)" ;;
esac
