"""Eager tensors: ``strata.Tensor`` and the functions around it, with PyTorch's names.

The class and the ops are native (``strata._strata``); this module adds the factories that are
cheapest through numpy (``ones``, ``full``, ``arange``) and the ``inference_mode`` context
manager.
"""

import contextlib

import numpy as _np

from . import _strata
from ._strata import (
    Tensor,
    cat,
    conv2d,
    from_numpy,
    get_eager_threads,
    is_inference_mode_enabled,
    set_eager_threads,
    stack,
    tensor,
    zeros,
)

where = getattr(_strata, "where")


def _dims(shape):
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


def _numpy_dtype(dtype, default):
    # A strata tensor's dtype says how numpy spells it, whatever form `dtype` came in.
    return zeros(0, dtype=default if dtype is None else dtype).dtype


def ones(*shape, dtype=None):
    """A tensor of ones (float32 unless ``dtype`` says otherwise)."""
    return from_numpy(_np.ones(_dims(shape), dtype=_numpy_dtype(dtype, "float32")))


def full(shape, fill_value, dtype=None):
    """A tensor of ``shape`` filled with ``fill_value`` (its dtype by PyTorch's rule: bool,
    int64 or float32, unless ``dtype`` says otherwise)."""
    if dtype is None:
        dtype = "bool" if isinstance(fill_value, bool) else (
            "int64" if isinstance(fill_value, int) else "float32")
    if isinstance(shape, int):
        shape = (shape,)
    return from_numpy(_np.full(tuple(shape), fill_value, dtype=_numpy_dtype(dtype, None)))


def arange(start, end=None, step=1, dtype=None):
    """``[start, end)`` by ``step``: int64 when all three are ints, else float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, end, step))
        dtype = "int64" if ints else "float32"
    return from_numpy(_np.arange(start, end, step).astype(_numpy_dtype(dtype, None)))


class inference_mode(contextlib.ContextDecorator):
    """``with strata.inference_mode():`` (or as a decorator): in-place ops on this thread do
    not bump version counters while it is on. Nests; per thread."""

    def __enter__(self):
        _strata.inference_mode_enter()
        return self

    def __exit__(self, *exc):
        _strata.inference_mode_exit()
        return False


__all__ = [
    "Tensor",
    "tensor",
    "from_numpy",
    "zeros",
    "ones",
    "full",
    "arange",
    "cat",
    "stack",
    "where",
    "conv2d",
    "inference_mode",
    "is_inference_mode_enabled",
    "set_eager_threads",
    "get_eager_threads",
]
