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


def case(name, op, inputs, attrs=None, domain="com.microsoft", out_dtype=None, inits=()):
    """inputs: list of (name, array or None for an omitted optional input); the names in
    `inits` become initializers (constant weights, packed at plan time) instead of inputs."""
    names = [n if a is not None else "" for n, a in inputs]
    given = {n: a for n, a in inputs if a is not None}
    feeds = {n: a for n, a in given.items() if n not in inits}
    out_type = TYPES[out_dtype or next(iter(given.values())).dtype.type]
    node = helper.make_node(op, names, ["y"], domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(n, TYPES[a.dtype.type], a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(a, n) for n, a in given.items() if n in inits])
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


def integer_products():
    """QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul (after the cases above, so their
    random values stay as they were)."""
    m, k, n = 5, 37, 19
    a_u8, b_u8, b_i8 = q([m, k], np.uint8), q([k, n], np.uint8), q([k, n], np.int8)
    col = lambda lo, hi: RNG.uniform(lo, hi, n).astype(np.float32)
    case("qgemm_u8u8_float", "QGemm", [
        ("A", a_u8), ("a_scale", s(0.02)), ("a_zero_point", z(131, np.uint8)),
        ("B", b_u8), ("b_scale", s(0.03)), ("b_zero_point", z(120, np.uint8))],
        {"alpha": 0.5}, out_dtype=np.float32, inits=("B",))
    case("qgemm_u8i8_per_column_bias_transb", "QGemm", [
        ("A", a_u8), ("a_scale", s(0.02)), ("a_zero_point", z(131, np.uint8)),
        ("B", np.ascontiguousarray(b_i8.T)), ("b_scale", col(0.01, 0.05)),
        ("b_zero_point", np.zeros(n, np.int8)),
        ("C", RNG.integers(-3000, 3000, n).astype(np.int32)),
        ("y_scale", s(0.3)), ("y_zero_point", z(100, np.uint8))],
        {"transB": 1, "alpha": 1.5}, inits=("B", "b_scale", "b_zero_point", "C"))
    case("qgemm_i8i8_transa_full_bias", "QGemm", [
        ("A", q([k, m], np.int8)), ("a_scale", s(0.05)), ("a_zero_point", z(-3, np.int8)),
        ("B", b_i8), ("b_scale", s(0.02)), ("b_zero_point", z(0, np.int8)),
        ("C", RNG.integers(-5000, 5000, (m, n)).astype(np.int32)),
        ("y_scale", s(0.4)), ("y_zero_point", z(5, np.int8))], {"transA": 1})
    case("qgemm_u8i8_row_bias_float", "QGemm", [
        ("A", a_u8), ("a_scale", s(0.02)), ("a_zero_point", z(128, np.uint8)),
        ("B", b_i8), ("b_scale", col(0.01, 0.03)), ("b_zero_point", np.zeros(n, np.int8)),
        ("C", RNG.integers(-900, 900, (m, 1)).astype(np.int32))], out_dtype=np.float32)
    a3 = q([2, 3, k], np.uint8)
    case("matmulintegertofloat_per_column_bias", "MatMulIntegerToFloat", [
        ("A", a3), ("B", b_i8), ("a_scale", s(0.04)), ("b_scale", col(0.01, 0.03)),
        ("a_zero_point", z(127, np.uint8)), ("b_zero_point", RNG.integers(-4, 4, n).astype(np.int8)),
        ("bias", RNG.standard_normal(n).astype(np.float32))], out_dtype=np.float32,
        inits=("B", "b_scale", "b_zero_point", "bias"))
    case("matmulintegertofloat_u8u8", "MatMulIntegerToFloat", [
        ("A", a_u8), ("B", b_u8), ("a_scale", s(0.04)), ("b_scale", s(0.02)),
        ("a_zero_point", z(3, np.uint8)), ("b_zero_point", z(128, np.uint8))], out_dtype=np.float32)
    x = RNG.standard_normal((2, 4, k)).astype(np.float32) * 2 + 0.3
    case("dynamicquantizematmul_per_column_bias", "DynamicQuantizeMatMul", [
        ("A", x), ("B", b_i8), ("b_scale", col(0.01, 0.03)),
        ("b_zero_point", np.zeros(n, np.int8)), ("bias", RNG.standard_normal(n).astype(np.float32))],
        out_dtype=np.float32, inits=("B", "b_scale", "b_zero_point", "bias"))
    case("dynamicquantizematmul_u8", "DynamicQuantizeMatMul", [
        ("A", np.abs(x[0])), ("B", b_u8), ("b_scale", s(0.02)), ("b_zero_point", z(128, np.uint8))],
        out_dtype=np.float32)


def average_pools():
    """QLinearAveragePool over its attributes, both layouts and 1-3 spatial axes."""
    for dtype, tag in [(np.uint8, "u8"), (np.int8, "i8")]:
        zp = 128 if dtype == np.uint8 else 0
        params = lambda: [("x_scale", s(0.05)), ("x_zero_point", z(zp + 4, dtype)),
                          ("y_scale", s(0.03)), ("y_zero_point", z(zp - 2, dtype))]
        def pool(name, shape, **attrs):
            case(f"qlinearaveragepool_{name}_{tag}", "QLinearAveragePool",
                 [("x", q(shape, dtype))] + params(), attrs)
        pool("pads_strides", [2, 3, 7, 8], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        pool("count_include_pad", [1, 2, 7, 8], kernel_shape=[3, 2], strides=[2, 3],
             pads=[1, 0, 1, 1], count_include_pad=1)
        pool("ceil_mode", [1, 2, 6, 7], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
        pool("ceil_mode_count_pad", [1, 2, 6, 7], kernel_shape=[2, 3], strides=[2, 2],
             pads=[0, 1, 1, 0], ceil_mode=1, count_include_pad=1)
        pool("same_upper", [1, 2, 5, 6], kernel_shape=[3, 2], auto_pad="SAME_UPPER")
        pool("same_lower_strided", [1, 2, 5, 6], kernel_shape=[3, 3], strides=[2, 2],
             auto_pad="SAME_LOWER", count_include_pad=1)
        pool("nhwc", [2, 6, 5, 3], kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1],
             channels_last=1)
        pool("nhwc_ceil", [1, 7, 7, 40], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
             channels_last=1)
        pool("1d", [2, 3, 11], kernel_shape=[4], strides=[3], pads=[2, 1])
        pool("3d", [1, 2, 4, 5, 6], kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 0])
        pool("global_fallback", [1, 3, 4, 5], kernel_shape=[4, 5])


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
    integer_products()
    average_pools()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {len(os.listdir(OUT))} cases, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
