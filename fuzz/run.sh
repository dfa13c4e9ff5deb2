#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600), one after another,
# from the committed seeds plus a local corpus (fuzz/corpus/, not committed).
# Usage: fuzz/run.sh [SECONDS] [TARGET...]
#
# The targets build as `cargo fuzz build -O` builds them (libFuzzer,
# SanitizerCoverage, AddressSanitizer), with cargo itself: installing cargo-fuzz
# on a fresh machine compiled about a hundred crates before any fuzzing.
# RUSTC_BOOTSTRAP lets the stable toolchain use the sanitizer's nightly flag.
# `cargo fuzz run` works on the same targets. libFuzzer is Debian's
# (libclang-rt-14-dev, docker/prerequisites.sh) where it is installed: the
# libfuzzer-sys crate's own C++ copy costs about 80 CPU-seconds to compile
# (133 against 52 for the whole build, measured), and the two find the same
# crashes and leaks. Elsewhere the crate compiles its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(role_spec hostlist tasks_per_node reserved_ports gpu_list admin_args resolve task_map)
triple=$(rustc -vV | awk '/^host:/ { print $2 }')
if [ -z "${CUSTOM_LIBFUZZER_PATH:-}" ]; then
    for lib in /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-"${triple%%-*}".a; do
        [ -e "$lib" ] && export CUSTOM_LIBFUZZER_PATH=$lib
    done
fi
echo "fuzz: libFuzzer ${CUSTOM_LIBFUZZER_PATH:-compiled by the libfuzzer-sys crate}"
export RUSTC_BOOTSTRAP=1
# The target triple given explicitly keeps build scripts and proc macros
# uninstrumented, as cargo-fuzz does.
RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Zsanitizer=address" \
    cargo build --release --target "$triple" --target-dir target "${targets[@]/#/--bin=}"
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "== $t (${seconds}s)"
    "target/$triple/release/$t" -artifact_prefix="artifacts/$t/" -max_total_time="$seconds" \
        -max_len=16384 "corpus/$t" "seeds/$t" 2>&1 |
        grep -E '^(Done|==[0-9]+==|SUMMARY)|panicked|stat::number_of_executed_units' || true
    # A crash, leak, timeout or out-of-memory leaves an artifact: fail loudly.
    # (slow-unit-* only records an input that once ran slowly on a busy box.)
    if compgen -G "artifacts/$t/crash-*" || compgen -G "artifacts/$t/leak-*" ||
        compgen -G "artifacts/$t/timeout-*" || compgen -G "artifacts/$t/oom-*"; then
        echo "fuzz: $t found: $(ls "artifacts/$t")" >&2
        exit 1
    fi
done
