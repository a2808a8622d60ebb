#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ on the STABLE toolchain and runs each for a
# while. Used by CI (a short run per target) and by people (a long run):
#
#     scripts/fuzz.sh               # every target, 10 s each (what CI runs)
#     scripts/fuzz.sh 600           # every target, 10 minutes each
#     scripts/fuzz.sh 3600 router_input fix_session   # chosen targets, 1 h each
#
# Why not `cargo fuzz`: cargo-fuzz needs a nightly toolchain for its default
# AddressSanitizer build, and CI has only stable (and cannot download a toolchain).
# What libFuzzer needs from the compiler is SanitizerCoverage, which stable rustc
# exposes through codegen options (`-Cpasses=sancov-module` and `-Cllvm-args=...`):
# exactly the flags cargo-fuzz itself passes with `--sanitizer none`. libfuzzer-sys
# builds libFuzzer from source with the system C++ compiler. So a plain
# `cargo build` with those flags gives the same binaries, and nothing needs
# installing. Safe Rust's bounds checks, debug assertions and overflow checks (on
# below) catch what ASan would in our crates (`#![forbid(unsafe_code)]`).
#
# Exits non-zero if the build fails, a target crashes, or a target did not run: the
# CI step never skips. A crashing input is kept in fuzz/artifacts/<target>/; turn it
# into a regression test in the owning crate (see docs/testing.md).
set -euo pipefail

SECONDS_PER_TARGET="${1:-10}"
shift || true
ALL_TARGETS=(frame_decode topic_parse itch_decode mold_decode md_update fix_parse router_input fix_session gm_record gm_engine monitor_http mcast_input pcap_load)
if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    TARGETS=("${ALL_TARGETS[@]}")
fi

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros (they must
# not be instrumented: they would not link without libFuzzer's runtime).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export RUSTFLAGS="--cfg fuzzing \
-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cdebug-assertions \
-Coverflow-checks"

echo "fuzz: rustc $(rustc --version | cut -d' ' -f2), target ${TRIPLE}, ${SECONDS_PER_TARGET}s per target: ${TARGETS[*]}"
bins=()
for t in "${TARGETS[@]}"; do bins+=(--bin "$t"); done
cargo build --release --locked --target "$TRIPLE" "${bins[@]}"

summary=()
for t in "${TARGETS[@]}"; do
    bin="$CARGO_TARGET_DIR/$TRIPLE/release/$t"
    mkdir -p "corpus/$t" "artifacts/$t"
    log="$(mktemp)"
    echo "---- fuzz ${t}: ${SECONDS_PER_TARGET}s"
    start=$(date +%s)
    # A private temporary directory per target (pcap_load writes each input to a file
    # there, as its loader reads files), removed after it.
    run_tmp="$(mktemp -d)"
    if ! TMPDIR="$run_tmp" "$bin" "corpus/$t" "seeds/$t" -max_total_time="$SECONDS_PER_TARGET" \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" </dev/null >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz target ${t} FAILED; the crashing input is in fuzz/artifacts/${t}/:" >&2
        ls -l "artifacts/$t" >&2
        rm -f "$log"
        rm -rf "$run_tmp"
        exit 1
    fi
    end=$(date +%s)
    rm -rf "$run_tmp"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    rm -f "$log"
    if [ -z "$runs" ] || [ "$runs" -eq 0 ]; then
        echo "fuzz target ${t} executed nothing" >&2
        exit 1
    fi
    line=$(printf '%-13s %12s executions in %4ss (%s/s), corpus %s files' \
        "$t" "$runs" "$((end - start))" "$rate" "$(find "corpus/$t" -type f | wc -l)")
    echo "$line"
    summary+=("$line")
done

echo "---- fuzz summary"
printf '%s\n' "${summary[@]}"
echo "fuzz: ${#TARGETS[@]} targets ran, no crash"
