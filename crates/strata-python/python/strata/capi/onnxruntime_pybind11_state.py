"""The exception classes and types onnxruntime scripts reach through
``onnxruntime.capi.onnxruntime_pybind11_state``."""

from .._errors import *  # noqa: F401,F403
from .._errors import __all__ as _errors
from .._session import (  # noqa: F401
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
)

__all__ = list(_errors) + [
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "InferenceSession",
    "ModelMetadata",
    "NodeArg",
    "RunOptions",
    "SessionOptions",
]
