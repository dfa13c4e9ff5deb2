#!/usr/bin/env bash
# Memory safety under valgrind's memcheck: the core over 1,000 resolutions of
# a 4,096-task step (every one of the 64 task environments about 16 times; a
# leak is reported at exit whatever the count, and 10,000 took 68 CPU-seconds
# against 9), and the CLI on such a step. Any invalid access or leak fails
# (exit 1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed" >&2; exit 1; }

vg=(valgrind --quiet --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect)
# The CLI named too (it has no such example), so that the dependencies' features
# unify as in tests/run.sh's build of the core's tests: with the core alone, clap,
# serde and criterion compiled again for this one example.
cargo build --profile tests --quiet -p tf-cluster-core -p tf-cluster-cli --example resolve_loop
"${vg[@]}" target/tests/examples/resolve_loop 4096 1000

nodes=$(printf 'node[0001-1024]')
for rank in 0 2049 4095; do
    env -i SLURM_PROCID=$rank SLURM_STEP_NUM_TASKS=4096 SLURM_STEP_NODELIST="$nodes" \
        SLURM_STEP_TASKS_PER_NODE='4(x1024)' SLURM_NODEID=$((rank / 4)) \
        SLURM_GTIDS=$(seq -s, $((rank / 4 * 4)) $((rank / 4 * 4 + 3))) \
        CUDA_VISIBLE_DEVICES=0,1,2,3 SLURM_STEP_RESV_PORTS=12000-12004 \
        "${vg[@]}" target/release/tf-cluster env --tf-cluster=chief:1,worker:4095 >/dev/null
    # An error path: exit 1 from the CLI itself, no valgrind error (exit 1 too,
    # but with its report on stderr).
    err=$(env -i SLURM_PROCID=$rank SLURM_STEP_NUM_TASKS=4096 SLURM_STEP_NODELIST="$nodes" \
        SLURM_STEP_TASKS_PER_NODE='4(x1024)' "${vg[@]}" target/release/tf-cluster env --tf-cluster=ps:1 \
        2>&1 >/dev/null) || true
    [ "$err" = "tf-cluster: --tf-cluster asks for 1 tasks (ps:1) but the step has 4096" ] ||
        { echo "memcheck: CLI error path: $err" >&2; exit 1; }
done
echo "memcheck: clean (core: 1,000 resolutions of 4,096 tasks; CLI: 6 runs, errors included)"
