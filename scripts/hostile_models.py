#!/usr/bin/env python3
"""Writes small ONNX models that declare impossible sizes or endless work, one file per case, and
runs `strata run` on each: every case must end in a clean error (exit 1 or 2 with a message), never
a panic (101), a signal or a hang.

usage: scripts/hostile_models.py STRATA_BIN [OUT_DIR] [--timeout SECONDS]

The Rust regression tests (crates/strata-onnx/tests/hostile_models.rs) build the same cases with
strata's own ModelBuilder; this script is for trying new ones against a built binary."""
import os, subprocess, sys, tempfile

import numpy as np
from onnx import TensorProto as T, helper as h, numpy_helper as nh, save

BIG = 2**62
HUGE = 2**40


def model(name, nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def vi(name, ty, dims):
    return h.make_tensor_value_info(name, ty, dims)


def i64(name, values):
    return nh.from_array(np.array(values, dtype=np.int64), name)


CASES = {
    "unsqueeze_axes_declared_huge": model("m", [h.make_node("Unsqueeze", ["x", "axes"], ["y"])],
                                          [vi("x", T.FLOAT, [2]), vi("axes", T.INT64, [BIG])],
                                          [vi("y", T.FLOAT, None)]),
    "reshape_shape_declared_huge": model("m", [h.make_node("Reshape", ["x", "s"], ["y"])],
                                         [vi("x", T.FLOAT, [2]), vi("s", T.INT64, [BIG])],
                                         [vi("y", T.FLOAT, None)]),
    "constant_of_shape_declared_huge": model("m", [h.make_node("ConstantOfShape", ["s"], ["y"])],
                                             [vi("s", T.INT64, [2**63 - 1])], [vi("y", T.FLOAT, None)]),
    "constant_of_shape_value_huge": model("m", [h.make_node("ConstantOfShape", ["s"], ["y"])],
                                          [], [vi("y", T.FLOAT, None)], [i64("s", [HUGE, HUGE])]),
    "constant_of_shape_i64_huge": model("m", [h.make_node("ConstantOfShape", ["s"], ["y"],
                                                          value=nh.from_array(np.array([1], np.int64)))],
                                        [], [vi("y", T.INT64, None)], [i64("s", [HUGE])]),
    "split_num_outputs_huge": model("m", [h.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=BIG)],
                                    [vi("x", T.FLOAT, [4])], [vi("a", T.FLOAT, None), vi("b", T.FLOAT, None)]),
    "split_to_sequence_declared_huge": model("m", [h.make_node("SplitToSequence", ["x", "s"], ["y"])],
                                             [vi("x", T.FLOAT, [4]), vi("s", T.INT64, [BIG])],
                                             [h.make_tensor_sequence_value_info("y", T.FLOAT, None)]),
    "col2im_declared_huge": model("m", [h.make_node("Col2Im", ["x", "i", "b"], ["y"])],
                                  [vi("x", T.FLOAT, [1, 4, 4]), vi("i", T.INT64, [BIG]), vi("b", T.INT64, [BIG])],
                                  [vi("y", T.FLOAT, None)]),
    "expand_value_huge": model("m", [h.make_node("Expand", ["x", "s"], ["y"])],
                               [vi("x", T.INT64, [1])], [vi("y", T.INT64, None)], [i64("s", [HUGE, HUGE])]),
    "expand_f32_value_huge": model("m", [h.make_node("Expand", ["x", "s"], ["y"])],
                                   [vi("x", T.FLOAT, [1])], [vi("y", T.FLOAT, None)], [i64("s", [HUGE])]),
    "hann_window_huge": model("m", [h.make_node("HannWindow", ["n"], ["y"])],
                              [], [vi("y", T.FLOAT, None)], [i64("n", [HUGE])]),
    "hann_window_input_huge": model("m", [h.make_node("HannWindow", ["n"], ["y"])],
                                    [vi("n", T.INT64, [])], [vi("y", T.FLOAT, None)]),
    "string_input_declared_huge": model("m", [h.make_node("Identity", ["x"], ["y"])],
                                        [vi("x", T.STRING, [HUGE, HUGE])], [vi("y", T.STRING, None)]),
    "i64_input_declared_huge": model("m", [h.make_node("Identity", ["x"], ["y"])],
                                     [vi("x", T.INT64, [HUGE, HUGE])], [vi("y", T.INT64, None)]),
    "f16_input_declared_huge": model("m", [h.make_node("Identity", ["x"], ["y"])],
                                     [vi("x", T.FLOAT16, [HUGE])], [vi("y", T.FLOAT16, None)]),
    "pad_zero_size_symbolic": model("m", [h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
                                    [vi("x", T.FLOAT, ["N", 0])], [vi("y", T.FLOAT, None)], [i64("p", [0, 1, 0, 1])]),
    "tile_repeats_huge": model("m", [h.make_node("Tile", ["x", "r"], ["y"])],
                               [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, None)], [i64("r", [HUGE])]),
    "range_huge": model("m", [h.make_node("Range", ["a", "b", "d"], ["y"])], [], [vi("y", T.INT64, None)],
                        [nh.from_array(np.array(0, np.int64), "a"), nh.from_array(np.array(2**62, np.int64), "b"),
                         nh.from_array(np.array(1, np.int64), "d")]),
    "onehot_depth_huge": model("m", [h.make_node("OneHot", ["i", "d", "v"], ["y"])],
                               [vi("i", T.INT64, [2])], [vi("y", T.FLOAT, None)],
                               [i64("d", [HUGE]), nh.from_array(np.array([0, 1], np.float32), "v")]),
    "eyelike_declared_huge": model("m", [h.make_node("EyeLike", ["x"], ["y"])],
                                   [vi("x", T.FLOAT, [HUGE, HUGE])], [vi("y", T.FLOAT, None)]),
    "resize_scales_huge": model("m", [h.make_node("Resize", ["x", "", "s"], ["y"])],
                                [vi("x", T.FLOAT, [1, 1, 2, 2])], [vi("y", T.FLOAT, None)],
                                [nh.from_array(np.array([1, 1, 1e12, 1e12], np.float32), "s")]),
    "loop_forever": model("m", [h.make_node("Loop", ["", "c"], ["y"], body=h.make_graph(
        [h.make_node("Identity", ["ci"], ["co"]), h.make_node("Identity", ["v"], ["vo"])], "body",
        [vi("i", T.INT64, []), vi("ci", T.BOOL, []), vi("v", T.FLOAT, [1])],
        [vi("co", T.BOOL, []), vi("vo", T.FLOAT, [1])]))],
        [], [vi("y", T.FLOAT, None)],
        [nh.from_array(np.array(True), "c")]),
}
# Loop carries one value: give it one.
CASES["loop_forever"].graph.node[0].input.append("v0")
CASES["loop_forever"].graph.initializer.append(nh.from_array(np.zeros(1, np.float32), "v0"))


def main():
    binary = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else tempfile.mkdtemp()
    timeout = float(sys.argv[sys.argv.index("--timeout") + 1]) if "--timeout" in sys.argv else 20
    os.makedirs(out, exist_ok=True)
    bad = 0
    for name, m in CASES.items():
        path = os.path.join(out, name + ".onnx")
        save(m, path)
        try:
            r = subprocess.run([binary, "run", path, "--timeout", "5"], capture_output=True, text=True,
                               timeout=timeout)
            code = r.returncode
            msg = (r.stderr.strip().splitlines() or [""])[-1][:150]
        except subprocess.TimeoutExpired:
            code, msg = "hang", ""
        ok = code in (0, 1, 2)
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name:36} exit {code}: {msg}")
    print(f"{bad} bad of {len(CASES)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
