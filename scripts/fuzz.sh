#!/usr/bin/env bash
# Runs the cargo-fuzz targets (nightly toolchain; never part of CI).
#
#   scripts/fuzz.sh build                  build every target once (do this first)
#   scripts/fuzz.sh TARGET [MINUTES]       fuzz TARGET for MINUTES (default 10)
#   scripts/fuzz.sh all [MINUTES]          every target in turn, MINUTES each
#
# TARGET: onnx_load | npy | tensor_proto | gguf. Everything runs under `nice -n 19`, so the
# fuzzer only takes idle CPU. The corpus lives in fuzz/corpus/TARGET and findings land in
# fuzz/artifacts/TARGET (both ignored by git); turn each finding into a regression test.
# Corpora are seeded on first use: ONNX models and TensorProto files from ../shared/onnx-tests,
# .npy files written by `strata run`, tiny GGUF language models written by a strata-llm test.
set -euo pipefail
cd "$(dirname "$0")/.."
targets="onnx_load npy tensor_proto gguf"
what=${1:?usage: scripts/fuzz.sh build | TARGET [MINUTES] | all [MINUTES]}
minutes=${2:-10}
shared=../shared/onnx-tests

command -v cargo-fuzz >/dev/null 2>&1 || nice -n 10 cargo install cargo-fuzz --locked

if [ "$what" = build ]; then
    exec nice -n 19 cargo +nightly fuzz build
fi
if [ "$what" = all ]; then
    for t in $targets; do "$0" "$t" "$minutes"; done
    exit 0
fi
case " $targets " in
    *" $what "*) ;;
    *) echo "unknown target '$what' (one of: $targets)" >&2; exit 2 ;;
esac
target=$what

corpus=fuzz/corpus/$target
if [ ! -d "$corpus" ]; then
    mkdir -p "$corpus"
    case $target in
        onnx_load)
            find "$shared" -name model.onnx -size -256k | while read -r f; do
                cp "$f" "$corpus/$(echo "$f" | md5sum | cut -c1-16).onnx"
            done ;;
        tensor_proto)
            find "$shared" -name '*.pb' -size -64k | head -3000 | while read -r f; do
                cp "$f" "$corpus/$(echo "$f" | md5sum | cut -c1-16).pb"
            done ;;
        npy)
            out=$(mktemp -d)
            nice -n 10 cargo run --release -q -p strata-cli -- run --output-dir "$out" >/dev/null
            cp "$out"/*.npy "$corpus"/ ;;
        gguf)
            STRATA_FUZZ_SEED_DIR=$(realpath "$corpus") nice -n 10 cargo test --release -q \
                -p strata-llm --test fuzz_seeds >/dev/null ;;
    esac
fi

# -timeout: a run over 10 s is a hang finding; -rss_limit_mb: a runaway allocation is a finding.
# -fork=1 with -ignore_*: a finding is saved to fuzz/artifacts/TARGET and the fuzzing goes on, so
# a long run is not stopped by its first crash. allocator_may_return_null: an impossible
# allocation is a null pointer (strata's typed out-of-memory error), not an ASan abort.
# GGUF seeds are tens of KB: let inputs grow to that size.
max_len=()
[ "$target" = gguf ] && max_len=(-max_len=131072)
mkdir -p "fuzz/artifacts/$target"
ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1} \
nice -n 19 cargo +nightly fuzz run "$target" "$corpus" -- \
    -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="fuzz/artifacts/$target/" "${max_len[@]}"
