#!/usr/bin/env python3
"""Side-by-side check of strata against onnxruntime on the built-in models (or given .onnx files).

For each model: the same seeded inputs go through `strata run` and onnxruntime; outputs are
compared with rtol 1e-3 / atol 1e-4, and both are timed over the same number of runs with the
same thread count. Prints one line per model and exits non-zero on a mismatch.

    pip install onnxruntime onnx numpy
    python3 scripts/compare_onnxruntime.py [--threads 1] [--runs 50] [MODEL.onnx ...]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
STRATA = os.path.join(TARGET, "release", "strata")
DEFAULT_SHAPES = {"resnet_like_batch.onnx": 4, "mlp.onnx": 8}


def build():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "strata-cli"], cwd=ROOT, check=True)


def concrete_shape(inp, batch):
    return [d if isinstance(d, int) and d >= 0 else batch for d in inp.shape]


def random_input(inp, shape, rng):
    kind = inp.type
    if "float" in kind:
        return rng.uniform(-1, 1, size=shape).astype(np.float32 if kind == "tensor(float)" else np.float64)
    if "int64" in kind:
        return rng.integers(0, 4, size=shape, dtype=np.int64)
    raise SystemExit(f"no generator for input type {kind}")


def strata_bench(model, shapes, threads, runs, warmup=5):
    cmd = [STRATA, "bench", model, "--threads", str(threads), "--runs", str(runs), "--warmup", str(warmup), "--json"]
    for name, shape in shapes.items():
        cmd += ["--shape", f"{name}={','.join(map(str, shape))}"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def strata_cpu_ms(model, shapes, threads, runs):
    """CPU time per run of `strata bench`: (CPU of 1 + runs runs) - (CPU of 1 run), over runs.
    Unlike wall time, it barely moves when other processes compete for the cores."""
    start = children_cpu_s()
    strata_bench(model, shapes, threads, 1, warmup=0)
    one = children_cpu_s() - start
    start = children_cpu_s()
    strata_bench(model, shapes, threads, runs + 1, warmup=0)
    many = children_cpu_s() - start
    return (many - one) * 1e3 / runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--no-build", action="store_true", help="use the strata binary already built")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="also compare CPU time per run (steadier than wall time on a busy machine; with "
        "several threads it sums them, spinning included)",
    )
    args = ap.parse_args()
    if not args.no_build:
        build()
    work = tempfile.mkdtemp(prefix="strata-compare-")
    models = args.models
    if not models:
        subprocess.run([STRATA, "export", work], check=True, capture_output=True)
        models = [os.path.join(work, f) for f in sorted(os.listdir(work)) if f.endswith(".onnx")]
    failed = False
    rng = np.random.default_rng(0)
    for model in models:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        batch = DEFAULT_SHAPES.get(os.path.basename(model), 1)
        feeds, shapes, cmd = {}, {}, [STRATA, "run", model, "--threads", str(args.threads), "--output-dir", work]
        for inp in sess.get_inputs():
            shape = concrete_shape(inp, batch)
            shapes[inp.name] = shape
            feeds[inp.name] = random_input(inp, shape, rng)
            path = os.path.join(work, f"in_{len(feeds)}.npy")
            np.save(path, feeds[inp.name])
            cmd += ["--input", f"{inp.name}={path}"]
        subprocess.run(cmd, check=True, capture_output=True)
        expected = sess.run(None, feeds)
        worst = 0.0
        for out, ref in zip(sess.get_outputs(), expected):
            name = "".join(c if c.isalnum() or c in "._-" else "_" for c in out.name)
            got = np.load(os.path.join(work, f"{name}.npy"))
            if got.shape != ref.shape:
                print(f"{os.path.basename(model)}: output {out.name} shape {got.shape} != {ref.shape}")
                failed = True
                continue
            ok = np.allclose(got, ref, rtol=1e-3, atol=1e-4)
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0)
            failed |= not ok
        for _ in range(5):
            sess.run(None, feeds)
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            sess.run(None, feeds)
            times.append((time.perf_counter() - t) * 1e3)
        ort_ms = float(np.median(times))
        strata_ms = strata_bench(model, shapes, args.threads, args.runs)["median_ms"]
        status = "match" if worst <= 1e-4 or not failed else "MISMATCH"
        cpu = ""
        if args.cpu_time:
            start = time.process_time()
            for _ in range(args.runs):
                sess.run(None, feeds)
            ort_cpu = (time.process_time() - start) * 1e3 / args.runs
            strata_cpu = strata_cpu_ms(model, shapes, args.threads, args.runs)
            cpu = f"  cpu strata {strata_cpu:8.3f} ms  onnxruntime {ort_cpu:8.3f} ms  ratio {strata_cpu / ort_cpu:5.2f}x"
        print(
            f"{os.path.basename(model):28s} {status:8s} max|diff| {worst:.2e}   "
            f"median strata {strata_ms:8.3f} ms  onnxruntime {ort_ms:8.3f} ms  ratio {strata_ms / ort_ms:5.2f}x  "
            f"({args.threads} thread{'s' if args.threads > 1 else ''}){cpu}"
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
