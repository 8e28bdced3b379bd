"""Shared fixtures: the built-in models (written by `strata export`), small models made with
onnx.helper, and the ONNX backend-test cases under ../shared/onnx-tests."""

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import strata

REPO = pathlib.Path(__file__).resolve().parents[3]
ONNX_TESTS = pathlib.Path(os.environ.get("STRATA_ONNX_TESTS", REPO.parent / "shared" / "onnx-tests"))


@pytest.fixture(scope="session")
def builtin_models(tmp_path_factory):
    """The directory holding strata's built-in models, as `strata export` writes them."""
    out = tmp_path_factory.mktemp("builtin")
    written = strata.export_builtin_models(str(out))
    assert len(written) == 4, written
    return out


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **model_fields):
    """The bytes of a one-graph ONNX model."""
    graph = helper.make_graph(nodes, "test_graph", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **model_fields)
    model.ir_version = 8
    return model.SerializeToString()


def identity_model(elem_type, shape):
    """Identity from `x` to `y` of one element type and (possibly symbolic) shape."""
    return make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", elem_type, shape)],
        [helper.make_tensor_value_info("y", elem_type, shape)],
    )


@pytest.fixture(scope="session")
def add_mul_model():
    """y = x * 2 + b, z = x + 1 with x float[N, 4] (N symbolic) and b an initializer."""
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], [0.5, -1.0, 2.0, 0.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    return make_model(
        [
            helper.make_node("Mul", ["x", "two"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["y"]),
            helper.make_node("Add", ["x", "one"], ["z"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4]),
        ],
        initializers=[b, two, one],
        producer_name="strata-tests",
        producer_version="1",
        doc_string="a small model",
        domain="ai.strata.test",
        model_version=3,
    )


def as_comparable(array):
    """ml_dtypes arrays (bfloat16, float8, float4, int4, int2: numpy kind 'V') as float32 or
    int16, which numpy's testing functions compare."""
    if array.dtype.kind != "V":
        return array
    if array.dtype.name.startswith(("int", "uint")):
        return array.astype(np.int16)
    return array.astype(np.float32)


def assert_close(actual, expected, what):
    """Equal dtype and shape; values within rtol 1e-3 (exact for text, bool and integers)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    actual, expected = as_comparable(actual), as_comparable(expected)
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(
            actual.astype(np.float64),
            expected.astype(np.float64),
            rtol=1e-3,
            atol=1e-5,
            equal_nan=True,
            err_msg=what,
        )
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)
