"""Every dtype strata shares with numpy goes in and comes back unchanged, contiguous or not;
lists and scalars are coerced to the input's dtype as onnxruntime does."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto

import strata
from conftest import identity_model

NUMERIC = [
    (TensorProto.FLOAT, np.float32, "tensor(float)"),
    (TensorProto.DOUBLE, np.float64, "tensor(double)"),
    (TensorProto.FLOAT16, np.float16, "tensor(float16)"),
    (TensorProto.INT8, np.int8, "tensor(int8)"),
    (TensorProto.INT16, np.int16, "tensor(int16)"),
    (TensorProto.INT32, np.int32, "tensor(int32)"),
    (TensorProto.INT64, np.int64, "tensor(int64)"),
    (TensorProto.UINT8, np.uint8, "tensor(uint8)"),
    (TensorProto.UINT16, np.uint16, "tensor(uint16)"),
    (TensorProto.UINT32, np.uint32, "tensor(uint32)"),
    (TensorProto.UINT64, np.uint64, "tensor(uint64)"),
    (TensorProto.BOOL, np.bool_, "tensor(bool)"),
]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("elem_type,dtype,type_name", NUMERIC)
def test_numeric_round_trip(elem_type, dtype, type_name):
    sess = strata.InferenceSession(identity_model(elem_type, ["A", "B"]))
    assert sess.get_inputs()[0].type == type_name
    x = sample(dtype, (3, 5))
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == np.dtype(dtype) and y.shape == (3, 5)
    np.testing.assert_array_equal(y, x)
    # Strided views (a transpose, a step slice) arrive in logical order.
    for view in (x.T, x[:, ::2], x[::-1]):
        (y,) = sess.run(None, {"x": view})
        np.testing.assert_array_equal(y, view)


@pytest.mark.parametrize("elem_type,dtype,type_name", NUMERIC)
def test_numeric_types_match_onnxruntime(elem_type, dtype, type_name):
    model = identity_model(elem_type, [2, 3])
    ort = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = sample(dtype, (2, 3), seed=1)
    (ours,) = strata.InferenceSession(model).run(None, {"x": x})
    (theirs,) = ort.run(None, {"x": x})
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


def test_rank_zero_and_empty_tensors():
    sess = strata.InferenceSession(identity_model(TensorProto.FLOAT, []))
    (y,) = sess.run(None, {"x": np.array(2.5, np.float32)})
    assert y.shape == () and y == np.float32(2.5)
    (y,) = sess.run(None, {"x": np.float32(1.5)})  # a numpy scalar
    assert y.shape == () and y == np.float32(1.5)
    empty = strata.InferenceSession(identity_model(TensorProto.INT64, ["N", 3]))
    (y,) = empty.run(None, {"x": np.zeros((0, 3), np.int64)})
    assert y.shape == (0, 3) and y.dtype == np.int64


def test_lists_and_scalars_are_coerced_like_onnxruntime():
    model = identity_model(TensorProto.FLOAT, ["N", 3])
    ort = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    ours = strata.InferenceSession(model)
    for feed in ([[1, 2, 3]], [[1.5, 2, 3], [4, 5, 6]]):
        (a,) = ours.run(None, {"x": feed})
        (b,) = ort.run(None, {"x": feed})
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)
    (a,) = ours.run(None, {"x": ((7, 8, 9),)})  # onnxruntime refuses tuples; strata takes them
    np.testing.assert_array_equal(a, np.array([[7, 8, 9]], np.float32))
    ints = strata.InferenceSession(identity_model(TensorProto.INT64, []))
    (y,) = ints.run(None, {"x": 7})
    assert y.dtype == np.int64 and y == 7


@pytest.mark.parametrize(
    "feed",
    [
        np.array(["a", "bc", "", "déjà vu"], dtype=object),
        np.array(["a", "bc", "", "déjà vu"]),  # unicode 'U' array
        ["a", "bc", "", "déjà vu"],  # a list
        np.array(["a", "bc", "", "déjà vu"], dtype=object)[::-1],  # strided
    ],
)
def test_strings_round_trip(feed):
    sess = strata.InferenceSession(identity_model(TensorProto.STRING, [None]))
    assert sess.get_inputs()[0].type == "tensor(string)"
    assert sess.get_inputs()[0].shape == [None]
    (y,) = sess.run(None, {"x": feed})
    assert y.dtype == object
    assert list(y) == list(np.asarray(feed, dtype=object))


def test_strings_shape_and_bytes():
    sess = strata.InferenceSession(identity_model(TensorProto.STRING, [2, 2]))
    (y,) = sess.run(None, {"x": np.array([[b"x", b"y"], [b"z", b"w"]])})
    assert y.shape == (2, 2) and y.tolist() == [["x", "y"], ["z", "w"]]


def test_bfloat16_round_trip_when_ml_dtypes_is_there():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    sess = strata.InferenceSession(identity_model(TensorProto.BFLOAT16, [4]))
    assert sess.get_inputs()[0].type == "tensor(bfloat16)"
    x = np.array([1.0, -2.5, 3.25, 0.0], dtype=ml_dtypes.bfloat16)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32))
