#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600), one after another,
# from the committed seeds plus a local corpus (fuzz/corpus/, not committed).
# cargo-fuzz needs nightly features: RUSTC_BOOTSTRAP lets the stable
# toolchain use them.  Usage: fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(role_spec hostlist tasks_per_node reserved_ports gpu_list admin_args resolve task_map)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    echo "== $t (${seconds}s)"
    cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$seconds" -max_len=16384 2>&1 |
        grep -E '^(Done|==[0-9]+==|SUMMARY)|panicked|stat::number_of_executed_units' || true
    # A crash, leak, timeout or out-of-memory leaves an artifact: fail loudly.
    # (slow-unit-* only records an input that once ran slowly on a busy box.)
    if compgen -G "artifacts/$t/crash-*" || compgen -G "artifacts/$t/leak-*" ||
        compgen -G "artifacts/$t/timeout-*" || compgen -G "artifacts/$t/oom-*"; then
        echo "fuzz: $t found: $(ls "artifacts/$t")" >&2
        exit 1
    fi
done
