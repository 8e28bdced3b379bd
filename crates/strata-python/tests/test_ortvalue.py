"""OrtValue, IOBinding, run_with_ort_values and run_async, used as onnxruntime scripts use them:
the same script body runs against strata and onnxruntime and gets the same numbers."""

import threading

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto

import strata
from conftest import identity_model


def both(model):
    return [
        (strata, strata.InferenceSession(model)),
        (onnxruntime, onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])),
    ]


def test_ortvalue_basics_match_onnxruntime():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours = strata.OrtValue.ortvalue_from_numpy(x)
    theirs = onnxruntime.OrtValue.ortvalue_from_numpy(x)
    for method in ("shape", "data_type", "element_type", "device_name", "is_tensor", "has_value",
                   "tensor_size_in_bytes", "data_ptr"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    # numpy() is the array itself, as onnxruntime's is for the CPU.
    ours.numpy()[0, 0] = 42
    assert x[0, 0] == 42
    ours.update_inplace(np.ones((2, 3), np.float32))
    assert (x == 1).all()
    with pytest.raises(strata.InvalidArgument, match="shape"):
        ours.update_inplace(np.ones(3, np.float32))
    made = strata.OrtValue.ortvalue_from_shape_and_type([2, 5], np.int64)
    assert made.shape() == [2, 5] and made.data_type() == "tensor(int64)"
    made = strata.OrtValue.ortvalue_from_shape_and_type([4], TensorProto.FLOAT16)
    assert made.numpy().dtype == np.float16
    with pytest.raises(strata.NotImplemented, match="CPU"):
        strata.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert strata.OrtValue.ortvalue_from_numpy(x.T).numpy().flags.c_contiguous


def test_ortvalue_with_onnx_type_holds_float8_bytes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    raw = np.array([0x38, 0xC0], np.uint8)  # 1.0 and -2.0 in float8e4m3fn
    v = strata.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_element_type=TensorProto.FLOAT8E4M3FN)
    assert v.data_type() == "tensor(float8e4m3fn)"
    assert v.numpy().dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(v.numpy().astype(np.float32), [1.0, -2.0])
    sess = strata.InferenceSession(identity_model(TensorProto.FLOAT8E4M3FN, [2]))
    (y,) = sess.run_with_ort_values(None, {"x": v})
    np.testing.assert_array_equal(y.numpy().view(np.uint8), raw)


def test_run_with_ort_values_matches_onnxruntime(add_mul_model):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    results = []
    for ort, sess in both(add_mul_model):
        outs = sess.run_with_ort_values(["z", "y"], {"x": ort.OrtValue.ortvalue_from_numpy(x)})
        assert [o.shape() for o in outs] == [[3, 4], [3, 4]]
        results.append([o.numpy() for o in outs])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # An OrtValue may also be fed to run() directly.
    sess = strata.InferenceSession(add_mul_model)
    (z,) = sess.run(["z"], {"x": strata.OrtValue.ortvalue_from_numpy(x)})
    np.testing.assert_allclose(z, x + 1)


def test_io_binding_matches_onnxruntime(add_mul_model):
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    per_runtime = []
    for ort, sess in both(add_mul_model):
        binding = sess.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_output("y")
        z = ort.OrtValue.ortvalue_from_shape_and_type([2, 4], np.float32)
        binding.bind_ortvalue_output("z", z)
        binding.synchronize_inputs()
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()
        outs = binding.get_outputs()
        assert len(outs) == 2
        copies = binding.copy_outputs_to_cpu()
        per_runtime.append((copies[0], z.numpy().copy(), outs[0].numpy()))
    for a, b in zip(*per_runtime):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(per_runtime[0][1], x + 1, rtol=1e-6)


def test_io_binding_by_pointer_and_rebinding(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    x = strata.OrtValue.ortvalue_from_numpy(np.ones((1, 4), np.float32))
    out = np.zeros((1, 4), np.float32)
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [1, 4], x.data_ptr())
    binding.bind_output("z", "cpu", 0, np.float32, [1, 4], out.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, np.full((1, 4), 2, np.float32))
    # New data in the same bound buffer is seen by the next run.
    x.update_inplace(np.full((1, 4), 5, np.float32))
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, np.full((1, 4), 6, np.float32))
    # A bound output of the wrong shape is an error naming both.
    binding.bind_ortvalue_output("z", strata.OrtValue.ortvalue_from_shape_and_type([2, 4], np.float32))
    with pytest.raises(strata.InvalidArgument, match="bound buffer"):
        sess.run_with_iobinding(binding)
    binding.clear_binding_inputs()
    with pytest.raises(strata.MissingInput):
        sess.run_with_iobinding(binding)
    with pytest.raises(strata.NotImplemented):
        binding.bind_output("y", "cuda")


def test_run_async_calls_back(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    done = threading.Event()
    seen = {}

    def callback(outputs, user_data, error):
        seen.update(outputs=outputs, user_data=user_data, error=error)
        done.set()

    x = np.ones((1, 4), np.float32)
    sess.run_async(["z"], {"x": x}, callback, "tag")
    assert done.wait(30)
    assert seen["error"] == "" and seen["user_data"] == "tag"
    np.testing.assert_array_equal(seen["outputs"][0], x + 1)
    done.clear()
    sess.run_async(["nope"], {"x": x}, callback, None)
    assert done.wait(30)
    assert seen["outputs"] is None and "nope" in seen["error"]


def test_onnxruntime_surface_is_there():
    """Every public name an onnxruntime script commonly touches exists in strata."""
    for name in ("InferenceSession", "SessionOptions", "RunOptions", "OrtValue", "IOBinding",
                 "SessionIOBinding", "OrtDevice", "NodeArg", "ModelMetadata",
                 "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "get_device",
                 "get_available_providers", "get_all_providers", "get_version_string",
                 "get_build_info", "set_default_logger_severity", "set_default_logger_verbosity",
                 "set_seed", "disable_telemetry_events", "enable_telemetry_events", "__version__"):
        assert hasattr(strata, name), name
    for name in ("run", "run_with_ort_values", "run_with_iobinding", "run_async", "io_binding",
                 "get_inputs", "get_outputs", "get_overridable_initializers", "get_modelmeta",
                 "get_providers", "get_provider_options", "set_providers", "get_session_options",
                 "end_profiling", "get_profiling_start_time_ns", "disable_fallback",
                 "enable_fallback"):
        assert hasattr(strata.InferenceSession, name), name
    # Scripts reach some of it through capi.
    strata.capi._pybind_state.set_default_logger_severity(3)
    assert strata.capi._pybind_state.get_available_providers() == ["CPUExecutionProvider"]
    assert strata.capi.onnxruntime_pybind11_state.InvalidArgument is strata.InvalidArgument
    # onnxruntime 1.32's SessionOptions and RunOptions members (a fixed list, so that a new
    # onnxruntime release does not break this test).
    session_options = """add_external_initializers add_external_initializers_from_files_in_memory
        add_free_dimension_override_by_denotation add_free_dimension_override_by_name
        add_initializer add_provider add_provider_for_devices add_session_config_entry
        clear_ep_context_data_read_func enable_cpu_mem_arena enable_mem_pattern enable_mem_reuse
        enable_profiling execution_mode execution_order get_session_config_entry
        graph_optimization_level has_providers inter_op_num_threads intra_op_num_threads
        log_severity_level log_verbosity_level logid optimized_model_filepath profile_file_prefix
        register_custom_ops_library set_ep_context_data_read_func set_load_cancellation_flag
        set_provider_selection_policy set_provider_selection_policy_delegate
        use_deterministic_compute use_per_session_threads""".split()
    so = strata.SessionOptions()
    assert [n for n in session_options if not hasattr(so, n)] == []
    run_options = """add_active_adapter add_run_config_entry get_run_config_entry log_severity_level
        log_verbosity_level logid only_execute_path_to_fetches terminate""".split()
    ro = strata.RunOptions()
    assert [n for n in run_options if not hasattr(ro, n)] == []
    so.set_load_cancellation_flag(True)
    with pytest.raises(strata.Fail, match="cancel"):
        strata.InferenceSession(identity_model(TensorProto.FLOAT, [1]), so)
