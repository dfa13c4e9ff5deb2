#!/usr/bin/env bash
# Every test: unit tests of the core, TensorFlow parity data, the CLI, and the
# plugin inside real srun/slurmstepd on the dockerized Slurm testbed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

bash docker/prerequisites.sh
cargo build --release
docker/testbed.sh up
cargo test --release --all-targets
