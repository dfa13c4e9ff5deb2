#!/usr/bin/env bash
# The Slurm version matrix: for each Debian suite (so each Slurm), build the plugin
# against that Slurm's own headers and run the testbed tests on testbeds of that
# suite, where tests/where.tsv places them. The suites run side by side.
#
#   docker/matrix.sh [SUITE..]          default: $SUITES, else "bookworm trixie forky"
#   docker/matrix.sh --images [SUITE..] only the images (and their Slurm headers)
#   docker/matrix.sh --check            only the check of tests/where.tsv against the
#                                       tests (no Docker), which every run does first
#
# Per suite S (bookworm: Slurm 22.05, trixie: 24.11, forky: 26.05), all suites at
# once (each waits mostly on Slurm, the network and its containers):
#   1. docker/testbed.sh headers target/slurm-S/include
#        base image debian:S (debootstrap when absent), node image tfc-node:S, and
#        the /usr/include/slurm of the image's libslurm-dev copied out; the
#        suites' images build side by side
#   2. SLURM_INCLUDE_DIR=target/slurm-S/include TFC_SLURM_HEADERS_DIGEST=… \
#        cargo build --profile tests -p tf-cluster --lib --features fault-injection, then
#        packaging/deb.sh target/slurm-S/deb (each .so's plugin_version checked
#        against the headers': packaging/slurm-headers.sh)
#        the fault-injection build tests/testbed/faults.rs and hostile.rs load (kept as
#        target/slurm-S/release/libtf_cluster_fault.so), and the Debian package
#        of the plugin and CLI for that Slurm, which every container of the
#        testbed installs (built with this host's Rust: its glibc is older than
#        any suite's, so the .so loads in each). In the host's own target dir,
#        one suite's build at a time: only the plugin crate depends on the
#        headers, so the dependencies and the CLI are built once (by the host
#        stage), and each suite compiles the plugin twice.
#   3. the units of tests/where.tsv (a testbed binary whole, or one module of it),
#      each run directly (the binaries built once, before the suites, by
#      `cargo test --profile tests -p tf-cluster --no-run`; they only drive srun through
#      docker/testbed.sh) with the exact names of its tests that run on S,
#      TFC_SUITE=S TFC_PREFIX=tfc-ID-S TFC_PLUGIN_DIR=target/slurm-S/release
#      TFC_DEB_DIR=target/slurm-S/deb, in two lanes side by side, each on its own
#      testbed:
#        the units of lane alt (the testbed in another configuration) one after
#        another on testbed tfc-ID-S-alt, in the file's order;
#        those of lane main from a queue both lanes take from (the file's order,
#        the units of lane first, then those on S alone first; a unit of lane
#        first with its testbed's containers at 8 times the others' CPU
#        weight while it runs): on testbed tfc-ID-S, TFC_MATRIX_BINARIES
#        (default 1) at a time (tests/common/testbed.rs's lock keeps a test that
#        swaps plugstack.conf alone on its testbed, across processes), and on
#        tfc-ID-S-alt once its own units are done
#      each testbed comes up on its first test and is removed afterwards
#      (TFC_KEEP=1 keeps them).
# ID is a hash of this checkout's path (TFC_MATRIX_PREFIX=P gives P-S instead), so
# runs from two checkouts on one Docker host never share a testbed; the default
# testbed (prefix tfc, docker/run) is never touched. The prefixes are printed.
#
# Logs: target/matrix/S/LABEL.log per unit (LABEL: the binary, or binary.module;
# and build.log, image.log), so suites running side by side never interleave. Any
# failure (a suite that cannot be built, started or tested, a test tests/where.tsv
# does not place) fails the run after the remaining suites have run; nothing is
# skipped; the failing suite and unit are named and the tail of its log printed.
# The time per suite, build and unit is printed at the end (tests/stages.sh: wall,
# CPU, containers' CPU). TFC_CARGO_TEST_ARGS adds arguments to every test binary
# (e.g. --test-threads=2); TFC_MATRIX_FILTER=TEXT runs only the tests whose name
# holds TEXT; TFC_MATRIX_SUITES=1 runs the suites one after another;
# TFC_MATRIX_ONLY="a b" runs only those units (a label, a binary, a module, or
# testbed_MODULE).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
images_only=0 check_only=0
if [ "${1:-}" = --images ]; then images_only=1; shift; fi
if [ "${1:-}" = --check ]; then check_only=1; shift; fi
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
# The check alone (--check) takes no lock and keeps its lists apart.
lists=$logs/check
if [ $check_only = 0 ]; then
    exec 9>target/.matrix.lock
    flock -n 9 || { echo "matrix: another docker/matrix.sh is running in $repo" >&2; exit 1; }
    lists=$logs
fi

# Where each test runs: tests/where.tsv alone (tests/where.sh reads it). The
# testbed binaries are its lines of every lane but host; a unit is a binary
# whole or one module of it, run as one queue entry (`binary --exact` with its
# tests' names), its log target/matrix/S/LABEL.log (LABEL: the binary, or
# binary.module).
# shellcheck source=tests/where.sh
source tests/where.sh
known_suites="bookworm trixie forky"
mapfile -t binaries < <(where_binaries alt main first)

# The test binaries, built once (the host's build: they only drive docker):
# name and path of each in $lists/binaries.tsv. The same command as
# tests/run.sh's, which builds them first.
build_tests() {
    local -a args=()
    local name
    for name in "${binaries[@]}"; do args+=(--test "$name"); done
    cargo test --profile tests -p tf-cluster --no-run --message-format=json "${args[@]}" |
        jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
            | [.target.name, .executable] | @tsv' >"$lists/binaries.tsv"
}
# Every test of every testbed binary, "binary<TAB>test", and the #[ignore]d ones
# with a third field (the check refuses them: the data file says where a test
# runs, nothing else).
list_tests() {
    local name
    for name in "${binaries[@]}"; do
        "${exe[$name]}" --list --format terse | sed -n "s/: test\$//p" | sed "s/^/$name\t/" || return 1
        "${exe[$name]}" --list --format terse --ignored | sed -n "s/: test\$//p" | sed "s/^/$name\t/; s/\$/\tignored/" || return 1
    done
}
mkdir -p "$lists"
stage "matrix: build the test binaries" build_tests || { echo "matrix: the test binaries did not build" >&2; exit 1; }
declare -A exe
while IFS=$'\t' read -r name path; do exe[$name]=$path; done <"$lists/binaries.tsv"
for name in "${binaries[@]}"; do
    [ -x "${exe[$name]:-}" ] || { echo "matrix: no executable for tests/$name" >&2; exit 1; }
done
list_tests >"$lists/tests.tsv" || { echo "matrix: a test binary did not list its tests" >&2; exit 1; }
where_check "$known_suites" "$lists/tests.tsv" ||
    { echo "matrix: tests/where.tsv and the tests disagree" >&2; exit 1; }
if [ $check_only = 1 ]; then
    echo "matrix: tests/where.tsv places each of the $(wc -l <"$lists/tests.tsv") tests of ${binaries[*]}" >&2
    exit 0
fi

# The units in the file's order: unit_at[LABEL] their lines' "suites:lane"
# words; only_on["binary test"] the suites of a test with a line of its own.
units=()
declare -A unit_bin unit_mod unit_at only_on
while read -r binary unit there lane; do
    [ "$lane" != host ] || continue
    if [[ "$unit" == *::* ]]; then
        only_on[$binary $unit]=$there
        continue
    fi
    label=$binary
    [ "$unit" = - ] || label=$binary.$unit
    # TFC_MATRIX_ONLY="a b": only these units (a label, a binary, a module, or
    # testbed_MODULE; while working on them; CI runs all).
    if [ -n "${TFC_MATRIX_ONLY:-}" ] && ! [[ " $TFC_MATRIX_ONLY " =~ \ ($label|$binary|$unit|testbed_$unit)\  ]]; then
        continue
    fi
    [ -n "${unit_bin[$label]:-}" ] || units+=("$label")
    unit_bin[$label]=$binary unit_mod[$label]=$unit
    unit_at[$label]+="$there:$lane "
done < <(where_lines)

# The units of lane $2 on suite $1, in the file's order.
units_of() {
    local label at
    for label in "${units[@]}"; do
        for at in ${unit_at[$label]}; do
            [ "${at#*:}" = "$2" ] && where_on "${at%:*}" "$1" && echo "$label"
        done
    done
    return 0
}
# Is unit $2 on suite $1 on that suite alone (whole or in part)?
only_here() {
    local at
    for at in ${unit_at[$2]}; do [ "${at%:*}" = "$1" ] && return 0; done
    return 1
}
# The names of the tests of unit $2 that run on suite $1 (TFC_MATRIX_FILTER=TEXT:
# only those whose name holds TEXT).
unit_tests() {
    local suite=$1 binary=${unit_bin[$2]} unit=${unit_mod[$2]} b name
    while IFS=$'\t' read -r b name _; do
        [ "$b" = "$binary" ] || continue
        [ "$unit" = - ] || [[ "$name" == "$unit::"* ]] || continue
        [ -z "${only_on[$binary $name]:-}" ] || where_on "${only_on[$binary $name]}" "$suite" || continue
        [[ "$name" == *"${TFC_MATRIX_FILTER:-}"* ]] || continue
        echo "$name"
    done <"$lists/tests.tsv"
}

# The plugin for suite $1: the fault-injection build first, then the package
# (plugin and CLI): both in the host's target dir (the dependencies are built
# once), each .so and the CLI copied out of cargo's way into $dir/release, laid
# out as a target dir's release/ (tests/testbed/prefix.rs installs from it).
build_plugin() {
    local suite=$1 dir=target/slurm-$1 v why
    v=$(awk '/define SLURM_VERSION_NUMBER/ { print $3 }' "$dir/include/slurm/slurm_version.h")
    log "$suite" "plugin for Slurm $((v >> 16)).$(printf %02d $(((v >> 8) & 255))).$((v & 255))"
    mkdir -p "$dir/release"
    # The fault-injection build in the tests' profile (no LTO, the plugin crate unoptimised, its
    # dependencies built by the host stage): only the package's .so needs release's LTO.
    SLURM_INCLUDE_DIR="$dir/include" TFC_SLURM_HEADERS_DIGEST=$(headers_digest "$dir/include") \
        cargo build --profile tests -p tf-cluster --lib --features fault-injection || return 1
    why=$(plugin_mismatch target/tests/libtf_cluster.so "$v") || { log "$suite" "error: $why"; return 1; }
    install -m 755 target/tests/libtf_cluster.so "$dir/release/libtf_cluster_fault.so"
    SLURM_INCLUDE_DIR="$dir/include" bash packaging/deb.sh "$dir/deb" >/dev/null || return 1
    install -m 755 target/release/libtf_cluster.so target/release/tf-cluster "$dir/release/"
    # The container tests' stand-in of a container plugin (tests/container_standin/),
    # against the same headers; beside the plugin, mounted at /opt/tf-cluster.
    cc -shared -fPIC -O2 -Wall -Wextra -Werror -I"$dir/include" \
        -o "$dir/release/container_standin.so" tests/container_standin/container_standin.c || return 1
    # A hostile user's srun (tests/forged_srun/): preloaded, it forges the
    # variables srun sends slurmstepd.
    cc -shared -fPIC -O2 -Wall -Wextra -Werror \
        -o "$dir/release/forged_srun.so" tests/forged_srun/forged_srun.c -ldl || return 1
    if cmp -s "$dir/release/libtf_cluster.so" "$dir/release/libtf_cluster_fault.so"; then
        log "$suite" "error: cargo left the fault-injection build in place of the plugin"
        return 1
    fi
}

# Runs unit $2 of suite $1 on testbed $3, output to its log; a failure is
# recorded in $logs/failed.
run_unit() {
    local suite=$1 label=$2 bed=$3 dir=target/slurm-$1
    local out=$logs/$suite/$label.log
    local -a names
    mapfile -t names < <(unit_tests "$suite" "$label")
    if [ ${#names[@]} -eq 0 ]; then
        echo "$label: none of its tests runs on $suite (tests/where.tsv)" >"$out"
        return 0
    fi
    # A unit of lane first runs as on a quieter machine: its testbed's
    # containers (up, or brought up by its first test) get most of the CPU
    # they ask for; the other lanes take the rest.
    local boost=
    if [[ " ${first[*]} " == *" $label "* ]]; then
        weigh "$bed" "$out.done" &
        boost=$!
    fi
    # shellcheck disable=SC2086 # TFC_CARGO_TEST_ARGS: words
    if ! TFC_SUITE=$suite TFC_PREFIX=$bed TFC_PLUGIN_DIR=$dir/release TFC_DEB_DIR=$dir/deb \
        stage "$suite $label" "${exe[${unit_bin[$label]}]}" --exact "${names[@]}" ${TFC_CARGO_TEST_ARGS-} >"$out" 2>&1; then
        [ -z "$boost" ] || { touch "$out.done"; wait "$boost" || true; }
        echo "$suite $label" >>"$logs/failed"
        log "$suite" "$label FAILED (log: $out)"
        return 1
    fi
    [ -z "$boost" ] || { touch "$out.done"; wait "$boost" || true; }
}

# Sets the CPU weight of testbed $1's containers (PREFIX-ctl, PREFIX-nodeN) to
# 8 times the default, again whenever they change (the testbed comes up or is
# brought up again), until file $2 exists; then back to the default. With
# every other container busy, its 4 get about 60% of the CPU; at 100 times,
# the others starved: a testbed's slurmd missed slurmctld's pings for its 20 s
# SlurmdTimeout and Slurm set its nodes down.
weigh() {
    local bed=$1 done=$2 ids set=
    rm -f "$done"
    until [ -e "$done" ]; do
        ids=$(docker ps -q --filter "name=^$bed-(ctl|node[0-9]+)\$" | sort | tr '\n' ' ')
        if [ -n "$ids" ] && [ "$ids" != "$set" ]; then
            # shellcheck disable=SC2086 # the ids: words
            docker update --cpu-shares 8192 $ids >/dev/null 2>&1 && set=$ids
        fi
        sleep 1
    done
    # shellcheck disable=SC2086 # the ids: words
    [ -z "$set" ] || docker update --cpu-shares 1024 $set >/dev/null 2>&1 || true
    rm -f "$done"
}

# Claims unit $2 of suite $1 from the suite's queue: true for the one lane
# that gets it (mkdir is atomic).
claim() { mkdir "$logs/$1/.claims/$2" 2>/dev/null; }

# Runs, on testbed $2 of suite $1, first the units $4.. (its own: one at a
# time, or up to $TFC_MATRIX_BINARIES at a time when $3 = many), then every
# unit of the suite's shared queue (${queue[@]}) that no other lane has
# claimed; then removes the testbed. Both lanes take from the queue, so a lane
# whose own units end early takes the others' work (its testbed is brought
# up again in the default configuration by the first of them).
run_lane() {
    local suite=$1 bed=$2 at_once=1 rc=0 name
    shift 2
    if [ "$1" = many ]; then at_once=${TFC_MATRIX_BINARIES:-1}; fi
    shift
    for name in "$@" "${queue[@]}"; do
        # A free slot first, then the claim: no lane holds a unit it has not started.
        while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do wait -n || rc=1; done
        if [[ " $* " != *" $name "* ]] && ! claim "$suite" "$name"; then continue; fi
        run_unit "$suite" "$name" "$bed" &
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
    local -a alone own=() queue=() first=()
    mapfile -t first < <(units_of "$suite" first)
    mapfile -t alone < <(units_of "$suite" alt)
    # The units that run on this suite alone first in its queue: elsewhere they
    # end at once or run less, here they are among the longest.
    local name
    while read -r name; do
        if only_here "$suite" "$name"; then own+=("$name"); else queue+=("$name"); fi
    done < <(units_of "$suite" main)
    queue=("${first[@]}" "${own[@]}" "${queue[@]}")
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

[ $report = 0 ] || stage_report "matrix: time per suite, build and unit"
if [ -s "$logs/failed" ]; then
    while read -r suite name; do
        echo "==== FAILED: suite $suite, $name: the end of $logs/$suite/$name.log" >&2
        if [ -f "$logs/$suite/$name.log" ]; then
            grep -E '^test .* FAILED$|^failures:$|^    [a-z_0-9:]+$' "$logs/$suite/$name.log" >&2 || true
            tail -n 60 "$logs/$suite/$name.log" >&2
        fi
    done <"$logs/failed"
    echo "matrix: FAILED: $(tr '\n' ',' <"$logs/failed" | sed 's/,$//; s/,/, /g') (testbed logs: docker/run-$prefix-SUITE*/log)" >&2
    exit 1
fi
echo "matrix: passed on ${suites[*]}" >&2
