#!/bin/bash
# A/B timing of two strata binaries on one model, alternating them so the machine's drift hits
# both alike; every timing runs under quiet.sh (background builds at nice >= 10 are stopped).
#   scripts/ab.sh OLD_BIN NEW_BIN MODEL THREADS [ROUNDS=5] [RUNS=30]
# MODEL is a path, or a name in ~/.cache/strata-bench (e.g. light_resnet50_rand). Prints new/old
# per round and the median ratio (below 1 means NEW is faster).
here="$(cd "$(dirname "$0")" && pwd)"
OLD=$1; NEW=$2; M=$3; T=$4; R=${5:-5}; N=${6:-30}
case $M in */*) ;; *) M=~/.cache/strata-bench/$M.onnx;; esac
median_ms() {
  "$here/quiet.sh" "$1" bench "$M" --threads "$T" --runs "$N" --warmup 5 --json |
    python3 -c 'import json,sys;print(json.load(sys.stdin)["median_ms"])'
}
ratios=()
for i in $(seq "$R"); do
  o=$(median_ms "$OLD"); n=$(median_ms "$NEW")
  r=$(python3 -c "print(f'{$n/$o:.3f}')"); ratios+=("$r")
  echo "round $i: old $o new $n ratio $r"
done
python3 -c "import statistics,sys;print('median ratio', statistics.median(map(float,sys.argv[1:])))" "${ratios[@]}"
