"""Real models through `strata.InferenceSession` give onnxruntime's outputs: the built-in models
(`strata export`) and the ONNX backend-test cases strata passes (their `test_data_set_0`)."""

import os
import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

import strata
from conftest import ONNX_TESTS, REPO, as_comparable, assert_close

BUILTIN = ["resnet_like.onnx", "resnet_like_batch.onnx", "mlp.onnx", "transformer_like.onnx"]


def random_feed(session, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    feed = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in arg.shape]
        assert arg.type == "tensor(float)", arg
        feed[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_model_matches_onnxruntime(builtin_models, name):
    path = builtin_models / name
    ours = strata.InferenceSession(str(path))
    theirs = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type, i.shape) for i in ours.get_inputs()] == [
        (i.name, i.type, i.shape) for i in theirs.get_inputs()
    ]
    for seed in range(2):
        feed = random_feed(ours, seed=seed)
        for a, b, out in zip(ours.run(None, feed), theirs.run(None, feed), theirs.get_outputs()):
            assert_close(a, b, f"{name} output {out.name}")


def passing_cases():
    """The cases of the conformance gate's list, or every STRATA_CASE_STRIDE-th of them."""
    listing = REPO / "crates" / "strata-conformance" / "tests" / "conformance_passing.txt"
    names = [
        line.strip()
        for line in listing.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    stride = int(os.environ.get("STRATA_CASE_STRIDE", "1"))
    return names[::stride]


def load_case(case_dir):
    """(model, inputs by name, expected outputs by name) from a case's test_data_set_0, or None
    when it holds anything other than plain tensors."""
    model = onnx.load(str(case_dir / "model.onnx"), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    data = case_dir / "test_data_set_0"
    values = {}
    for kind, args in (("input", inputs), ("output", model.graph.output)):
        for index, arg in enumerate(args):
            if not arg.type.HasField("tensor_type"):
                return None
            path = data / f"{kind}_{index}.pb"
            if not path.exists():
                continue  # an omitted optional input
            tensor = onnx.TensorProto()
            tensor.ParseFromString(path.read_bytes())
            values[(kind, arg.name)] = tensor
    return model, values


T = onnx.TensorProto
NUMPY_ELEM_TYPES = {
    T.FLOAT, T.DOUBLE, T.FLOAT16, T.INT8, T.INT16, T.INT32, T.INT64,
    T.UINT8, T.UINT16, T.UINT32, T.UINT64, T.BOOL, T.STRING,
}
# Types numpy has through ml_dtypes (which onnx's numpy_helper uses for them too).
ML_DTYPES_ELEM_TYPES = {
    T.BFLOAT16, T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ,
    T.FLOAT8E8M0, T.FLOAT4E2M1, T.INT4, T.UINT4, T.INT2, T.UINT2,
}
try:
    import ml_dtypes  # noqa: F401

    NUMPY_ELEM_TYPES |= ML_DTYPES_ELEM_TYPES
except ImportError:
    pass


@pytest.mark.parametrize("case", passing_cases())
def test_onnx_case_matches_reference_and_onnxruntime(case):
    case_dir = ONNX_TESTS / case
    if not case_dir.exists():
        pytest.skip(f"{case_dir} not present")
    loaded = load_case(case_dir)
    if loaded is None:
        pytest.skip("sequence or optional values")
    model, values = loaded
    if any(t.data_type not in NUMPY_ELEM_TYPES for t in values.values()):
        pytest.skip("a dtype numpy has no type for without ml_dtypes (float8, int4, bfloat16 …)")
    feed = {name: numpy_helper.to_array(t) for (kind, name), t in values.items() if kind == "input"}
    expected = {name: numpy_helper.to_array(t) for (kind, name), t in values.items() if kind == "output"}
    path = str(case_dir / "model.onnx")
    session = strata.InferenceSession(path)
    names = [o.name for o in session.get_outputs()]
    ours = dict(zip(names, session.run(None, feed)))
    for name, want in expected.items():
        if want.dtype.kind in "US":
            want = want.astype(object)
        assert_close(ours[name], want, f"{case} output {name} vs reference")
    try:
        quiet = onnxruntime.SessionOptions()
        quiet.log_severity_level = 3
        ort = onnxruntime.InferenceSession(path, quiet, providers=["CPUExecutionProvider"])
        theirs = dict(zip([o.name for o in ort.get_outputs()], ort.run(None, feed)))
    except Exception:  # noqa: BLE001 - onnxruntime lacks the operator or opset: reference only
        return
    for name, want in theirs.items():
        if name not in expected:
            continue
        if want.dtype != expected[name].dtype:
            continue  # onnxruntime returns another type here (e.g. raw bytes for float8)
        w, e = as_comparable(want), as_comparable(expected[name])
        if w.dtype.kind in "fc" and not np.allclose(w, e, rtol=1e-3, atol=1e-5, equal_nan=True):
            continue  # onnxruntime itself departs from the reference here
        assert_close(ours[name], want, f"{case} output {name} vs onnxruntime")
