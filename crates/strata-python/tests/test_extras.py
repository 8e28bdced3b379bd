"""strata's own extras: the memory plan, per-operator profiles, optimization profiles."""

import numpy as np
import pytest

import strata
from conftest import add_mul_model  # noqa: F401 - fixture


def test_memory_plan_of_a_static_model(builtin_models):
    sess = strata.InferenceSession(str(builtin_models / "resnet_like.onnx"))
    plan = sess.memory_plan()
    assert plan["planned"] is True
    assert 0 < plan["lower_bound_bytes"] <= plan["arena_bytes"] <= plan["no_reuse_bytes"]
    assert plan["alignment"] >= 64
    assert plan["weight_bytes"]["f32"] > 0
    assert plan["bytes_by_kind"]["Persistent"]["active_bytes"] > 0  # the weights
    arg = sess.get_inputs()[0]
    sess.run(None, {arg.name: np.zeros(arg.shape, np.float32)})  # a context: its arena
    assert sess.memory_plan()["bytes_by_kind"]["Workspace"]["active_bytes"] >= plan["arena_bytes"]


def test_memory_plan_is_known_after_the_first_run_for_symbolic_dims(add_mul_model):
    sess = strata.InferenceSession(add_mul_model)
    assert sess.memory_plan()["planned"] is False and sess.memory_plan()["arena_bytes"] is None
    sess.run(None, {"x": np.ones((3, 4), np.float32)})
    assert sess.memory_plan()["planned"] is True


def test_optimization_profile_plans_for_max_and_checks_the_range(add_mul_model):
    opts = strata.SessionOptions()
    opts.set_optimization_profile("x", [1, 4], [4, 4], [16, 4])
    sess = strata.InferenceSession(add_mul_model, opts)
    plan = sess.memory_plan()
    assert plan["planned"] is True
    # Two f32 [16, 4] outputs must fit: 256 bytes each at least.
    assert plan["arena_bytes"] >= 2 * 16 * 4 * 4
    for n in (1, 7, 16):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        (z,) = sess.run(["z"], {"x": x})
        np.testing.assert_array_equal(z, x + 1)
    with pytest.raises(strata.InvalidArgument, match=r'input "x": dim 0 is 17, outside the profile range 1..=16'):
        sess.run(None, {"x": np.zeros((17, 4), np.float32)})


def test_free_dimension_override_fixes_the_dim(add_mul_model):
    opts = strata.SessionOptions()
    opts.add_free_dimension_override_by_name("N", 2)
    sess = strata.InferenceSession(add_mul_model, opts)
    assert sess.memory_plan()["planned"] is True
    assert sess.run(["z"], {"x": np.zeros((2, 4), np.float32)})[0].shape == (2, 4)
    with pytest.raises(strata.InvalidArgument, match="dim 0 is 3"):
        sess.run(None, {"x": np.zeros((3, 4), np.float32)})


def test_profile_reports_latency_and_time_per_operator(builtin_models):
    sess = strata.InferenceSession(str(builtin_models / "resnet_like.onnx"))
    report = sess.profile(runs=3, warmup=1)
    assert report["runs"] == 3
    assert 0 < report["min_ms"] <= report["median_ms"] <= report["p90_ms"]
    assert report["mean_ms"] > 0
    assert "Conv" in report["by_op"] and report["by_op"]["Conv"]["nodes"] >= 1
    assert report["by_op"]["Conv"]["ms"] > 0
    assert sum(r["ms"] for r in report["by_node"]) <= report["mean_ms"] * 1.5
    feed = {sess.get_inputs()[0].name: np.zeros([d for d in sess.get_inputs()[0].shape], np.float32)}
    assert sess.profile(feed, runs=2)["runs"] == 2
