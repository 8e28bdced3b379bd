"""Mirrors ``onnxruntime.capi`` so that ``onnxruntime.capi.onnxruntime_pybind11_state.X`` and
``onnxruntime.capi._pybind_state.X`` names resolve after ``import strata as onnxruntime``."""

from . import onnxruntime_pybind11_state  # noqa: F401

