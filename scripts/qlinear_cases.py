#!/usr/bin/env python3
"""Writes small com.microsoft quantized-operator cases, with onnxruntime's outputs as the
expected values, in the ONNX backend-test layout (test_*/model.onnx + test_data_set_0/*.pb)
under crates/strata-conformance/tests/qlinear_cases/, which `cargo test` runs without Python
(crates/strata-conformance/tests/qlinear_cases.rs).

    python3 scripts/qlinear_cases.py
"""
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "strata-conformance", "tests", "qlinear_cases")
RNG = np.random.default_rng(16)
TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT,
         np.int32: TensorProto.INT32}


def q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, size=shape).astype(dtype)


def case(name, op, inputs, attrs=None, domain="com.microsoft", out_dtype=None):
    """inputs: list of (name, array or None for an omitted optional input)."""
    names = [n if a is not None else "" for n, a in inputs]
    feeds = {n: a for n, a in inputs if a is not None}
    out_type = TYPES[out_dtype or next(iter(feeds.values())).dtype.type]
    node = helper.make_node(op, names, ["y"], domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, TYPES[a.dtype.type], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, feeds)
    folder = os.path.join(OUT, "test_" + name)
    data = os.path.join(folder, "test_data_set_0")
    os.makedirs(data)
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for i, (n, a) in enumerate(feeds.items()):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    with open(os.path.join(data, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "y").SerializeToString())


def s(v):
    return np.array(v, dtype=np.float32)


def z(v, dtype):
    return np.array(v, dtype=dtype)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for dtype, tag in [(np.uint8, "u8"), (np.int8, "i8")]:
        zp = 128 if dtype == np.uint8 else 0
        for op, shapes in [("QLinearAdd", ([2, 3, 4], [4])), ("QLinearMul", ([2, 1, 4], [3, 1]))]:
            case(f"{op.lower()}_{tag}", op, [
                ("a", q(shapes[0], dtype)), ("a_scale", s(0.05)), ("a_zero_point", z(zp - 3, dtype)),
                ("b", q(shapes[1], dtype)), ("b_scale", s(0.02)), ("b_zero_point", z(zp + 5, dtype)),
                ("c_scale", s(0.07)), ("c_zero_point", z(zp + 1, dtype))])
        case(f"qlinearconcat_{tag}", "QLinearConcat", [
            ("y_scale", s(0.1)), ("y_zero_point", z(zp, dtype)),
            ("x0", q([2, 2, 3], dtype)), ("s0", s(0.1)), ("z0", z(zp, dtype)),
            ("x1", q([2, 1, 3], dtype)), ("s1", s(0.03)), ("z1", z(zp - 7, dtype)),
            ("x2", q([2, 3, 3], dtype)), ("s2", s(0.25)), ("z2", z(zp + 2, dtype))], {"axis": 1},
            out_dtype=dtype)
        case(f"qlinearglobalaveragepool_{tag}", "QLinearGlobalAveragePool", [
            ("x", q([2, 3, 5, 5], dtype)), ("x_scale", s(0.05)), ("x_zero_point", z(zp + 4, dtype)),
            ("y_scale", s(0.03)), ("y_zero_point", z(zp - 2, dtype))], {"channels_last": 0})
        case(f"qlinearglobalaveragepool_nhwc_{tag}", "QLinearGlobalAveragePool", [
            ("x", q([1, 4, 4, 3], dtype)), ("x_scale", s(0.05)), ("x_zero_point", z(zp, dtype)),
            ("y_scale", s(0.02)), ("y_zero_point", z(zp, dtype))], {"channels_last": 1})
        case(f"qlinearsigmoid_{tag}", "QLinearSigmoid", [
            ("x", q([3, 17], dtype)), ("x_scale", s(0.06)), ("x_zero_point", z(zp, dtype)),
            ("y_scale", s(1 / 256)), ("y_zero_point", z(0 if dtype == np.uint8 else -128, dtype))])
        case(f"qlinearleakyrelu_{tag}", "QLinearLeakyRelu", [
            ("x", q([3, 17], dtype)), ("x_scale", s(0.06)), ("x_zero_point", z(zp + 9, dtype)),
            ("y_scale", s(0.04)), ("y_zero_point", z(zp, dtype))], {"alpha": 0.1})
        case(f"qlinearsoftmax_{tag}", "QLinearSoftmax", [
            ("x", q([3, 12], dtype)), ("x_scale", s(0.1)), ("x_zero_point", z(zp, dtype)),
            ("y_scale", s(1 / 256)), ("y_zero_point", z(0 if dtype == np.uint8 else -128, dtype))],
            {"opset": 13, "axis": -1})
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {len(os.listdir(OUT))} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
