"""strata's exceptions, named after onnxruntime's (``onnxruntime.capi.onnxruntime_pybind11_state``).

Every one derives from :class:`StrataError` (itself a ``RuntimeError``), so ``except
strata.StrataError`` catches them all, and an onnxruntime script catching ``InvalidArgument`` or
``Fail`` by name keeps working after ``import strata as onnxruntime``.
"""


class StrataError(RuntimeError):
    """Base class of every error strata raises."""


class Fail(StrataError):
    """A model failed while running (a kernel error, a shape that does not fit)."""


class InvalidArgument(StrataError):
    """A bad call: unknown input or output name, wrong dtype, rank or dim, bad option."""


class MissingInput(InvalidArgument, ValueError):
    """A required input is missing from the feed (a ``ValueError``, as in onnxruntime)."""


class NoSuchFile(StrataError):
    """The model file does not exist."""


class InvalidProtobuf(StrataError):
    """The bytes are not a well-formed ONNX model."""


class InvalidGraph(StrataError):
    """The model is well-formed protobuf but not a valid graph (bad node, bad tensor)."""


class NotImplemented(StrataError):  # noqa: A001 - onnxruntime's name
    """The model uses an operator, data type or feature strata does not implement."""


class ShapeError(InvalidArgument, ValueError):
    """An eager tensor op got dims that do not fit (broadcasting, rank, axis, window)."""


class DTypeError(InvalidArgument, TypeError):
    """An eager tensor op got a dtype it does not take, or two that do not promote."""


class NoKernelError(NotImplemented, NotImplementedError):
    """No kernel serves an eager op for its tensors' dispatch keys (the message names both)."""


class RuntimeException(StrataError):
    """Kept for scripts that catch onnxruntime's ``RuntimeException``; strata raises ``Fail``."""


class EPFail(StrataError):
    """Kept for scripts that catch onnxruntime's ``EPFail``; strata has one provider."""


class NoModel(StrataError):
    """Kept for scripts that catch onnxruntime's ``NoModel``."""


class EngineError(StrataError):
    """Kept for scripts that catch onnxruntime's ``EngineError``."""


class ModelLoaded(StrataError):
    """Kept for scripts that catch onnxruntime's ``ModelLoaded``."""


__all__ = [
    "StrataError",
    "Fail",
    "InvalidArgument",
    "MissingInput",
    "NoSuchFile",
    "InvalidProtobuf",
    "InvalidGraph",
    "NotImplemented",
    "ShapeError",
    "DTypeError",
    "NoKernelError",
    "RuntimeException",
    "EPFail",
    "NoModel",
    "EngineError",
    "ModelLoaded",
]
