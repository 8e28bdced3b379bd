"""``onnxruntime.capi._pybind_state``: the exceptions and types of
``onnxruntime_pybind11_state`` plus the module-level functions scripts call through it
(``set_default_logger_severity``, ``get_available_providers`` …)."""

from .. import (  # noqa: F401
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_version_string,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_seed,
)
from .onnxruntime_pybind11_state import *  # noqa: F401,F403
