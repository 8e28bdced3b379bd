#!/usr/bin/env python3
"""Convolution time per node, strata beside onnxruntime, grouped by kind (depthwise, 1x1, kxk,
stride): where a CNN loses its time.

    python3 scripts/conv_profile_vs_ort.py target/release/strata MODEL.onnx [--threads 1] [--runs 100]

Runs `strata bench --profile --json` and onnxruntime with profiling on the same model (inputs:
N(0,1) floats, zero integers), maps onnxruntime's fused nodes (named after their outputs, e.g.
`clip_47_nchwc`) back to the Conv that produced them, and prints one row per Conv and a total per
kind, in microseconds per run. A Conv that onnxruntime fused with anything else (an Add, a Concat)
shows 0 on its side. Run it on a quiet machine; compare kinds, not single nodes.
"""
import argparse
import collections
import json
import os
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


# Ops onnxruntime folds into the Conv before them (so its node carries their output's name).
FUSED_AFTER_CONV = {"BatchNormalization", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid",
                    "HardSwish", "Tanh"}


def ort_node_times(model, threads, runs):
    """Mean µs per run of every onnxruntime node, keyed by node name (its output's name)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.standard_normal(shape).astype(np.float32) if "float" in i.type
                         else np.zeros(shape, np.int64))
    for _ in range(5 + runs):
        sess.run(None, feeds)
    events = json.load(open(sess.end_profiling()))
    times = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"][: -len("_kernel_time")]].append(e["dur"])
    # The first runs are the warm-up ones.
    return {name.removesuffix("_nchwc"): float(np.mean(v[5:] or v)) for name, v in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("strata")
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()

    out = subprocess.run([args.strata, "bench", args.model, "--threads", str(args.threads),
                          "--runs", str(args.runs), "--profile", "--json"],
                         check=True, capture_output=True, text=True).stdout
    strata = {r["node"]: r["mean_ms"] * 1000 for r in json.loads(out)["node_profile"]}
    onnxruntime = ort_node_times(args.model, args.threads, args.runs)

    m = onnx.load(args.model, load_external_data=False)
    producer = {o: n for n in m.graph.node for o in n.output}
    init = {i.name: i for i in m.graph.initializer}

    def conv_of(node):
        # onnxruntime names a fused Conv(+BatchNorm)(+activation) after its last output.
        while node.op_type in FUSED_AFTER_CONV and node.input and node.input[0] in producer:
            node = producer[node.input[0]]
        return node.name if node.op_type == "Conv" else None

    ort_conv = collections.defaultdict(float)
    for name, us in onnxruntime.items():
        if name in producer:
            conv = conv_of(producer[name])
            if conv is not None:
                ort_conv[conv] += us

    kinds = collections.defaultdict(lambda: [0.0, 0.0])
    for n in m.graph.node:
        if n.op_type != "Conv" or n.input[1] not in init:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        w = tuple(init[n.input[1]].dims)
        group, stride = a.get("group", 1), (a.get("strides") or [1])[0]
        if group > 1 and group == w[0]:
            kind = "dw"
        else:
            kind = (f"g{group}:" if group > 1 else "") + "x".join(map(str, w[2:]))
        kind += f"s{stride}"
        s, o = strata.get(n.name, 0.0), ort_conv.get(n.name, 0.0)
        kinds[kind][0] += s
        kinds[kind][1] += o
        print(f"{n.name:14s} {kind:7s} w={str(w):20s} strata {s:8.1f}  onnxruntime {o:8.1f} us")
    for kind, (s, o) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        print(f"{kind:7s} strata {s:9.1f}  onnxruntime {o:9.1f} us  ratio {s / o if o else float('nan'):.2f}")


if __name__ == "__main__":
    main()
