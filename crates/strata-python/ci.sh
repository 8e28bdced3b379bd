#!/usr/bin/env bash
# Builds the strata Python package into a fresh venv and runs its pytest suite against
# onnxruntime. Called by .ci/run after the Rust tests (the release build of the workspace is then
# already there, and maturin builds into the same target directory).
#   bash crates/strata-python/ci.sh
# STRATA_CASE_STRIDE=N runs every N-th ONNX test case instead of all of them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet numpy onnx onnxruntime pytest ml_dtypes
echo "== pip install ./crates/strata-python"
"$venv/bin/pip" install --quiet ./crates/strata-python

# The LanguageModel tests compare Python's generation with the Rust CLI's (`strata generate`).
echo "== cargo build --release -p strata-cli"
cargo build --release --quiet -p strata-cli
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
case "$target_dir" in /*) ;; *) target_dir="$repo/$target_dir" ;; esac
export STRATA_BIN="$target_dir/release/strata"

echo "== pytest crates/strata-python/tests"
cd "$here/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider .
