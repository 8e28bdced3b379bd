"""``InferenceSession``: onnxruntime's class over strata's plan and context pool."""

import json
import os
import threading
import time
import warnings

from . import _strata
from ._errors import Fail, InvalidArgument, NotImplemented
from ._ortvalue import IOBinding, OrtValue
from ._options import (  # noqa: F401 - re-exported through capi
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)

CPU_PROVIDER = "CPUExecutionProvider"


class NodeArg:
    """An input or output: ``name``, ``type`` (``'tensor(float)'`` …) and ``shape`` (ints,
    strings for symbolic dims, None where unknown)."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name, type, shape):  # noqa: A002 - onnxruntime's field name
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """onnxruntime's model metadata: producer, graph name and description, domain, version and
    the model's custom key/value pairs."""

    def __init__(self, fields):
        self.producer_name = fields["producer_name"]
        self.graph_name = fields["graph_name"]
        self.domain = fields["domain"]
        self.description = fields["description"]
        self.graph_description = fields["graph_description"]
        self.version = fields["version"]
        self.custom_metadata_map = dict(fields["custom_metadata_map"])

    def __repr__(self):
        return (
            f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
            f"domain={self.domain!r}, version={self.version})"
        )


def _provider_names(providers):
    names = []
    for p in providers or []:
        if isinstance(p, (tuple, list)):
            p = p[0]
        if not isinstance(p, str):
            raise InvalidArgument(f"providers: {p!r} is not a provider name")
        names.append(p)
    others = [n for n in names if n != CPU_PROVIDER]
    if others:
        warnings.warn(
            f"strata runs on the CPU only; ignoring providers {others} "
            f"(available: {[CPU_PROVIDER]})",
            stacklevel=3,
        )


def _model_source(path_or_bytes):
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes)
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return os.fspath(path_or_bytes)
    raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")


class InferenceSession:
    """Loads an ONNX model and runs it, as ``onnxruntime.InferenceSession`` does.

    ``path_or_bytes`` is a file path or the bytes of a model. ``providers`` may list anything;
    strata runs on the CPU and warns about the others. One session may be used from many threads
    at once: each call runs on an execution context of its own (a pool per session) with the GIL
    released.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        _provider_names(providers)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._model_path = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) else None
        self._native = _strata.Session(
            _model_source(path_or_bytes), **self._sess_options._native_args()
        )
        self._inputs = [NodeArg(*row) for row in self._native.inputs()]
        self._outputs = [NodeArg(*row) for row in self._native.outputs()]
        self._input_names = [i.name for i in self._inputs]
        self._profiling_start_ns = time.time_ns()

    # -- onnxruntime's API ----------------------------------------------------------------------

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        """strata does not let feeds override initializers: always empty."""
        return []

    def get_modelmeta(self):
        return ModelMetadata(self._native.metadata())

    def get_providers(self):
        return [CPU_PROVIDER]

    def get_provider_options(self):
        return {CPU_PROVIDER: {}}

    def set_providers(self, providers=None, provider_options=None):
        _provider_names(providers)

    def get_session_options(self):
        return self._sess_options

    def disable_fallback(self):
        """No-op: strata has one provider, so nothing to fall back from."""

    def enable_fallback(self):
        """No-op: strata has one provider, so nothing to fall back to."""

    def run(self, output_names, input_feed, run_options=None):
        """The outputs named in ``output_names`` (all for None or []) as numpy arrays, for
        ``input_feed`` (input name → numpy array, list or scalar of the input's type)."""
        if run_options is not None and run_options.terminate:
            raise Fail("Exiting due to terminate flag being set to true.")
        if not isinstance(input_feed, dict):
            input_feed = dict(input_feed)
        return self._native.run(list(output_names) if output_names else None, input_feed)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """``run`` with OrtValues in and out."""
        feed = {
            name: value.numpy() if isinstance(value, OrtValue) else value
            for name, value in input_dict_ort_values.items()
        }
        return [OrtValue(a) for a in self.run(output_names, feed, run_options)]

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs on a new thread and calls ``callback(outputs, user_data, error)`` there:
        ``outputs`` a list of numpy arrays and ``error`` "" on success, ``outputs`` None and
        the error's message on failure."""

        def work():
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 - handed to the callback, as onnxruntime does
                callback(None, user_data, str(e))
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, daemon=True).start()

    def io_binding(self):
        """An :class:`IOBinding` for ``run_with_iobinding``."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Runs the feeds and outputs bound in ``iobinding``; outputs go to its preallocated
        buffers or to ``iobinding.get_outputs()``."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise InvalidArgument("run_with_iobinding needs an IOBinding of this session")
        iobinding._run(run_options)

    def run_with_ortvaluevector(self, run_options, feed_names, feeds, fetch_names, fetches,
                                fetch_devices):
        raise NotImplemented("run_with_ortvaluevector is onnxruntime's training API; use run_with_ort_values")

    def get_tuning_results(self):
        """Always empty: strata has no kernel tuning (onnxruntime's CPU provider has none
        either)."""
        return []

    def set_tuning_results(self, results, error_on_invalid=False):
        """Accepted and ignored: strata has no kernel tuning."""

    def get_profiling_start_time_ns(self):
        return self._profiling_start_ns

    def end_profiling(self):
        """Writes the per-node times of every call so far as a Chrome trace
        (``<profile_file_prefix><timestamp>.json``) and returns the file name; "" when
        ``enable_profiling`` is off."""
        if not self._native.profiling_enabled():
            return ""
        events = []
        for row in self._native.node_timings():
            events.append(
                {
                    "cat": "Node",
                    "pid": os.getpid(),
                    "tid": 0,
                    "ts": 0,
                    "ph": "X",
                    "dur": row["total_us"],
                    "name": f"{row['node']}_kernel_time",
                    "args": {"op_name": row["op"], "runs": row["runs"]},
                }
            )
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._sess_options.profile_file_prefix}{stamp}.json"
        with open(path, "w") as f:
            json.dump(events, f)
        return path

    # -- strata's own ---------------------------------------------------------------------------

    def memory_plan(self):
        """The static memory plan: ``arena_bytes`` (one buffer holding every intermediate),
        ``lower_bound_bytes`` (most bytes live at one step), ``no_reuse_bytes`` (the sum without
        reuse), ``alignment``, ``in_place_nodes``, ``planned`` (False until dims are known: then
        the byte fields are None), ``weight_bytes`` by dtype, and ``bytes_by_kind``: the
        process's bytes in use and peak per memory kind (``Persistent`` weights,
        ``Workspace`` arenas …)."""
        return self._native.memory_plan()

    def profile(self, input_feed=None, runs=10, warmup=1):
        """Runs the model ``warmup + runs`` times on a fresh context that times every node;
        returns ``{"runs", "mean_ms", "median_ms", "p90_ms", "min_ms", "by_op": {op: {"ms",
        "nodes"}}, "by_node": [{"node", "op", "ms"}]}`` with times per run. Without a feed the
        inputs are seeded random data (symbolic dims: the profile's opt, else 1)."""
        if input_feed is None:
            input_feed = self._random_feed()
        return self._native.profile(dict(input_feed), int(runs), int(warmup))

    def context_count(self):
        """Execution contexts this session has made: more than one means calls overlapped."""
        return self._native.context_count()

    def _random_feed(self):
        import numpy as np

        rng = np.random.default_rng(0)
        ranges = self._sess_options.optimization_profile
        feed = {}
        for arg in self._inputs:
            opt = ranges.get(arg.name, (None, None, None))[1]
            shape = [
                d if isinstance(d, int) else (opt[i] if opt is not None else 1)
                for i, d in enumerate(arg.shape)
            ]
            kind = arg.type[len("tensor(") : -1]
            if kind == "string":
                feed[arg.name] = np.full(shape, "a", dtype=object)
            elif kind == "bool":
                feed[arg.name] = rng.integers(0, 2, size=shape).astype(bool)
            elif kind in ("float", "double", "float16"):
                dtype = {"float": np.float32, "double": np.float64, "float16": np.float16}[kind]
                feed[arg.name] = rng.standard_normal(shape).astype(dtype)
            else:
                feed[arg.name] = rng.integers(0, 4, size=shape).astype(kind)
        return feed
