#!/usr/bin/env bash
# Every test: unit tests of the core, TensorFlow parity data, the CLI, and the
# plugin inside real srun/slurmstepd on the dockerized Slurm testbed, once per
# Slurm version (docker/matrix.sh: Debian bookworm 22.05, trixie 24.11, forky
# 26.05; SUITES="trixie" runs fewer).
#
# What waits runs beside what computes: the suites' images (network and disk)
# build in the background from the start while the host's tests use the CPU;
# then the suites run side by side, and memcheck, fuzzing and the scale smoke
# beside them (what the matrix does not need). Every stage runs whatever failed before it;
# the run fails at the end, naming each failed stage (and docker/matrix.sh each
# failed suite and test binary). The time per stage is printed at the end
# (tests/stages.sh; docs/testing.md says where the time goes).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
mkdir -p target/matrix
# .ci/run passes its own.
if [ -z "${STAGES_FILE:-}" ]; then
    export STAGES_FILE=$repo/target/stages.tsv
    : >"$STAGES_FILE"
fi
# shellcheck source=tests/stages.sh
source tests/stages.sh
failed=()
t0=$SECONDS
finish() {
    stage_report "tests/run.sh: time per stage ($((SECONDS - t0)) s in all)"
    if [ ${#failed[@]} -gt 0 ]; then
        echo "run: FAILED: ${failed[*]}" >&2
        exit 1
    fi
    local skipped
    skipped=$(stages_skipped)
    echo "run: passed in $((SECONDS - t0)) s${skipped:+ (skipped, their hardware absent: $skipped)}" >&2
}
# Runs stage $1 (CMD $2..); a failure is recorded and the run goes on.
step() { stage "$@" || failed+=("$1"); }

stage prerequisites bash docker/prerequisites.sh || { failed+=(prerequisites); finish; }

# The images of the suites, side by side, in the background (log:
# target/matrix/images.log; a suite whose image failed fails in the matrix
# below, with the build's output).
read -ra suites <<<"${SUITES:-bookworm trixie forky}"
bash docker/matrix.sh --images "${suites[@]}" >target/matrix/images.log 2>&1 &
images=$!

# The host's Slurm headers named as packaging/deb.sh names them (build.rs reruns
# when either variable changes): its build of the plugin then finds this one's
# fresh, where it compiled the plugin again (about 23 CPU-seconds).
# shellcheck source=packaging/slurm-headers.sh
source packaging/slurm-headers.sh
include=${SLURM_INCLUDE_DIR:-/usr/include}
host_headers=(env SLURM_INCLUDE_DIR="$include" TFC_SLURM_HEADERS_DIGEST="$(headers_digest "$include")")
# .ci/run's lint (TFC_LINT=1): here, once the images build, so that they start
# a minute sooner; a failure fails the run at its end, as any stage's.
if [ "${TFC_LINT:-0}" = 1 ]; then
    step "ci: fmt" cargo fmt --all -- --check
    step "ci: clippy" "${host_headers[@]}" cargo clippy --release --all-targets -- -D warnings
fi
step "host: build" "${host_headers[@]}" cargo build --release
# The packages for this host's Slurm, which tests/packages.rs inspects.
step "host: deb and rpm packages" bash -c 'bash packaging/deb.sh >/dev/null && bash packaging/rpm.sh >/dev/null'
# The tests build in Cargo.toml's `tests` profile (release without its LTO).
# What needs no Slurm: the core and the CLI (every target), and the plugin's
# own tests of lane host in tests/where.tsv (docker/matrix.sh checks that the
# file names every test binary).
# shellcheck source=tests/where.sh
source tests/where.sh
host_tests=()
for name in $(where_binaries host); do host_tests+=(--test "$name"); done
step "host: core and CLI tests" cargo test --profile tests -p tf-cluster-core -p tf-cluster-cli --all-targets
# The stand-in fifth framework (the feature `stand-in`): its own tests only,
# since it adds itself to every list of the framework options. The core
# unoptimised for this one build (its dependencies are the build's above):
# it compiles in a third of the CPU and its three tests take milliseconds.
# The CLI is named too (it has no lib: nothing of it builds) so that the
# dependencies' features unify as above: with the core alone, clap, serde and
# criterion compiled again (53 CPU-seconds for the stage, against 6).
step "host: a fifth framework" cargo test --profile tests \
    --config 'profile.tests.package.tf-cluster-core.opt-level=0' \
    -p tf-cluster-core -p tf-cluster-cli --features tf-cluster-core/stand-in --lib stand_in
# The plugin's .so in the tests' profile too: tests/symbols.rs reads the one
# built beside it.
step "host: plugin tests" bash -c 'cargo build --profile tests -p tf-cluster --lib && cargo test --profile tests -p tf-cluster --lib "$@"' _ "${host_tests[@]}"
# The GPU check of --tf-bind=gpu (tests/gpu-affinity.sh): on a node with
# NVIDIA GPUs and Slurm with the plugin, each task's CPUs against nvidia-smi's
# affinity of its GPU; elsewhere one line and "skipped" (never "passed").
STAGE_MAY_SKIP=1 step "host: GPU affinity" bash tests/gpu-affinity.sh
# The testbed binaries (docker/matrix.sh runs them; the same command, so
# there it finds them built): built now, while the images still build. With
# `-p tf-cluster`, as the plugin's builds above: without it the CLI's
# dependencies unify into syn's features, and syn, bindgen and the plugin
# compiled again (28 CPU-seconds).
testbed_tests=()
for name in $(where_binaries alt main first); do testbed_tests+=(--test "$name"); done
step "host: build the testbed binaries" cargo test --profile tests -p tf-cluster --no-run "${testbed_tests[@]}"
# tests/where.tsv against the tests, without Docker: a test it does not place
# fails here, before the images are waited for (the matrix checks again).
step "host: where each test runs" bash docker/matrix.sh --check
# The scale smoke, memcheck and a short run of every fuzz target: the matrix
# needs none of them, so they run one after another beside the wait for the
# images and beside the matrix, each output in target/host/NAME.log (its end
# printed when it fails). Memcheck and fuzzing at a lower priority (nice 10):
# they take the CPU the suites' testbeds leave while they wait (a rendezvous's
# timeout, a requeued job's restart) and never slow the suites' plugin builds,
# which every suite's tests wait for. Each fuzz target runs its seconds
# whatever the load (fewer inputs on a busy machine); a crash, leak, timeout or
# OOM fails. (The property tests ran above with overflow checks: Cargo.toml's
# `tests` profile.) The scale smoke, first and at the usual priority (its
# slurmd must come up within their time): a real launch on 24 real slurmd
# nodes (one per network, UTS and PID namespace) on this machine, every task of
# tf and torch steps, block and cyclic, checked against Slurm's placement
# (docker/scale-bench.sh has the benchmark).
mkdir -p target/host
rm -f target/host/failed
(
    beside() { # NAME LOG CMD..
        local name=$1 log=target/host/$2.log
        shift 2
        stage "host: $name" "$@" >"$log" 2>&1 && return 0
        echo "host: $name" >>target/host/failed
        { echo "run: host: $name FAILED; the end of $log:"; tail -n 40 "$log"; } >&2
    }
    beside "scale smoke" scale-smoke bash tests/scale-smoke.sh
    beside memcheck memcheck nice -n 10 bash tests/memcheck.sh
    beside fuzz fuzz nice -n 10 bash fuzz/run.sh "${TFC_FUZZ_SECONDS:-5}"
) &
host_beside=$!

# The testbed binaries, against each Slurm with the plugin built for it, the
# suites side by side; each suite starts once its own image is built (the
# matrix waits for the build above, suite by suite).
step "matrix" bash docker/matrix.sh "${suites[@]}"
wait $images || failed+=("images (target/matrix/images.log)")
wait $host_beside || true
[ ! -s target/host/failed ] || mapfile -t -O ${#failed[@]} failed <target/host/failed
finish
