#!/usr/bin/env bash
# The plugin's launch cost on an emulated cluster of many real slurmd nodes.
#
#   docker/scale-bench.sh NODES TASKS_PER_NODE [ROUNDS]     (ROUNDS default 20)
#   SCALE_SMOKE=1 docker/scale-bench.sh NODES TASKS_PER_NODE   checks only (CI)
#
# The cluster (docker/scale/cluster.sh): slurmctld plus one real slurmd per
# node, each in its own network and UTS namespace, on this machine alone; no
# Docker (a container per node would cost far more than the slurmd it holds).
# Root, Debian 12; installs Slurm 22.05 and munge with apt when missing.
#
# 1. Checks: within one allocation of all nodes, steps with --tf-cluster and
#    with --torch-cluster, block and cyclic: every task's variables against
#    Slurm's own placement of that task (scale_check). With the plugin absent
#    from plugstack.conf, --tf-cluster must be refused.
# 2. Timing: ROUNDS rounds of steps `srun -N NODES --ntasks-per-node=TPN true`
#    in the allocation, variants in a random order within each round, the
#    round's distribution alternating block / cyclic:
#      absent   plugstack.conf without the plugin
#      none     the plugin loaded, the step does not ask for it
#      none2    the same again: none2/none is the noise floor
#      tf       --tf-cluster=chief:1,worker:N-1
#      torch    --torch-cluster
#    Ratios of medians: tf/none and torch/none (the plugin's work),
#    none/absent (loading it), none2/none (two identical series).
# 3. Probes (untimed steps, plugstack with two probe plugins around the plugin,
#    docker/scale/timer.c): task_init per task (µs), the task process's VmHWM
#    at the end of task_init (slurmstepd's fork with the plugin's work in it)
#    and the step's slurmstepd VmHWM; srun -v's task-map RPC time and bytes.
#
# Everything runs in a private mount namespace and stops on exit (trap).
set -Eeuo pipefail
# Fail loudly: name the command that failed.
trap 'echo "scale-bench: error: line $LINENO: \"$BASH_COMMAND\" failed (exit $?)" >&2' ERR

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
SCALE_SELF=$here/$(basename "${BASH_SOURCE[0]}")
SCALE_HERE=$here/scale
SCALE_NAME=scale-bench
# shellcheck source=docker/scale/cluster.sh
source "$SCALE_HERE/cluster.sh"

usage() { sed -n '2,/^set -euo/p' "$SCALE_SELF" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
SCALE_NODES=$1 SCALE_TPN=$2 ROUNDS=${3:-20}
[[ $SCALE_NODES =~ ^[0-9]+$ && $SCALE_NODES -ge 1 && $SCALE_NODES -le 1000 ]] || usage
[[ $SCALE_TPN =~ ^[0-9]+$ && $SCALE_TPN -ge 1 && $SCALE_TPN -le 64 ]] || usage
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 2 ]] || usage
TASKS=$((SCALE_NODES * SCALE_TPN))

if [ -z "${SCALE_IN_NS:-}" ]; then
    # Outside the namespace: build, then re-execute inside it.
    scale_install
    if [ -z "${SCALE_SO:-}" ]; then
        scale_note "building the plugin"
        (cd "$repo" && cargo build --release --lib >&2)
        export SCALE_SO=$repo/target/release/libtf_cluster.so
    fi
    scale_enter "$@"
fi
SCALE_PREFIX=${SCALE_PREFIX:-tfcs$$}
SCALE_RUN=$(mktemp -d "/tmp/$SCALE_PREFIX.XXXXXX")
trap 'scale_down; [ "${KEEP_RUN:-0}" = 1 ] || rm -rf "$SCALE_RUN"' EXIT
scale_up "$SCALE_SO"
SCALE_JOB=$(scale_alloc)
[ -n "$SCALE_JOB" ] || scale_die "no allocation"

# 1. Every task of every kind of step, checked.
t0=$SECONDS
for fw in tf torch; do
    for dist in block cyclic; do scale_check "$fw" "$dist"; done
done
scale_plugstack absent
if scale_step block --tf-cluster=chief:1,worker:$((TASKS - 1)) true >/dev/null 2>&1; then
    scale_die "--tf-cluster was accepted with the plugin absent"
fi
scale_plugstack plugin
check_s=$((SECONDS - t0))
if [ "${SCALE_SMOKE:-0}" = 1 ]; then
    scale_note "smoke: $SCALE_NODES nodes x $SCALE_TPN tasks, tf and torch, block and cyclic: every task right (${check_s} s)"
    exit 0
fi

# 2. Timed steps, in microseconds (srun alone).
timed() {
    local dist=$1 t0 t1
    shift
    t0=$EPOCHREALTIME
    scale_step "$dist" "$@" true >/dev/null 2>&1 </dev/null || return 1
    t1=$EPOCHREALTIME
    echo $(((${t1/./} - ${t0/./})))
}
run() {
    case $1 in
    absent) scale_plugstack absent; timed "$2" ;;
    none | none2) scale_plugstack plugin; timed "$2" ;;
    tf) scale_plugstack plugin; timed "$2" --tf-cluster=chief:1,worker:$((TASKS - 1)) ;;
    torch) scale_plugstack plugin; timed "$2" --torch-cluster ;;
    esac
}
variants=(absent none none2 tf torch)
scale_note "warming up"
for v in "${variants[@]}"; do run "$v" block >/dev/null; done
declare -A times=()
scale_note "$ROUNDS rounds of ${variants[*]}, each round in a random order"
for ((i = 1; i <= ROUNDS; i++)); do
    dist=block; ((i % 2)) || dist=cyclic
    for v in $(printf '%s\n' "${variants[@]}" | shuf); do
        t=$(run "$v" "$dist") || scale_die "a $v $dist step failed"
        times[$v]+="$t "
    done
    [ $((i % 5)) -ne 0 ] || scale_note "round $i of $ROUNDS"
done
scale_plugstack plugin

# 3. Probes.
probe() { # NAME PLUGSTACK SRUN-ARGS..: per-task lines of docker/scale/timer.c
    local name=$1 stack=$2 k
    shift 2
    rm -rf "$SCALE_RUN/probe" && mkdir -p "$SCALE_RUN/probe"
    scale_plugstack "$stack"
    for k in 1 2 3; do scale_step block "$@" true >/dev/null 2>&1 </dev/null || scale_die "probe $name failed"; done
    cat "$SCALE_RUN/probe"/* >"$SCALE_RUN/out/probe-$name"
    scale_plugstack plugin
}
probe absent timed-absent
probe none timed
probe tf timed --tf-cluster=chief:1,worker:$((TASKS - 1))
probe torch timed --torch-cluster
rpc=() bytes=""
for ((i = 1; i <= 10; i++)); do
    line=$(scale_step block -v --tf-cluster=chief:1,worker:$((TASKS - 1)) true 2>&1 </dev/null |
        grep -m1 'task map of step .* from slurmctld in') || scale_die "srun -v did not log the task map's RPC"
    rpc+=("$(sed 's/.* in \([0-9]*\) µs.*/\1/' <<<"$line")")
    bytes=$(sed 's/.* µs, \([0-9]*\) bytes.*/\1/' <<<"$line")
done

# median, p10, p90 of the numbers given
stats() {
    printf '%s\n' "$@" | sort -n | awk '{ t[NR] = $1 }
        END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
              hi = int(NR * 0.9); if (hi < 1) hi = 1
              printf "%s %s %s\n", m, t[int(NR * 0.1) + 1], t[hi] }'
}
# median of column $2 of the lines of kind $1 in probe file $3
probe_median() { awk -v k="$1" -v c="$2" '$1 == k { print $c }' "$SCALE_RUN/out/probe-$3" | sort -n |
    awk '{ t[NR] = $1 } END { print NR ? t[int((NR + 1) / 2)] : "-" }'; }
probe_max() { awk -v k="$1" -v c="$2" '$1 == k && $c > m { m = $c } END { print m + 0 }' "$SCALE_RUN/out/probe-$3"; }

echo
echo "scale-bench: $SCALE_NODES nodes x $SCALE_TPN tasks = $TASKS tasks, $ROUNDS rounds ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F))"
echo "checks: tf and torch, block and cyclic, every task right (${check_s} s)"
printf '%-7s %10s %22s\n' variant median "p10 - p90"
declare -A med=()
for v in "${variants[@]}"; do
    # shellcheck disable=SC2086 # the list of times
    read -r m lo hi <<<"$(stats ${times[$v]})"
    med[$v]=$m
    awk -v v="$v" -v m="$m" -v lo="$lo" -v hi="$hi" \
        'BEGIN { printf "%-7s %7.1f ms %9.1f - %.1f ms\n", v, m / 1000, lo / 1000, hi / 1000 }'
done
awk -v a="${med[absent]}" -v n="${med[none]}" -v n2="${med[none2]}" -v tf="${med[tf]}" -v to="${med[torch]}" 'BEGIN {
    printf "ratio none2/none  %.3f  (noise floor)\n", n2 / n
    printf "ratio none/absent %.3f  (loading the plugin)\n", n / a
    printf "ratio tf/none     %.3f\n", tf / n
    printf "ratio torch/none  %.3f\n", to / n }'
read -r rpc_m rpc_lo rpc_hi <<<"$(stats "${rpc[@]}")"
echo "srun task-map RPC: median $rpc_m µs (p10 $rpc_lo, p90 $rpc_hi), map $bytes bytes"
us() { awk -v n="$1" 'BEGIN { if (n == "-") print "-"; else printf "%.1f", n / 1000 }'; }
for p in absent none tf torch; do
    printf 'probe %-6s task_init %6s µs cpu %6s µs wall %s faults per task (median of %s)  task VmHWM %s kB (max %s)  slurmstepd VmHWM %s kB  init %s µs cpu per node\n' \
        "$p" "$(us "$(probe_median task 6 "$p")")" "$(us "$(probe_median task 3 "$p")")" "$(probe_median task 7 "$p")" \
        "$(grep -c '^task' "$SCALE_RUN/out/probe-$p")" "$(probe_median task 4 "$p")" "$(probe_max task 4 "$p")" \
        "$(probe_median task 5 "$p")" "$(us "$(probe_median init 4 "$p")")"
done
# One line for BENCHMARKS.md's table: nodes, tasks per node, tasks, none
# (ms), ratios none2/none, none/absent, tf/none, torch/none, RPC, map bytes,
# slurmstepd VmHWM absent/tf, task process VmHWM none/tf at the end of
# task_init, task_init CPU µs per task absent/none/tf/torch.
printf 'ROW | %s | %s | %s | %.0f | %.3f | %.3f | %.3f | %.3f | %s µs | %s | %s / %s | %s / %s | %s / %s / %s / %s |\n' \
    "$SCALE_NODES" "$SCALE_TPN" "$TASKS" "$(us "${med[none]}")" \
    "$(awk "BEGIN{print ${med[none2]}/${med[none]}}")" "$(awk "BEGIN{print ${med[none]}/${med[absent]}}")" \
    "$(awk "BEGIN{print ${med[tf]}/${med[none]}}")" "$(awk "BEGIN{print ${med[torch]}/${med[none]}}")" \
    "$rpc_m" "$bytes" "$(probe_median task 5 absent)" "$(probe_median task 5 tf)" \
    "$(probe_median task 4 none)" "$(probe_median task 4 tf)" \
    "$(us "$(probe_median task 6 absent)")" "$(us "$(probe_median task 6 none)")" \
    "$(us "$(probe_median task 6 tf)")" "$(us "$(probe_median task 6 torch)")"
