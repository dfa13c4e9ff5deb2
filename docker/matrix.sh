#!/usr/bin/env bash
# The Slurm version matrix: for each Debian suite (so each Slurm), build the plugin
# against that Slurm's own headers and run every testbed test binary
# (tests/testbed*.rs) on testbeds of that suite. The suites run side by side.
#
#   docker/matrix.sh [SUITE..]          default: $SUITES, else "bookworm trixie forky"
#   docker/matrix.sh --images [SUITE..] only the images (and their Slurm headers)
#
# Per suite S (bookworm: Slurm 22.05, trixie: 24.11, forky: 26.05), all suites at
# once (each waits mostly on Slurm, the network and its containers):
#   1. docker/testbed.sh headers target/slurm-S/include
#        base image debian:S (debootstrap when absent), node image tfc-node:S, and
#        the /usr/include/slurm of the image's libslurm-dev copied out; the
#        suites' images build side by side
#   2. SLURM_INCLUDE_DIR=target/slurm-S/include TFC_SLURM_HEADERS_DIGEST=… \
#        cargo build --release --lib --features fault-injection, then
#        packaging/deb.sh target/slurm-S/deb (each .so's plugin_version checked
#        against the headers': packaging/slurm-headers.sh)
#        the fault-injection build tests/testbed_hardening.rs loads (kept as
#        target/slurm-S/release/libtf_cluster_fault.so), and the Debian package
#        of the plugin and CLI for that Slurm, which every container of the
#        testbed installs (built with this host's Rust: its glibc is older than
#        any suite's, so the .so loads in each). In the host's own target dir,
#        one suite's build at a time: only the plugin crate depends on the
#        headers, so the dependencies and the CLI are built once (by the host
#        stage), and each suite compiles the plugin twice.
#   3. the test binaries, each run directly (built once, before the suites, by
#      `cargo test --profile tests --no-run`; they only drive srun through
#      docker/testbed.sh) with TFC_SUITE=S TFC_PREFIX=tfc-ID-S
#      TFC_PLUGIN_DIR=target/slurm-S/release TFC_DEB_DIR=target/slurm-S/deb,
#      in two lanes side by side, each on its own testbed:
#        the binaries that bring the testbed up in another configuration
#        (tests that call testbed_with_topology, testbed_with_gres, any
#        testbed_with_*) one after another on testbed tfc-ID-S-alt, those
#        asking for one configuration next to each other (brought up once);
#        every other one from a queue both lanes take from (the longest
#        first): on testbed tfc-ID-S, TFC_MATRIX_BINARIES (default 1) at a
#        time (tests/common/mod.rs's lock keeps a test that swaps
#        plugstack.conf alone on its testbed, across binaries), and on
#        tfc-ID-S-alt once its own binaries are done
#      each testbed comes up on its first test and is removed afterwards
#      (TFC_KEEP=1 keeps them).
# ID is a hash of this checkout's path (TFC_MATRIX_PREFIX=P gives P-S instead), so
# runs from two checkouts on one Docker host never share a testbed; the default
# testbed (prefix tfc, docker/run) is never touched. The prefixes are printed.
#
# Logs: target/matrix/S/NAME.log per test binary (and build.log, image.log), so
# suites running side by side never interleave. Any failure (a suite that cannot
# be built, started or tested) fails the run after the remaining suites have run;
# nothing is skipped; the failing suite and test binary are named and the tail of
# its log printed. The time per suite, build and test binary is printed at the end
# (tests/stages.sh: wall, CPU, containers' CPU). TFC_CARGO_TEST_ARGS adds
# arguments to every test binary (e.g. --test-threads=2); TFC_MATRIX_SUITES=1 runs
# the suites one after another; TFC_MATRIX_ONLY="testbed_a testbed_b" runs only
# those binaries.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
images_only=0
if [ "${1:-}" = --images ]; then images_only=1; shift; fi
suites=("$@")
[ ${#suites[@]} -gt 0 ] || read -ra suites <<<"${SUITES:-bookworm trixie forky}"
[ ${#suites[@]} -gt 0 ] || { echo "matrix: no suites" >&2; exit 1; }

log() { echo "matrix[$1]: ${*:2}" >&2; }

prefix=${TFC_MATRIX_PREFIX:-tfc-$(printf %s "$repo" | sha256sum | cut -c1-6)}
logs=target/matrix
mkdir -p "$logs"
# Called by tests/run.sh, the times go to its file (its report shows them);
# alone, to one of our own, reported at the end.
report=0
if [ -z "${STAGES_FILE:-}" ]; then
    export STAGES_FILE=$repo/$logs/stages.tsv
    : >"$STAGES_FILE"
    report=1
fi
# shellcheck source=tests/stages.sh
source tests/stages.sh
# shellcheck source=packaging/slurm-headers.sh
source packaging/slurm-headers.sh

# Builds the image of suite $1 and copies its Slurm headers out, holding the
# suite's image lock: a suite of the matrix started while `--images` still
# builds its image (tests/run.sh starts both) waits for that build, then finds
# the image built. `--images` starts the suite's image.log anew; the matrix
# appends to it.
image() {
    local suite=$1 out=$logs/$1/image.log
    mkdir -p "$logs/$suite"
    if ! (
        flock 7
        [ $images_only = 0 ] || : >"$out"
        echo "== $(date -u +%FT%TZ) docker/testbed.sh headers" >>"$out"
        TFC_SUITE=$suite TFC_PREFIX=$prefix-$suite \
            docker/testbed.sh headers "target/slurm-$suite/include" >>"$out" 2>&1
    ) 7>"$logs/$suite/.image.lock"; then
        log "$suite" "image build FAILED; the end of $out:"
        tail -n 30 "$out" >&2
        return 1
    fi
}

if [ $images_only = 1 ]; then
    # Side by side: the builds (debootstrap, apt, pip) mostly wait on the
    # network and the disk.
    log all "building the images of ${suites[*]} side by side (logs: $logs/SUITE/image.log)"
    pids=()
    for suite in "${suites[@]}"; do
        stage "image $suite" image "$suite" &
        pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    [ $report = 0 ] || stage_report "matrix: the images"
    exit $rc
fi

# One run at a time per checkout: they would share testbeds and target dirs.
exec 9>target/.matrix.lock
flock -n 9 || { echo "matrix: another docker/matrix.sh is running in $repo" >&2; exit 1; }

# Every testbed test binary, so one added later runs on every version too; those
# that bring the testbed up in another configuration get a testbed of their own.
shared=() alone=()
for f in tests/testbed*.rs; do
    # TFC_MATRIX_ONLY="a b": only these binaries (while working on them; CI runs all).
    if [ -n "${TFC_MATRIX_ONLY:-}" ] && ! [[ " $TFC_MATRIX_ONLY " == *" $(basename "$f" .rs) "* ]]; then continue; fi
    if grep -q 'testbed_with_' "$f"; then alone+=("$(basename "$f" .rs)"); else shared+=("$(basename "$f" .rs)"); fi
done
# The alone binaries that ask for the same configuration (the same
# testbed_with_…(…) call) one after another: the second finds the testbed up.
if [ ${#alone[@]} -gt 1 ]; then
    mapfile -t alone < <(for name in "${alone[@]}"; do
        printf '%s\t%s\n' "$(grep -o 'testbed_with_[a-z_]*([^)]*)' "tests/$name.rs" | head -n 1)" "$name"
    done | sort | cut -f2)
fi
# The binaries that take longest on a loaded machine, first in the queue, so
# that neither lane is left with a long one at the end; the rest follow in
# name order.
longest=(testbed_elastic testbed_launchers testbed_frameworks testbed_launchers_torchx
    testbed_requeue testbed_network testbed_templates testbed_hardening testbed_containers
    testbed_tensorflow testbed_refusals testbed_inherited testbed_package)

# The shared binaries' queue: the longest first, then the rest.
queue=()
for name in "${longest[@]}"; do
    [[ " ${shared[*]} " != *" $name "* ]] || queue+=("$name")
done
for name in "${shared[@]}"; do
    [[ " ${queue[*]} " == *" $name "* ]] || queue+=("$name")
done

# The test binaries, built once (the host's build: they only drive docker):
# name and path of each in $logs/binaries.tsv.
build_tests() {
    local -a args=()
    local name
    for name in "${shared[@]}" "${alone[@]}"; do args+=(--test "$name"); done
    cargo test --profile tests --no-run --message-format=json "${args[@]}" |
        jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
            | [.target.name, .executable] | @tsv' >"$logs/binaries.tsv"
}
stage "matrix: build the test binaries" build_tests || { echo "matrix: the test binaries did not build" >&2; exit 1; }
declare -A exe
while IFS=$'\t' read -r name path; do exe[$name]=$path; done <"$logs/binaries.tsv"
for name in "${shared[@]}" "${alone[@]}"; do
    [ -x "${exe[$name]:-}" ] || { echo "matrix: no executable for tests/$name.rs" >&2; exit 1; }
done

# The plugin for suite $1: the fault-injection build first, then the package
# (plugin and CLI): both in the host's target dir (the dependencies are built
# once), each .so and the CLI copied out of cargo's way into $dir/release, laid
# out as a target dir's release/ (tests/testbed_prefix.rs installs from it).
build_plugin() {
    local suite=$1 dir=target/slurm-$1 v why
    v=$(awk '/define SLURM_VERSION_NUMBER/ { print $3 }' "$dir/include/slurm/slurm_version.h")
    log "$suite" "plugin for Slurm $((v >> 16)).$(printf %02d $(((v >> 8) & 255))).$((v & 255))"
    mkdir -p "$dir/release"
    SLURM_INCLUDE_DIR="$dir/include" TFC_SLURM_HEADERS_DIGEST=$(headers_digest "$dir/include") \
        cargo build --release --lib --features fault-injection || return 1
    why=$(plugin_mismatch target/release/libtf_cluster.so "$v") || { log "$suite" "error: $why"; return 1; }
    install -m 755 target/release/libtf_cluster.so "$dir/release/libtf_cluster_fault.so"
    SLURM_INCLUDE_DIR="$dir/include" bash packaging/deb.sh "$dir/deb" >/dev/null || return 1
    install -m 755 target/release/libtf_cluster.so target/release/tf-cluster "$dir/release/"
    # The container tests' stand-in of a container plugin (tests/container_standin/),
    # against the same headers; beside the plugin, mounted at /opt/tf-cluster.
    cc -shared -fPIC -O2 -Wall -Wextra -Werror -I"$dir/include" \
        -o "$dir/release/container_standin.so" tests/container_standin/container_standin.c || return 1
    if cmp -s "$dir/release/libtf_cluster.so" "$dir/release/libtf_cluster_fault.so"; then
        log "$suite" "error: cargo left the fault-injection build in place of the plugin"
        return 1
    fi
}

# The trainings that run on one suite. Each line: the suite, the binary, and its tests
# that run there only (none: the whole binary); elsewhere cargo test reports them as
# filtered out, never as passed. What differs between the suites is Slurm, and Debian's
# PyTorch (1.13, 2.6, 2.14); the Slurm side of every training below (the values, het
# steps, ports, refusals, requeues) is checked on every suite by the other tests.
# - Clients that are one PyPI release on every suite (TensorFlow, JAX and Ray, pinned in
#   docker/node/Dockerfile; TorchX and submitit, pinned in their tests): one suite each.
#   Lightning and Accelerate (PyPI, on Debian's torch >= 2.1: trixie and forky) train on
#   trixie here and on forky through tests/testbed_templates.rs. Ray is in bookworm's
#   image only (docker/node/test-tools.sh).
# - Debian's PyTorch: every suite trains plain DDP, torchrun, elastic torchrun with a
#   worker that fails once, a requeued torchrun job and a torchrun worker's error file;
#   the other PyTorch trainings take turns (each on one suite, on each suite some), as
#   their own controls say where it matters: torch 1.13 shares no rendezvous store, so
#   the control of the store per round runs on trixie, where the training ends without.
one_suite="
bookworm testbed_tensorflow
bookworm testbed_requeue a_preempted_tensorflow_job_resumes_from_its_checkpoint
bookworm testbed_network tensorflow_mwms_follows_the_host_template pytorch_gloo_follows_the_host_template
bookworm testbed_ports a_pytorch_and_a_tensorflow_job_on_one_node_both_train
bookworm testbed_ray a_ray_cluster_per_step_on_the_fast_network two_users_ray_clusters_on_the_same_nodes another_user_cannot_use_a_running_ray_cluster
bookworm testbed_elastic two_elastic_steps_at_once_on_the_same_nodes
bookworm testbed_frameworks two_pytorch_steps_at_once_reserved_ports_vs_job_id_port
trixie testbed_frameworks jax_allreduce_three_nodes
trixie testbed_network jax_cpu_collectives_stay_on_the_hosts_own_name pytorch_gloo_follows_the_subnet
trixie testbed_launchers lightning_slurm_environment accelerate_launch_per_node
trixie testbed_launchers_torchx
trixie testbed_elastic without_a_store_per_round_a_worker_that_fails_once_ends_the_training
forky testbed_templates
forky testbed_launchers_sbatch submitit_additional_parameters_train submitit_from_the_environment_trains
forky testbed_elastic the_node_of_rank_0_lost_when_it_is_not_the_stores
forky testbed_frameworks pytorch_ddp_uneven_layout
"
# The binaries that run on their suite after every suite's lanes have ended, one
# at a time on a quiet machine: Ray's clusters miss Ray's own start-up limits
# (fixed in Ray) when three suites load the 2 cores.
at_the_end="
bookworm testbed_ray
"

# A name there that no test has (a renamed test) would quietly run everywhere.
while read -r there binary tests; do
    [ -n "$there" ] || continue
    [[ " bookworm trixie forky " == *" $there "* ]] && [ -f "tests/$binary.rs" ] ||
        { echo "matrix: one_suite names no such suite or binary: $there $binary" >&2; exit 1; }
    for t in $tests; do
        grep -q "^fn $t()" "tests/$binary.rs" ||
            { echo "matrix: one_suite names no test $t in tests/$binary.rs" >&2; exit 1; }
    done
done <<<"$one_suite"

# Runs test binary $2 of suite $1 on testbed $3, output to its log; a failure
# is recorded in $logs/failed.
run_binary() {
    local suite=$1 name=$2 bed=$3 dir=target/slurm-$1
    local out=$logs/$suite/$name.log
    # The tests that need what only forky's image has (Apptainer, from sid)
    # are #[ignore]d: reported as ignored elsewhere, run here.
    local -a only_here=()
    [ "$suite" != forky ] || only_here=(--include-ignored)
    # The trainings $one_suite gives another suite: --skip, with --exact names.
    local there binary tests
    while read -r there binary tests; do
        [ "$binary" = "$name" ] && [ "$there" != "$suite" ] || continue
        if [ -z "$tests" ]; then
            echo "$name: runs on $there only" >"$out"
            return 0
        fi
        [[ " ${only_here[*]} " == *" --exact "* ]] || only_here+=(--exact)
        for t in $tests; do only_here+=(--skip "$t"); done
    done <<<"$one_suite"
    # shellcheck disable=SC2086 # TFC_CARGO_TEST_ARGS: words
    if ! TFC_SUITE=$suite TFC_PREFIX=$bed TFC_PLUGIN_DIR=$dir/release TFC_DEB_DIR=$dir/deb \
        stage "$suite $name" "${exe[$name]}" "${only_here[@]}" ${TFC_CARGO_TEST_ARGS-} >"$out" 2>&1; then
        echo "$suite $name" >>"$logs/failed"
        log "$suite" "$name FAILED (log: $out)"
        return 1
    fi
}

# Claims binary $2 of suite $1 from the suite's queue: true for the one lane
# that gets it (mkdir is atomic).
claim() { mkdir "$logs/$1/.claims/$2" 2>/dev/null; }

# Runs, on testbed $2 of suite $1, first the binaries $4.. (its own: one at a
# time, or up to $TFC_MATRIX_BINARIES at a time when $3 = many), then every
# binary of the suite's shared queue (${queue[@]}) that no other lane has
# claimed; then removes the testbed. Both lanes take from the queue, so a lane
# whose own binaries end early takes the others' work (its testbed is brought
# up again in the default configuration by the first of them).
run_lane() {
    local suite=$1 bed=$2 at_once=1 rc=0 name
    shift 2
    if [ "$1" = many ]; then at_once=${TFC_MATRIX_BINARIES:-1}; fi
    shift
    for name in "$@" "${queue[@]}"; do
        # A free slot first, then the claim: no lane holds a binary it has not started.
        while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do wait -n || rc=1; done
        if [[ " $* " != *" $name "* ]] && ! claim "$suite" "$name"; then continue; fi
        run_binary "$suite" "$name" "$bed" &
    done
    while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || rc=1; done
    if [ "${TFC_KEEP:-0}" != 1 ]; then
        TFC_SUITE=$suite TFC_PREFIX=$bed docker/testbed.sh down >>"$logs/$suite/testbed.log" 2>&1 || rc=1
    fi
    return $rc
}

# Runs one suite; returns non-zero when anything failed.
run_suite() {
    local suite=$1 rc=0
    mkdir -p "$logs/$suite"
    stage "$suite image" image "$suite" || { echo "$suite image" >>"$logs/failed"; return 1; }
    # One plugin build at a time: CPU-bound, while the other suites' tests wait.
    if ! (flock 8 && stage "$suite plugin build" build_plugin "$suite") 8>target/.matrix-build.lock \
        >"$logs/$suite/build.log" 2>&1; then
        echo "$suite build" >>"$logs/failed"
        log "$suite" "plugin build FAILED; the end of $logs/$suite/build.log:"
        tail -n 30 "$logs/$suite/build.log" >&2
        return 1
    fi
    log "$suite" "testing (logs: $logs/$suite/)"
    rm -rf "$logs/$suite/.claims"
    mkdir -p "$logs/$suite/.claims"
    local there name
    while read -r there name; do
        [ "$there" != "$suite" ] || claim "$suite" "$name" || true
    done <<<"$at_the_end"
    # The binaries that run whole on this suite only (one_suite) first in its queue:
    # elsewhere they end at once, here they are among the longest.
    local -a own=() queue_here=()
    local tests
    while read -r there name tests; do
        [ "$there" = "$suite" ] && [ -z "$tests" ] && [[ " ${queue[*]} " == *" $name "* ]] || continue
        own+=("$name")
    done <<<"$one_suite"
    queue_here=("${own[@]}")
    for name in "${queue[@]}"; do
        [[ " ${own[*]} " == *" $name "* ]] || queue_here+=("$name")
    done
    local -a queue=("${queue_here[@]}")
    log "$suite" "testbeds $prefix-$suite and $prefix-$suite-alt (first ${alone[*]}), the queue: ${queue[*]}"
    run_lane "$suite" "$prefix-$suite" many &
    local p1=$!
    run_lane "$suite" "$prefix-$suite-alt" one "${alone[@]}" &
    local p2=$!
    wait $p1 || rc=1
    wait $p2 || rc=1
    return $rc
}

rm -f "$logs/failed"
# A suite that failed without naming a part (it should not happen) is named whole.
suite() { stage "$1 total" run_suite "$1" || grep -q "^$1 " "$logs/failed" 2>/dev/null || echo "$1 suite" >>"$logs/failed"; }
pids=()
for suite in "${suites[@]}"; do
    if [ "${TFC_MATRIX_SUITES:-0}" = 1 ]; then
        suite "$suite"
    else
        suite "$suite" &
        pids+=($!)
    fi
done
for p in "${pids[@]}"; do wait "$p"; done
while read -r suite name; do
    [ -n "$suite" ] && [[ " ${suites[*]} " == *" $suite "* ]] && [ -x "${exe[$name]:-}" ] || continue
    log "$suite" "$name, alone at the end"
    run_binary "$suite" "$name" "$prefix-$suite" || true
    [ "${TFC_KEEP:-0}" = 1 ] ||
        TFC_SUITE=$suite TFC_PREFIX=$prefix-$suite docker/testbed.sh down >>"$logs/$suite/testbed.log" 2>&1 || true
done <<<"$at_the_end"

[ $report = 0 ] || stage_report "matrix: time per suite, build and test binary"
if [ -s "$logs/failed" ]; then
    while read -r suite name; do
        echo "==== FAILED: suite $suite, $name: the end of $logs/$suite/$name.log" >&2
        if [ -f "$logs/$suite/$name.log" ]; then
            grep -E '^test .* FAILED$|^failures:$|^    [a-z_0-9]+$' "$logs/$suite/$name.log" >&2 || true
            tail -n 60 "$logs/$suite/$name.log" >&2
        fi
    done <"$logs/failed"
    echo "matrix: FAILED: $(tr '\n' ',' <"$logs/failed" | sed 's/,$//; s/,/, /g') (testbed logs: docker/run-$prefix-SUITE*/log)" >&2
    exit 1
fi
echo "matrix: passed on ${suites[*]}" >&2
