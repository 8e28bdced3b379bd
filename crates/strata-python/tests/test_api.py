"""onnxruntime's surface: session introspection, options, providers, metadata."""

import os
import pathlib

import numpy as np
import onnxruntime
import pytest

import strata
from conftest import add_mul_model  # noqa: F401 - fixture


def test_inputs_outputs_and_types_match_onnxruntime(add_mul_model):
    ours = strata.InferenceSession(add_mul_model)
    theirs = onnxruntime.InferenceSession(add_mul_model, providers=["CPUExecutionProvider"])
    for a, b in zip(ours.get_inputs(), theirs.get_inputs()):
        assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
    for a, b in zip(ours.get_outputs(), theirs.get_outputs()):
        assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
    assert [i.name for i in ours.get_inputs()] == ["x"]  # initializers are not inputs
    assert ours.get_inputs()[0].shape == ["N", 4]


def test_model_metadata_matches_onnxruntime(add_mul_model):
    ours = strata.InferenceSession(add_mul_model).get_modelmeta()
    theirs = onnxruntime.InferenceSession(add_mul_model, providers=["CPUExecutionProvider"]).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "version", "custom_metadata_map"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.producer_name == "strata-tests" and ours.version == 3


def test_custom_metadata_map():
    import onnx
    from onnx import TensorProto, helper

    from conftest import identity_model

    model = onnx.load_from_string(identity_model(TensorProto.FLOAT, [2]))
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    meta = strata.InferenceSession(model.SerializeToString()).get_modelmeta()
    assert meta.custom_metadata_map == {"author": "me", "license": "MIT"}


def test_path_pathlike_and_bytes_load_the_same_model(add_mul_model, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul_model)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    results = [
        strata.InferenceSession(source).run(None, {"x": x})
        for source in (str(path), pathlib.Path(path), add_mul_model, bytearray(add_mul_model))
    ]
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError):
        strata.InferenceSession(42)


def test_run_output_selection_and_order(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    x = np.ones((3, 4), np.float32)
    y, z = sess.run(None, {"x": x})
    z2, y2 = sess.run(["z", "y"], {"x": x})
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(z, z2)
    np.testing.assert_array_equal(z, x + 1)
    np.testing.assert_allclose(y, x * 2 + np.array([0.5, -1.0, 2.0, 0.0], np.float32))
    assert len(sess.run([], {"x": x})) == 2  # [] means all, as in onnxruntime


def test_outputs_do_not_alias_between_calls(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    (first,) = sess.run(["z"], {"x": np.zeros((1, 4), np.float32)})
    sess.run(["z"], {"x": np.full((1, 4), 5, np.float32)})
    np.testing.assert_array_equal(first, np.ones((1, 4), np.float32))


def test_providers_device_and_versions(add_mul_model):
    sess = strata.InferenceSession(add_mul_model, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}
    assert strata.get_available_providers() == ["CPUExecutionProvider"]
    assert strata.get_all_providers() == ["CPUExecutionProvider"]
    assert strata.get_device() == "CPU"
    assert strata.get_version_string() == strata.__version__
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        strata.InferenceSession(add_mul_model, providers=[("CUDAExecutionProvider", {}), "CPUExecutionProvider"])


def test_session_options_fields_are_those_of_onnxruntime():
    ours, theirs = strata.SessionOptions(), onnxruntime.SessionOptions()
    for field in (
        "intra_op_num_threads",
        "inter_op_num_threads",
        "log_severity_level",
        "log_verbosity_level",
        "logid",
        "enable_profiling",
        "profile_file_prefix",
        "optimized_model_filepath",
        "enable_cpu_mem_arena",
        "enable_mem_pattern",
        "enable_mem_reuse",
        "use_deterministic_compute",
        "use_per_session_threads",
    ):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert int(ours.graph_optimization_level) == int(theirs.graph_optimization_level)
    assert int(ours.execution_mode) == int(theirs.execution_mode)
    assert int(ours.execution_order) == int(theirs.execution_order)
    for enum_name in ("GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"):
        ours_enum, theirs_enum = getattr(strata, enum_name), getattr(onnxruntime, enum_name)
        assert {m: int(v) for m, v in ours_enum.__members__.items()} == {
            m: int(v) for m, v in theirs_enum.__members__.items()
        }
    run_ours, run_theirs = strata.RunOptions(), onnxruntime.RunOptions()
    for field in ("log_severity_level", "log_verbosity_level", "logid", "only_execute_path_to_fetches", "terminate"):
        assert getattr(run_ours, field) == getattr(run_theirs, field), field


def test_session_options_are_applied(add_mul_model):
    opts = strata.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 3  # ignored
    opts.execution_mode = strata.ExecutionMode.ORT_PARALLEL  # ignored
    opts.graph_optimization_level = strata.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.add_session_config_entry("session.x", "1")
    assert opts.get_session_config_entry("session.x") == "1"
    sess = strata.InferenceSession(add_mul_model, sess_options=opts)
    assert sess.get_session_options() is opts
    assert sess._native.threads() == 1
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(sess.run(["z"], {"x": x})[0], x + 1)
    with pytest.raises(strata.NotImplemented):
        opts.register_custom_ops_library("libfoo.so")


def test_run_options_terminate(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    ro = strata.RunOptions()
    ro.add_run_config_entry("k", "v")
    assert ro.get_run_config_entry("k") == "v"
    assert len(sess.run(None, {"x": np.ones((1, 4), np.float32)}, ro)) == 2
    ro.terminate = True
    with pytest.raises(strata.Fail, match="terminate"):
        sess.run(None, {"x": np.ones((1, 4), np.float32)}, ro)


def test_capi_names_resolve_as_in_onnxruntime():
    state = strata.capi.onnxruntime_pybind11_state
    for name in ("Fail", "InvalidArgument", "NoSuchFile", "InvalidProtobuf", "InvalidGraph", "NotImplemented"):
        assert getattr(state, name) is getattr(strata, name)
        assert issubclass(getattr(strata, name), strata.StrataError)
    assert state.SessionOptions is strata.SessionOptions


def test_end_profiling_writes_a_trace(add_mul_model, tmp_path):
    opts = strata.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tmp_path, "trace_")
    sess = strata.InferenceSession(add_mul_model, opts)
    for _ in range(3):
        sess.run(None, {"x": np.ones((2, 4), np.float32)})
    import json

    path = sess.end_profiling()
    events = json.load(open(path))
    assert {e["args"]["op_name"] for e in events} >= {"Add"}
    assert all(e["args"]["runs"] == 3 for e in events)
    assert strata.InferenceSession(add_mul_model).end_profiling() == ""
