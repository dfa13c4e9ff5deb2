#!/usr/bin/env bash
# Every test: unit tests of the core, TensorFlow parity data, the CLI, and the
# plugin inside real srun/slurmstepd on the dockerized Slurm testbed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

bash docker/prerequisites.sh
cargo build --release
# The panic-guard tests load a second build whose hooks panic on request.
CARGO_TARGET_DIR=target/fault cargo build --release --lib --features fault-injection
install -m 755 target/fault/release/libtf_cluster.so target/release/.fault.so.tmp
mv target/release/.fault.so.tmp target/release/libtf_cluster_fault.so
docker/testbed.sh up
cargo test --release --all-targets
