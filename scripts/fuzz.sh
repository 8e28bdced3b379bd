#!/usr/bin/env bash
# Runs one cargo-fuzz target for a number of minutes (nightly toolchain; never part of CI).
#
#   scripts/fuzz.sh TARGET [MINUTES]     TARGET: onnx_load | npy | tensor_proto
#
# The corpus lives in fuzz/corpus/TARGET (not committed) and is seeded on first use: ONNX models
# and TensorProto files from ../shared/onnx-tests, .npy files written by `strata run`. Findings
# land in fuzz/artifacts/TARGET; turn each into a regression test before fixing it.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [MINUTES]}
minutes=${2:-10}
shared=../shared/onnx-tests

command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

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
            cargo run --release -q -p strata-cli -- run --output-dir "$out" >/dev/null
            cp "$out"/*.npy "$corpus"/ ;;
    esac
fi

# -timeout: a run over 10 s is a hang finding; -rss_limit_mb: a runaway allocation is a finding.
cargo +nightly fuzz run "$target" "$corpus" -- \
    -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
