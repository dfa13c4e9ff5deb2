#!/usr/bin/env bash
# Launch overhead of the plugin on a Slurm testbed of its own.
#
#   docker/launch-bench.sh [RUNS]      (RUNS per variant, default 60, at least 30)
#
# Times `srun -N3 -n6 … true` (a new allocation and one step, as a user runs it)
# in four variants, interleaved in a random order within each round so that
# load from elsewhere falls on all of them alike:
#   none    the plugin removed from plugstack.conf, `srun -N3 -n6 true`
#   none2   the same again: none2/none shows how far two identical series
#           differ on this machine (the noise floor of the ratios)
#   idle    the plugin in plugstack.conf, the same step without --tf-cluster
#   active  the plugin in plugstack.conf, `srun -N3 -n6 --tf-cluster=chief:1,worker:5 true`
# and prints each variant's median and spread, and the ratios of the medians
# (target: active/none <= 1.02). Each time is taken inside the controller
# container around srun alone (no docker exec in it).
#
# First, the cost of loading the .so alone: a small C program standing in for
# srun/slurmstepd (it exports the spank_*/slurm_* functions the plugin binds
# to) times dlopen(RTLD_NOW) + dlclose of the plugin, of a minimal C plugin,
# and of the plugin with libgcc_s (Rust's unwinder, which srun does not link)
# already loaded.
#
# It builds the plugin (cargo build --release), copies the .so aside (a build
# by someone else during the run cannot change it), brings up the testbed
# TFC_PREFIX (default tfcperf, so the default testbed `tfc` is not disturbed)
# and takes it down at the end (KEEP_UP=1 keeps it).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
RUNS=${1:-60}
[ "$RUNS" -ge 30 ] 2>/dev/null || { echo "launch-bench: RUNS must be a number >= 30" >&2; exit 2; }
export TFC_PREFIX=${TFC_PREFIX:-tfcperf}
[ "$TFC_PREFIX" != tfc ] || { echo "launch-bench: use a prefix other than tfc" >&2; exit 2; }
RUN_DIR=$here/run-$TFC_PREFIX
export TFC_PLUGIN_DIR=$RUN_DIR/plugin
# No package there: the testbed loads the bare .so copied below (testbed.sh).
export TFC_DEB_DIR=$RUN_DIR/no-deb
SPEC=chief:1,worker:5
testbed() { "$here/testbed.sh" "$@"; }
note() { echo "launch-bench: $*" >&2; }

cd "$repo"
note "building the plugin"
cargo build --release --lib >&2
mkdir -p "$TFC_PLUGIN_DIR"
cp target/release/libtf_cluster.so "$TFC_PLUGIN_DIR/.libtf_cluster.so.new"
mv -f "$TFC_PLUGIN_DIR/.libtf_cluster.so.new" "$TFC_PLUGIN_DIR/libtf_cluster.so"
so=$TFC_PLUGIN_DIR/libtf_cluster.so
note "plugin: $(stat -c %s "$so") bytes, $(readelf -rW "$so" | grep -c R_X86_64) relocations"

# dlopen cost, in microseconds: median and best of 2000 loads.
dl=$(mktemp -d)
cat >"$dl/host.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int slurm_debug(const char *f, ...) { return 0; }
int slurm_error(const char *f, ...) { return 0; }
int slurm_info(const char *f, ...) { return 0; }
int slurm_verbose(const char *f, ...) { return 0; }
int spank_get_item(void *s, int i, ...) { return 0; }
int spank_getenv(void *s, const char *n, char *b, int l) { return 0; }
int spank_option_getopt(void *s, void *o, char **a) { return 0; }
int spank_option_register(void *s, void *o) { return 0; }
int spank_remote(void *s) { return 0; }
int spank_setenv(void *s, const char *n, const char *v, int o) { return 0; }
const char *spank_strerror(int e) { return ""; }
char *slurm_strerror(int e) { return ""; }
void *slurm_job_step_layout_get(void *id) { return 0; }
void slurm_job_step_layout_free(void *l) {}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
int main(int argc, char **argv) {
    enum { N = 2000 };
    static double t[N];
    for (int i = 0; i < N; i++) {
        double t0 = now();
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!h || !dlsym(h, "slurm_spank_init")) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        dlclose(h);
        t[i] = now() - t0;
    }
    qsort(t, N, sizeof t[0], cmp);
    printf("%8.1f us median %8.1f us best\n", t[N / 2], t[0]);
    return 0;
}
C
cat >"$dl/minimal.c" <<'C'
const char plugin_name[] = "minimal";
const char plugin_type[] = "spank";
const unsigned int plugin_version = 0;
int slurm_spank_init(void *sp, int ac, char **av) { return 0; }
C
cc -O2 -rdynamic -o "$dl/host" "$dl/host.c" -ldl
cc -O2 -rdynamic -o "$dl/host-gcc_s" "$dl/host.c" -ldl -Wl,--no-as-needed -lgcc_s
cc -O2 -shared -fPIC -o "$dl/minimal.so" "$dl/minimal.c"
load_minimal=$("$dl/host" "$dl/minimal.so")
load_plugin=$("$dl/host" "$so")
load_plugin_gcc=$("$dl/host-gcc_s" "$so")
rm -rf "$dl"

if [ "${KEEP_UP:-0}" != 1 ]; then
    trap 'testbed down >/dev/null 2>&1 || true' EXIT
fi
testbed up >&2

# One timed step, in microseconds, measured inside the controller.
# shellcheck disable=SC2016 # $(...) is for the container's shell
timed() {
    testbed exec bash -c '
        t0=$(date +%s%N)
        srun -N3 -n6 "$@" true >/dev/null 2>&1 || exit 1
        t1=$(date +%s%N)
        echo $(( (t1 - t0) / 1000 ))' timed "$@"
}

run() {
    case $1 in
    none | none2) testbed plugstack empty 2>/dev/null; timed </dev/null ;;
    idle) testbed plugstack default 2>/dev/null; timed </dev/null ;;
    active) testbed plugstack default 2>/dev/null; timed "--tf-cluster=$SPEC" </dev/null ;;
    esac
}

# The plugin must really be at work in `active`, and really absent in `none`.
testbed plugstack default 2>/dev/null
n=$(testbed exec srun -N3 -n6 "--tf-cluster=$SPEC" printenv TF_CONFIG | grep -c '"chief"')
[ "$n" = 6 ] || { note "error: with the plugin, $n of 6 tasks got TF_CONFIG"; exit 1; }
# ... with srun's task map (not a fallback verdict) in every task.
n=$(testbed exec srun -N3 -n6 "--tf-cluster=$SPEC" printenv SLURM_TF_CLUSTER | grep -cE '^1;[0-9]+\.[0-9]+;hosts=node')
[ "$n" = 6 ] || { note "error: $n of 6 tasks got srun's task map"; exit 1; }
testbed plugstack empty 2>/dev/null
if testbed exec srun -N3 -n6 "--tf-cluster=$SPEC" true >/dev/null 2>&1; then
    note "error: --tf-cluster was accepted with the plugin removed"; exit 1
fi

note "warming up"
for v in none idle active none idle active; do run $v >/dev/null; done

declare -A times=([none]="" [none2]="" [idle]="" [active]="")
note "$RUNS rounds of none, none2, idle and active, each round in a random order"
for ((i = 1; i <= RUNS; i++)); do
    for v in $(printf '%s\n' none none2 idle active | shuf); do
        t=$(run "$v") || { note "error: a $v step failed"; exit 1; }
        times[$v]+="$t "
    done
    [ $((i % 10)) -ne 0 ] || note "round $i of $RUNS"
done
testbed plugstack default 2>/dev/null

# slurmctld's answer to srun's one task-map RPC per step, as srun -v logs it
# ("task map of step J.S from slurmctld in N µs"), over 30 steps.
rpc=()
for ((i = 1; i <= 30; i++)); do
    rpc+=("$(testbed exec srun -v -N3 -n6 "--tf-cluster=$SPEC" true 2>&1 </dev/null |
        sed -n 's/.*task map of step .* from slurmctld in \([0-9]*\) µs.*/\1/p')")
done
for r in "${rpc[@]}"; do
    [ -n "$r" ] || { note "error: srun -v did not log the map's RPC"; exit 1; }
done

# median, 10th and 90th percentile (ms) of the times given as arguments.
stats() {
    printf '%s\n' "$@" | sort -n | awk '{ t[NR] = $1 / 1000 }
        END { m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
              printf "%.1f %.1f %.1f\n", m, t[int(NR * 0.1) + 1], t[int(NR * 0.9)] }'
}
# shellcheck disable=SC2086 # word splitting of the time lists is wanted
{
    read -r none_m none_lo none_hi <<<"$(stats ${times[none]})"
    read -r none2_m none2_lo none2_hi <<<"$(stats ${times[none2]})"
    read -r idle_m idle_lo idle_hi <<<"$(stats ${times[idle]})"
    read -r active_m active_lo active_hi <<<"$(stats ${times[active]})"
}
echo
echo "loading the .so ($(stat -c %s "$so") bytes), dlopen + dlclose, 2000 times:"
echo "  minimal C plugin             $load_minimal"
echo "  tf-cluster                   $load_plugin"
echo "  tf-cluster, libgcc_s loaded  $load_plugin_gcc"
echo
read -r rpc_m rpc_lo rpc_hi <<<"$(stats "${rpc[@]}")"
echo "task-map RPC (slurm_job_step_layout_get) in srun, 30 steps: median $rpc_m ms, p10 - p90 $rpc_lo - $rpc_hi ms"
echo
echo "srun -N3 -n6 true, new allocation + step, $RUNS runs per variant, interleaved ($(nproc) cores, $(date -u +%F))"
printf '%-8s %10s %18s\n' variant median "p10 - p90"
printf '%-8s %8s ms %8s - %s ms\n' none "$none_m" "$none_lo" "$none_hi"
printf '%-8s %8s ms %8s - %s ms\n' none2 "$none2_m" "$none2_lo" "$none2_hi"
printf '%-8s %8s ms %8s - %s ms\n' idle "$idle_m" "$idle_lo" "$idle_hi"
printf '%-8s %8s ms %8s - %s ms\n' active "$active_m" "$active_lo" "$active_hi"
awk -v n="$none_m" -v n2="$none2_m" -v i="$idle_m" -v a="$active_m" 'BEGIN {
    printf "ratio none2/none  %.3f  (two identical series: the noise floor)\n", n2 / n
    printf "ratio idle/none   %.3f\n", i / n
    printf "ratio active/none %.3f  (target <= 1.02)\n", a / n }'
