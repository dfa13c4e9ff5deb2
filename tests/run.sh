#!/usr/bin/env bash
# Every test: unit tests of the core, TensorFlow parity data, the CLI, and the
# plugin inside real srun/slurmstepd on the dockerized Slurm testbed, once per
# Slurm version (docker/matrix.sh: Debian bookworm 22.05, trixie 24.11, forky
# 26.05; SUITES="trixie" runs fewer).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

bash docker/prerequisites.sh
cargo build --release
# The packages for this host's Slurm, which tests/packages.rs inspects.
bash packaging/deb.sh >/dev/null
bash packaging/rpm.sh >/dev/null
# What needs no Slurm: the core and the CLI (every target), and the plugin's
# own tests but the testbed binaries (tests/testbed*.rs).
host_tests=()
for f in tests/*.rs; do
    case $(basename "$f") in
    testbed*) ;;
    *) host_tests+=(--test "$(basename "$f" .rs)") ;;
    esac
done
cargo test --release -p tf-cluster-core -p tf-cluster-cli --all-targets
cargo test --release -p tf-cluster --lib "${host_tests[@]}"
bash tests/memcheck.sh
# The parsers' property tests again with overflow checks on (a wrap-around
# that release builds would hide panics here), and a short run of every
# fuzz target (a crash, leak, timeout or OOM fails).
CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_TARGET_DIR=target/overflow \
    cargo test --release -p tf-cluster-core --lib --test properties
bash fuzz/run.sh "${TFC_FUZZ_SECONDS:-10}"
# A real launch at scale: 24 real slurmd nodes (one per network, UTS and
# PID namespace) on this machine, every task of tf and torch steps, block
# and cyclic, checked against Slurm's placement (docker/scale-bench.sh has
# the benchmark).
bash tests/scale-smoke.sh
# The testbed binaries, against each Slurm with the plugin built for it.
bash docker/matrix.sh
