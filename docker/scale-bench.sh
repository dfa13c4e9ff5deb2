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
#      tf-nopf  the same with --tf-preflight=false: tf/tf-nopf is the preflight's cost
#      torch    --torch-cluster
#    Ratios of medians: tf/none and torch/none (the plugin's work),
#    none/absent (loading it), none2/none (two identical series).
# 3. Probes (untimed steps, plugstack with two probe plugins around the plugin,
#    docker/scale/timer.c): task_init per task and user_init per node (µs
#    of CPU), the task process's VmHWM at the end of task_init (slurmstepd's
#    fork with the plugin's work in it) and the step's slurmstepd VmHWM;
#    srun -v's task-map RPC time and bytes.
#    Slurm's floor: the variables tf-cluster set in each task of a captured
#    step are set again by docker/scale/floor.c (spank_setenv, nothing
#    computed) in the plugin's place: floor-tf, floor-tf2 and floor-torch.
#    The probe steps run in PROBE_ROUNDS (default 3) rounds, each a random
#    order of absent none tf tf2 floor-tf floor-tf2 torch floor-torch;
#    tf2/tf and floor-tf2/floor-tf are the noise floor (A/A).
#    SCALE_PROBES_ONLY=1 skips the timed launches (2.).
#
# SCALE_GPUS=G: every node has G GPUs (fixture kernel files and device nodes,
# docker/scale/cluster.sh) and every step holds all of them (--gres=gpu:G);
# the checks add the binding (each task on the CPU near its GPU; Slurm's CPUs
# with --tf-bind=off), the timed and probe variants add tf-off and torch-off
# (--tf-bind=off): tf/tf-off and torch/torch-off are the binding's cost.
# SCALE_GPU_NEAR=all puts every GPU near every CPU: PyTorch's tasks are then
# bound to the CPUs they had (the binding's work without the emulation's cost
# of moving tasks of all nodes onto the same real CPU).
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
((${SCALE_GPUS:-0} == 0)) || scale_bind_check
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
    tf-nopf) scale_plugstack plugin; timed "$2" --tf-cluster=chief:1,worker:$((TASKS - 1)) --tf-preflight=false ;;
    torch) scale_plugstack plugin; timed "$2" --torch-cluster ;;
    tf-off) scale_plugstack plugin; timed "$2" --tf-cluster=chief:1,worker:$((TASKS - 1)) --tf-bind=off ;;
    torch-off) scale_plugstack plugin; timed "$2" --torch-cluster --tf-bind=off ;;
    esac
}
variants=(absent none none2 tf tf-nopf torch)
((${SCALE_GPUS:-0} == 0)) || variants=(absent none none2 tf tf-off torch torch-off)
if [ "${SCALE_PROBES_ONLY:-0}" = 1 ]; then ROUNDS=0; variants=(); fi
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
# Slurm's floor: what tf-cluster sets in each task, captured from a real step
# of the same shape (block): each task's environment with the option less the
# names in its environment without it (a value the plugin overrides, such as
# a gres CUDA_VISIBLE_DEVICES, is not in this testbed). One file per rank,
# NAME=VALUE\0 records, read by docker/scale/floor.c once per node.
capture() { # FW OPTION
    local fw=$1
    rm -rf "$SCALE_RUN/cap-$fw" "$SCALE_RUN/cap-none" && mkdir -p "$SCALE_RUN/cap-$fw" "$SCALE_RUN/cap-none"
    # shellcheck disable=SC2016 # expanded by the task's shell
    scale_step block "$2" sh -c 'env -0 >"$0/$SLURM_PROCID"' "$SCALE_RUN/cap-$fw" </dev/null >/dev/null ||
        scale_die "capture $fw failed"
    # shellcheck disable=SC2016
    scale_step block sh -c 'env -0 >"$0/$SLURM_PROCID"' "$SCALE_RUN/cap-none" </dev/null >/dev/null ||
        scale_die "capture none failed"
    python3 - "$SCALE_RUN/cap-$fw" "$SCALE_RUN/cap-none" "$SCALE_RUN/floor-$fw" "$TASKS" <<'PY' || scale_die "capture $fw: no variables"
import os, sys
with_, without, out, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
os.makedirs(out, exist_ok=True)
def env(p):
    return dict(r.split(b"=", 1) for r in open(p, "rb").read().split(b"\0") if b"=" in r)
names = set()
for rank in range(tasks):
    a, b = env(f"{with_}/{rank}"), env(f"{without}/{rank}")
    mine = {k: v for k, v in a.items() if k not in b}
    names |= set(mine)
    open(f"{out}/{rank}", "wb").write(b"".join(k + b"=" + v + b"\0" for k, v in sorted(mine.items())))
if not names:
    sys.exit(1)
print(os.path.basename(out) + ": " + " ".join(sorted(n.decode() for n in names)), file=sys.stderr)
PY
}
capture tf --tf-cluster=chief:1,worker:$((TASKS - 1))
capture torch --torch-cluster
probe_args() { # the step's options of a probe variant
    case $1 in
    tf | tf2) echo "--tf-cluster=chief:1,worker:$((TASKS - 1))" ;;
    torch) echo --torch-cluster ;;
    tf-off) echo "--tf-cluster=chief:1,worker:$((TASKS - 1)) --tf-bind=off" ;;
    torch-off) echo "--torch-cluster --tf-bind=off" ;;
    esac
}
probe_stack() {
    case $1 in
    absent) echo timed-absent ;;
    floor-tf | floor-tf2) echo timed-floor-tf ;;
    floor-torch) echo timed-floor-torch ;;
    *) echo timed ;;
    esac
}
probes=(absent none tf tf2 floor-tf floor-tf2 torch floor-torch)
((${SCALE_GPUS:-0} == 0)) || probes+=(tf-off torch-off)
for p in "${probes[@]}"; do : >"$SCALE_RUN/out/probe-$p"; done
PROBE_ROUNDS=${PROBE_ROUNDS:-3}
scale_note "$PROBE_ROUNDS probe rounds of ${probes[*]}, each round in a random order"
for ((i = 1; i <= PROBE_ROUNDS; i++)); do
    for p in $(printf '%s\n' "${probes[@]}" | shuf); do
        rm -rf "$SCALE_RUN/probe" && mkdir -p "$SCALE_RUN/probe"
        scale_plugstack "$(probe_stack "$p")"
        # shellcheck disable=SC2046 # no option or one
        scale_step block $(probe_args "$p") true >/dev/null 2>&1 </dev/null || scale_die "probe $p failed"
        cat "$SCALE_RUN/probe"/* >>"$SCALE_RUN/out/probe-$p"
    done
done
scale_plugstack plugin
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
echo "scale-bench: $SCALE_NODES nodes x $SCALE_TPN tasks = $TASKS tasks${SCALE_GPUS:+, $SCALE_GPUS GPUs per node}, $ROUNDS rounds ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%F))"
echo "checks: tf and torch, block and cyclic, every task right (${check_s} s)"
if ((ROUNDS)); then
printf '%-7s %10s %22s\n' variant median "p10 - p90"
declare -A med=()
for v in "${variants[@]}"; do
    # shellcheck disable=SC2086 # the list of times
    read -r m lo hi <<<"$(stats ${times[$v]})"
    med[$v]=$m
    awk -v v="$v" -v m="$m" -v lo="$lo" -v hi="$hi" \
        'BEGIN { printf "%-7s %7.1f ms %9.1f - %.1f ms\n", v, m / 1000, lo / 1000, hi / 1000 }'
done
awk -v a="${med[absent]}" -v n="${med[none]}" -v n2="${med[none2]}" -v tf="${med[tf]}" -v to="${med[torch]}" \
    -v np="${med[tf-nopf]:-}" -v tfo="${med[tf-off]:-}" -v too="${med[torch-off]:-}" 'BEGIN {
    printf "ratio none2/none  %.3f  (noise floor)\n", n2 / n
    if (np) printf "ratio tf/tf-nopf  %.3f  (the preflight)\n", tf / np
    if (tfo) printf "ratio tf/tf-off   %.3f  (binding each task to its GPUs\x27 CPUs)\n", tf / tfo
    if (too) printf "ratio torch/torch-off %.3f  (binding)\n", to / too
    printf "ratio none/absent %.3f  (loading the plugin)\n", n / a
    printf "ratio tf/none     %.3f\n", tf / n
    printf "ratio torch/none  %.3f\n", to / n }'
fi
read -r rpc_m rpc_lo rpc_hi <<<"$(stats "${rpc[@]}")"
echo "srun task-map RPC: median $rpc_m µs (p10 $rpc_lo, p90 $rpc_hi), map $bytes bytes"
us() { awk -v n="$1" 'BEGIN { if (n == "-") print "-"; else printf "%.1f", n / 1000 }'; }
for p in "${probes[@]}"; do
    printf 'probe %-11s task_init %6s µs cpu %6s µs wall %s faults per task (median of %s)  task VmHWM %s kB (max %s)  slurmstepd VmHWM %s kB  init %s µs, user_init %s µs cpu per node\n' \
        "$p" "$(us "$(probe_median task 6 "$p")")" "$(us "$(probe_median task 3 "$p")")" "$(probe_median task 7 "$p")" \
        "$(grep -c '^task' "$SCALE_RUN/out/probe-$p")" "$(probe_median task 4 "$p")" "$(probe_max task 4 "$p")" \
        "$(probe_median task 5 "$p")" "$(us "$(probe_median init 4 "$p")")" "$(us "$(probe_median user 4 "$p")")"
done
# task_init against Slurm's floor: medians of the probes' CPU per task.
pm() { probe_median task 6 "$1"; }
awk -v tf="$(pm tf)" -v tf2="$(pm tf2)" -v f="$(pm floor-tf)" -v f2="$(pm floor-tf2)" \
    -v to="$(pm torch)" -v ft="$(pm floor-torch)" -v n="$(pm none)" 'BEGIN {
    printf "task_init tf/floor-tf       %.3f\n", tf / f
    printf "task_init torch/floor-torch %.3f\n", to / ft
    printf "task_init tf2/tf            %.3f  (noise floor)\n", tf2 / tf
    printf "task_init floor-tf2/floor-tf %.3f  (noise floor)\n", f2 / f
    printf "task_init tf/none           %.3f  floor-tf/none %.3f\n", tf / n, f / n }'
((ROUNDS)) || exit 0
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
