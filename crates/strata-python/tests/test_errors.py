"""Bad models and bad feeds raise typed exceptions whose messages name what was wrong."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import strata
from conftest import add_mul_model, identity_model, make_model  # noqa: F401


def test_missing_input_is_a_value_error_naming_it(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    with pytest.raises(strata.MissingInput, match=r"\['x'\]") as err:
        sess.run(None, {})
    assert isinstance(err.value, ValueError)  # onnxruntime raises ValueError here
    assert isinstance(err.value, strata.InvalidArgument)


def test_missing_input_after_a_good_call_is_not_filled_from_the_pool():
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
    )
    sess = strata.InferenceSession(model)
    sess.run(None, {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})
    with pytest.raises(strata.MissingInput, match=r"\['b'\]"):
        sess.run(None, {"a": np.ones(2, np.float32)})


def test_wrong_dtype_names_input_dtypes_and_shape(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    with pytest.raises(strata.InvalidArgument) as err:
        sess.run(None, {"x": np.zeros((2, 4), np.float64)})
    message = str(err.value)
    assert '"x"' in message and "float64" in message and "float32" in message and "[2, 4]" in message
    assert "tensor(float)" in message


def test_wrong_rank_and_dim_name_the_input_and_shape(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    with pytest.raises(strata.InvalidArgument, match=r'input "x": rank 1 \(\[4\]\), expected rank 2'):
        sess.run(None, {"x": np.zeros(4, np.float32)})
    with pytest.raises(strata.InvalidArgument, match=r'input "x": dim 1 is 5, expected 4'):
        sess.run(None, {"x": np.zeros((1, 5), np.float32)})
    # The session still works after rejected feeds.
    assert sess.run(["z"], {"x": np.zeros((1, 4), np.float32)})[0].shape == (1, 4)


def test_unknown_output_and_input_names(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    x = np.zeros((1, 4), np.float32)
    with pytest.raises(strata.InvalidArgument, match=r'no output named "nope"; the model\'s outputs are \["y", "z"\]'):
        sess.run(["nope"], {"x": x})
    with pytest.raises(strata.InvalidArgument, match=r'no input named "w"'):
        sess.run(None, {"x": x, "w": x})


def test_uncoercible_feed(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    with pytest.raises(strata.InvalidArgument, match='input "x"'):
        sess.run(None, {"x": [["a", "b", "c", "d"]]})
    strings = strata.InferenceSession(identity_model(TensorProto.STRING, [2]))
    with pytest.raises(strata.InvalidArgument, match=r'input "x": got a float32 array of shape \[2\], expected strings'):
        strings.run(None, {"x": np.zeros(2, np.float32)})


def test_load_errors_are_typed(tmp_path):
    with pytest.raises(strata.NoSuchFile, match="does-not-exist.onnx"):
        strata.InferenceSession(str(tmp_path / "does-not-exist.onnx"))
    with pytest.raises(strata.InvalidProtobuf):
        strata.InferenceSession(b"\xff\xff\xffnot a model")
    unsupported = make_model(
        [helper.make_node("NoSuchOperator", ["x"], ["y"], domain="com.example")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    with pytest.raises(strata.NotImplemented, match="NoSuchOperator"):
        strata.InferenceSession(unsupported)
    for cls in (strata.NoSuchFile, strata.InvalidProtobuf, strata.NotImplemented, strata.Fail):
        assert issubclass(cls, strata.StrataError) and issubclass(cls, RuntimeError)


def test_bad_optimization_profile_is_invalid_argument(add_mul_model):
    opts = strata.SessionOptions()
    opts.set_optimization_profile("x", [4, 4], [2, 4], [8, 4])  # min > opt
    with pytest.raises(strata.InvalidArgument, match=r'input "x" dim 0: need min <= opt <= max'):
        strata.InferenceSession(add_mul_model, opts)
