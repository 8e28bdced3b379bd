"""strata: an inference runtime for ONNX models, with onnxruntime's Python API.

``import strata as onnxruntime`` is meant to be the only change an onnxruntime script needs::

    import numpy as np, strata as ort
    sess = ort.InferenceSession("model.onnx")
    name = sess.get_inputs()[0].name
    (y,) = sess.run(None, {name: np.zeros((1, 3, 224, 224), np.float32)})

GGUF language models: ``strata.LanguageModel(path).generate(prompt)``.

strata's own extras: ``InferenceSession.memory_plan()``, ``InferenceSession.profile()`` and
``SessionOptions.set_optimization_profile()``.

Eager tensors, with PyTorch's names: ``x = strata.tensor(array)``, ``(x @ w + b).softmax(-1)``,
``y.add_(b)``, ``strata.cat([a, b], dim=0)``, ``x.numpy()``.
"""

from . import capi  # noqa: F401
from ._errors import *  # noqa: F401,F403
from ._errors import __all__ as _error_names
from ._options import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from ._llm import LanguageModel
from ._ortvalue import IOBinding, OrtDevice, OrtValue, SessionIOBinding
from ._session import InferenceSession, ModelMetadata, NodeArg
from ._tensor import *  # noqa: F401,F403
from ._tensor import __all__ as _tensor_names
from ._strata import __version__, export_builtin_models

__all__ = [
    "InferenceSession",
    "LanguageModel",
    "OrtValue",
    "OrtDevice",
    "IOBinding",
    "SessionIOBinding",
    "SessionOptions",
    "RunOptions",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "NodeArg",
    "ModelMetadata",
    "export_builtin_models",
    "get_device",
    "get_available_providers",
    "get_all_providers",
    "get_version_string",
    "get_build_info",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_seed",
    "__version__",
] + list(_error_names) + list(_tensor_names)

version = __version__
package_name = "strata"


def get_device():
    """``'CPU'``: strata runs on the CPU."""
    return "CPU"


def get_available_providers():
    return ["CPUExecutionProvider"]


def get_all_providers():
    return ["CPUExecutionProvider"]


def get_version_string():
    return __version__


def get_build_info():
    return f"strata {__version__} (Rust, CPU)"


def set_default_logger_severity(severity):
    """Accepted and ignored: strata does not log; errors are raised."""


def set_default_logger_verbosity(verbosity):
    """Accepted and ignored: strata does not log; errors are raised."""


def set_seed(seed):
    """Accepted and ignored: strata's kernels use no global random state."""


def disable_telemetry_events():
    """No-op: strata sends nothing anywhere."""


def enable_telemetry_events():
    """No-op: strata sends nothing anywhere."""


# Last: it re-exports the functions above (``onnxruntime.capi._pybind_state.X``).
from .capi import _pybind_state  # noqa: E402,F401
