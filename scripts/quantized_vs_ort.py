#!/usr/bin/env python3
"""Quantized models through `strata run` against onnxruntime, within quantization tolerance.

For each model: the kit's deterministic inputs (../shared/bench/bench_inputs.py) go through
`strata run` and through onnxruntime at ORT_ENABLE_ALL and at ORT_DISABLE_ALL. onnxruntime's own
spread between its two levels (max |diff| over the output's range) is the yardstick: strata's
max |diff| from ORT_ENABLE_ALL, over the same range, must be at most twice that (and at most
--floor when onnxruntime agrees with itself exactly). Prints one line per output, exits 1 on a
mismatch.

    python3 scripts/quantized_vs_ort.py [--strata target/release/strata] [--threads 1] MODEL.onnx...
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "..", "shared", "bench"))
import bench_inputs  # noqa: E402


def ort_run(model, feeds, level, threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--strata", default=os.path.join(ROOT, "target", "release", "strata"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--floor", type=float, default=0.01, help="allowed relative diff when ORT agrees with itself")
    args = ap.parse_args()
    bad = 0
    for model in args.models:
        feeds = bench_inputs.make_inputs(model)
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [args.strata, "run", model, "--threads", str(args.threads), "--output-dir", tmp]
            for name, value in feeds.items():
                path = os.path.join(tmp, f"in_{len(cmd)}.npy")
                np.save(path, value)
                cmd += ["--input", f"{name}={path}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"FAIL {os.path.basename(model)}: strata exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
                bad += 1
                continue
            full = ort_run(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, args.threads)
            plain = ort_run(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL, args.threads)
            for name, want in full.items():
                safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
                got = np.load(os.path.join(tmp, safe + ".npy"))
                want = want.astype(np.float64)
                span = max(float(want.max() - want.min()), 1e-12)
                own = float(np.abs(plain[name].astype(np.float64) - want).max()) / span
                ours = float(np.abs(got.astype(np.float64) - want).max()) / span
                limit = max(2 * own, args.floor)
                ok = got.shape == want.shape and ours <= limit
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(model)}:{name} strata-vs-ort {ours:.4f} "
                      f"of range, ort-vs-itself {own:.4f}, limit {limit:.4f}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
