#!/usr/bin/env bash
# The GPU check of `--tf-bind=gpu` on a real NVIDIA node, for an admin after
# installing the plugin (no GPU on the project's CI: there it is skipped, one
# line, exit 77, never counted as passed):
#
#   bash tests/gpu-affinity.sh [SRUN_ARGS..]     e.g. -p gpu -w gpu-node1
#   bash tests/gpu-affinity.sh --parse FILE      the CPU affinity per GPU of a saved
#                                                `nvidia-smi topo -m` (tests/gpu_check.rs)
#
# One step of one task per GPU of one node (`srun -N1 --gpus-per-task=1
# --ntasks=<the node's GPUs> --tf-cluster`); each task prints its GPU's PCI bus id
# (nvidia-smi inside the task, which sees its own GPU) and its Cpus_allowed_list.
# Passes when every task's CPUs are non-empty, within `nvidia-smi topo -m`'s CPU
# affinity of its GPU, and no two tasks share a CPU. Equal to that affinity where
# the task's GPU is alone on its CPUs in the step; several GPUs near the same CPUs
# split them (docs/user-guide.md).
set -euo pipefail

# The CPU list as one CPU a line.
expand() {
    local part lo hi
    tr ',' '\n' <<<"$1" | while read -r part; do
        [ -n "$part" ] || continue
        lo=${part%-*} hi=${part#*-}
        seq "$lo" "$hi"
    done
}

# GPU index and CPU affinity, a line each, of `nvidia-smi topo -m`'s text on stdin
# (tab-separated; colour codes removed): the header's "CPU Affinity" column.
parse_topo() {
    sed 's/\x1b\[[0-9;]*m//g' | awk -F'\t' '
        !col { for (i = 1; i <= NF; i++) { f = $i; gsub(/^ +| +$/, "", f); if (f == "CPU Affinity") col = i } next }
        /^GPU[0-9]+\t/ { g = $1; sub(/^GPU/, "", g); a = $col; gsub(/ /, "", a); print g, a }
        /^$/ { exit }'
}

if [ "${1:-}" = --parse ]; then
    parse_topo <"$2"
    exit 0
fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-affinity: skipped: no NVIDIA GPU here (nvidia-smi finds none)"
    exit 77
fi
command -v srun >/dev/null || { echo "gpu-affinity: skipped: no srun here"; exit 77; }

# On the node the step gets: its GPUs' bus ids by index, and their affinity.
host=$(srun -N1 -n1 "$@" hostname)
gpus=$(srun -N1 -n1 -w "$host" "$@" nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader | tr -d ' ')
count=$(grep -c . <<<"$gpus")
topo=$(srun -N1 -n1 -w "$host" "$@" nvidia-smi topo -m | parse_topo)
tasks=$(srun -N1 -w "$host" -n "$count" --gpus-per-task=1 --tf-cluster "$@" bash -c \
    'echo "$SLURM_LOCALID $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -n1 | tr -d " ") $(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status)"')

fail=0 seen=''
while read -r task bus cpus; do
    index=$(awk -F, -v b="$bus" '$2 == b { print $1 }' <<<"$gpus")
    near=$(awk -v g="$index" '$1 == g { print $2 }' <<<"$topo")
    if [ -z "$index" ] || [ -z "$near" ]; then
        echo "gpu-affinity: task $task: GPU $bus not in nvidia-smi's list or topology"; fail=1; continue
    fi
    outside=$(comm -23 <(expand "$cpus" | sort) <(expand "$near" | sort))
    shared=$(comm -12 <(expand "$cpus" | sort) <(tr ' ' '\n' <<<"$seen" | grep . | sort))
    if [ -z "$cpus" ] || [ -n "$outside" ] || [ -n "$shared" ]; then
        echo "gpu-affinity: task $task on GPU $index: CPUs $cpus, GPU's affinity $near: FAILED"
        fail=1
    else
        echo "gpu-affinity: task $task on GPU $index: CPUs $cpus within $near"
    fi
    seen="$seen $(expand "$cpus" | tr '\n' ' ')"
done <<<"$tasks"
[ "$fail" = 0 ] && echo "gpu-affinity: $count tasks on $host: passed"
exit "$fail"
