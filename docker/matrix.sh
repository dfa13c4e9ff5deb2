#!/usr/bin/env bash
# The Slurm version matrix: for each Debian suite (so each Slurm), build the plugin
# against that Slurm's own headers and run every testbed test binary
# (tests/testbed*.rs) on a testbed of that suite.
#
#   docker/matrix.sh [SUITE..]     default: $SUITES, else "bookworm trixie forky"
#
# Per suite S (bookworm: Slurm 22.05, trixie: 24.11, forky: 26.05):
#   1. docker/testbed.sh headers target/slurm-S/include
#        base image debian:S (debootstrap when absent), node image tfc-node:S, and
#        the /usr/include/slurm of the image's libslurm-dev copied out
#   2. SLURM_INCLUDE_DIR=target/slurm-S/include CARGO_TARGET_DIR=target/slurm-S \
#        cargo build --release --lib --features fault-injection, then
#        packaging/deb.sh target/slurm-S/deb
#        the fault-injection build tests/testbed_hardening.rs loads (kept as
#        target/slurm-S/release/libtf_cluster_fault.so), and the Debian package
#        of the plugin and CLI for that Slurm, which every container of the
#        testbed installs (built with this host's Rust: its glibc is older than
#        any suite's, so the .so loads in each)
#   3. TFC_SUITE=S TFC_PREFIX=tfc-ID-S TFC_PLUGIN_DIR=target/slurm-S/release \
#      TFC_DEB_DIR=target/slurm-S/deb cargo test --release --test testbed --test testbed_… …
#        the test binaries are the host build's (they only drive srun through
#        docker/testbed.sh); the testbed comes up on the first test and is
#        removed afterwards (TFC_KEEP=1 keeps it)
# ID is a hash of this checkout's path (TFC_MATRIX_PREFIX=P gives P-S instead), so
# runs from two checkouts on one Docker host never share a testbed; the default
# testbed (prefix tfc, docker/run) is never touched. The prefixes are printed.
#
# Any failure (a suite that cannot be built, started or tested) fails the run after
# the remaining suites have run; nothing is skipped. Times per suite are printed at
# the end. TFC_CARGO_TEST_ARGS adds arguments after `--` (e.g. --test-threads=2).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

suites=("$@")
[ ${#suites[@]} -gt 0 ] || read -ra suites <<<"${SUITES:-bookworm trixie forky}"
[ ${#suites[@]} -gt 0 ] || { echo "matrix: no suites" >&2; exit 1; }

# Every testbed test binary, so one added later runs on every version too.
tests=()
for f in tests/testbed*.rs; do
    tests+=(--test "$(basename "$f" .rs)")
done

log() { echo "matrix[$1]: ${*:2}" >&2; }

prefix=${TFC_MATRIX_PREFIX:-tfc-$(printf %s "$repo" | sha256sum | cut -c1-6)}
# One run at a time per checkout: they would share testbeds and target dirs.
mkdir -p target
exec 9>target/.matrix.lock
flock -n 9 || { echo "matrix: another docker/matrix.sh is running in $repo" >&2; exit 1; }

# Runs one suite; returns non-zero on the first failing stage.
run_suite() {
    local suite=$1 dir=target/slurm-$1 t0=$SECONDS
    local -a env=(TFC_SUITE="$suite" TFC_PREFIX="$prefix-$suite" TFC_PLUGIN_DIR="$dir/release"
        TFC_DEB_DIR="$dir/deb")
    log "$suite" "image and Slurm headers (testbed $prefix-$suite)"
    env "${env[@]}" docker/testbed.sh headers "$dir/include" || return 1
    local v
    v=$(awk '/define SLURM_VERSION_NUMBER/ { print $3 }' "$dir/include/slurm/slurm_version.h")
    log "$suite" "plugin for Slurm $((v >> 16)).$(printf %02d $(((v >> 8) & 255))).$((v & 255))"
    # The fault-injection build first, then the package (plugin and CLI): both in
    # one target dir (the dependencies are built once), each .so copied out of
    # cargo's way.
    SLURM_INCLUDE_DIR="$dir/include" CARGO_TARGET_DIR="$dir" \
        cargo build --release --lib --features fault-injection || return 1
    install -m 755 "$dir/release/libtf_cluster.so" "$dir/release/.fault.so.tmp"
    SLURM_INCLUDE_DIR="$dir/include" CARGO_TARGET_DIR="$dir" bash packaging/deb.sh "$dir/deb" >/dev/null || return 1
    mv "$dir/release/.fault.so.tmp" "$dir/release/libtf_cluster_fault.so"
    if cmp -s "$dir/release/libtf_cluster.so" "$dir/release/libtf_cluster_fault.so"; then
        log "$suite" "error: cargo left the fault-injection build in place of the plugin"
        return 1
    fi
    TIMES+=("$suite build $((SECONDS - t0))s")
    local t1=$SECONDS rc=0
    log "$suite" "testbed tests: ${tests[*]}"
    env "${env[@]}" cargo test --release --no-fail-fast "${tests[@]}" -- ${TFC_CARGO_TEST_ARGS-} || rc=1
    TIMES+=("$suite tests $((SECONDS - t1))s")
    if [ "${TFC_KEEP:-0}" != 1 ]; then
        env "${env[@]}" docker/testbed.sh down || rc=1
    fi
    return $rc
}

# The images first, all at once: their builds (debootstrap, apt, pip) mostly
# wait on the network and the disk, so together they take little longer than
# the slowest alone. A failure here shows again, with its output, in that
# suite's own run below.
if [ ${#suites[@]} -gt 1 ]; then
    log all "building the images of ${suites[*]} side by side (logs: target/.image-SUITE.log)"
    for suite in "${suites[@]}"; do
        TFC_SUITE=$suite TFC_PREFIX=$prefix-$suite \
            docker/testbed.sh headers "target/slurm-$suite/include" >"target/.image-$suite.log" 2>&1 &
    done
    wait
fi

TIMES=()
failed=()
for suite in "${suites[@]}"; do
    t0=$SECONDS
    if run_suite "$suite"; then
        TIMES+=("$suite total $((SECONDS - t0))s: passed")
    else
        TIMES+=("$suite total $((SECONDS - t0))s: FAILED")
        failed+=("$suite")
        log "$suite" "FAILED (testbed logs: docker/run-$prefix-$suite/log)"
    fi
done
printf 'matrix: %s\n' "${TIMES[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
    echo "matrix: FAILED on ${failed[*]}" >&2
    exit 1
fi
echo "matrix: passed on ${suites[*]}" >&2
