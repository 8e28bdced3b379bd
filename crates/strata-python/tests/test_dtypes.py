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


ML_DTYPES = [
    # (onnx type, ml_dtypes name, onnxruntime type name, sample values)
    (TensorProto.BFLOAT16, "bfloat16", "tensor(bfloat16)", [1.0, -2.5, 3.25, 0.0, 1e30, -1e-30]),
    (TensorProto.FLOAT8E4M3FN, "float8_e4m3fn", "tensor(float8e4m3fn)", [1.0, -2.5, 448.0, 0.0, -0.015625, 3.5]),
    (TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz", "tensor(float8e4m3fnuz)", [1.0, -2.5, 240.0, 0.0, 0.125, -3.0]),
    (TensorProto.FLOAT8E5M2, "float8_e5m2", "tensor(float8e5m2)", [1.0, -2.5, 57344.0, 0.0, -0.5, 96.0]),
    (TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz", "tensor(float8e5m2fnuz)", [1.0, -2.5, 57344.0, 0.0, 0.25, -64.0]),
    (TensorProto.FLOAT8E8M0, "float8_e8m0fnu", "tensor(float8e8m0)", [1.0, 2.0, 0.5, 2.0**100, 2.0**-100, 4.0]),
    (TensorProto.FLOAT4E2M1, "float4_e2m1fn", "tensor(float4e2m1)", [1.0, -1.5, 6.0, 0.0, -0.5, 3.0]),
    (TensorProto.INT4, "int4", "tensor(int4)", [-8, -3, 0, 1, 7, -1]),
    (TensorProto.UINT4, "uint4", "tensor(uint4)", [0, 3, 8, 15, 1, 9]),
    (TensorProto.INT2, "int2", "tensor(int2)", [-2, -1, 0, 1, 1, -2]),
    (TensorProto.UINT2, "uint2", "tensor(uint2)", [0, 1, 2, 3, 3, 0]),
]


@pytest.mark.parametrize("elem_type,name,type_name,values", ML_DTYPES, ids=[m[1] for m in ML_DTYPES])
def test_ml_dtypes_round_trip(elem_type, name, type_name, values):
    """bfloat16, float8, float4, int4 and int2 go in and come back as ml_dtypes arrays with the
    same bits, contiguous or strided."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dtype = np.dtype(getattr(ml_dtypes, name))
    sess = strata.InferenceSession(identity_model(elem_type, ["A", "B"]))
    assert sess.get_inputs()[0].type == type_name
    x = np.array(values, dtype=dtype).reshape(2, 3)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == dtype and y.shape == (2, 3)
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    for view in (x.T, x[:, ::2], x[::-1]):
        (y,) = sess.run(None, {"x": view})
        np.testing.assert_array_equal(y.view(np.uint8), np.ascontiguousarray(view).view(np.uint8))
    # Lists are made arrays of the input's type.
    (y,) = sess.run(None, {"x": [values[:3], values[3:]]})
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("name,other", [("int4", np.int8), ("float8_e4m3fn", np.uint8), ("float8_e5m2", "float8_e4m3fn")])
def test_ml_dtypes_wrong_type_names_both(name, other):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    elem = {"int4": TensorProto.INT4, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e5m2": TensorProto.FLOAT8E5M2}[name]
    sess = strata.InferenceSession(identity_model(elem, [2]))
    other = np.dtype(getattr(ml_dtypes, other)) if isinstance(other, str) else np.dtype(other)
    with pytest.raises(strata.InvalidArgument, match=f"got a {other} array of shape \\[2\\], expected dtype {name}"):
        sess.run(None, {"x": np.zeros(2, other)})


def test_int4_arithmetic_sees_signed_values():
    """strata holds int4 sign-extended: a model computing on int4 (Cast to int32) sees -8..7."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx import helper

    from conftest import make_model

    model = make_model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)],
        [helper.make_tensor_value_info("x", TensorProto.INT4, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [4])],
        opset=21,
    )
    x = np.array([-8, -1, 0, 7], dtype=ml_dtypes.int4)
    (y,) = strata.InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.array([-8, -1, 0, 7], np.int32))
