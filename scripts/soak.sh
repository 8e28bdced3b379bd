#!/usr/bin/env bash
# Soak test: CONTEXTS contexts of one plan run MODEL for SECONDS on their own threads; RSS is
# sampled every second. RSS must stay flat after warm-up (see the summary line).
#
#   scripts/soak.sh [MODEL.onnx|""] [SECONDS=300] [CONTEXTS=4]
#
# An empty MODEL runs the built-in ResNet-style model. Runs under `nice -n 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
seconds=${2:-300}
contexts=${3:-4}
nice -n 10 cargo build --release -q -p strata-onnx --example soak
nice -n 10 target/release/examples/soak "$model" "$seconds" "$contexts"
