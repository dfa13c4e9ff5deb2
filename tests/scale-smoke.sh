#!/usr/bin/env bash
# CI's scale smoke: a real launch on an emulated cluster of SCALE_SMOKE_NODES
# (default 24) real slurmd nodes of 4 tasks each on this machine
# (docker/scale/cluster.sh: one slurmd per network + UTS + PID namespace),
# steps with --tf-cluster and --torch-cluster, block and cyclic, every task's
# variables checked against Slurm's own placement of that task, and
# --tf-cluster refused with the plugin absent; every node with 4 fixture GPUs
# (SCALE_SMOKE_GPUS=0: none), each task of a step bound to the CPU near its
# GPU, and left on Slurm's CPUs with --tf-bind=off. Installs Slurm and munge with
# apt when missing; root. The full benchmark is docker/scale-bench.sh.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$SECONDS
SCALE_GPUS=${SCALE_SMOKE_GPUS-4} SCALE_SMOKE=1 bash "$repo/docker/scale-bench.sh" "${SCALE_SMOKE_NODES:-24}" "${SCALE_SMOKE_TPN:-4}"
echo "scale-smoke: passed in $((SECONDS - t0)) s"
