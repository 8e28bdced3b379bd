"""``SessionOptions``, ``RunOptions`` and the option enums, field for field as onnxruntime has them.

strata plans memory statically and runs one execution context per call, so several of
onnxruntime's knobs mean nothing to it: they are accepted and stored (scripts that set them keep
working) and documented below as ignored.
"""

import enum

from ._errors import Fail, InvalidArgument, NotImplemented


class GraphOptimizationLevel(enum.IntEnum):
    """``ORT_DISABLE_ALL`` turns strata's graph optimizations off; every other level turns all of
    them on (strata has one level: constant folding, dead-node removal, fusions)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """Accepted and ignored: strata runs nodes in order, parallel inside each kernel."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """Accepted and ignored: strata's order is fixed when the plan is built."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class _ConfigEntries:
    """onnxruntime's free-form key/value config entries: stored, readable, otherwise unused."""

    def _entries(self):
        return self.__dict__.setdefault("_config_entries", {})

    def _add_entry(self, key, value):
        self._entries()[str(key)] = str(value)

    def _get_entry(self, key):
        try:
            return self._entries()[key]
        except KeyError:
            raise InvalidArgument(f"{type(self).__name__} has no config entry {key!r}") from None


class SessionOptions(_ConfigEntries):
    """How an :class:`InferenceSession` is built.

    Honoured:
      - ``intra_op_num_threads``: threads per kernel (0: one per core).
      - ``graph_optimization_level``: ``ORT_DISABLE_ALL`` disables graph optimizations.
      - ``enable_profiling`` / ``profile_file_prefix``: every call times every node;
        ``InferenceSession.end_profiling()`` writes the times as a JSON trace.
      - ``add_free_dimension_override_by_name(name, value)``: fixes a symbolic dim.
      - strata's own: ``set_optimization_profile(input, min, opt, max)`` (or the
        ``optimization_profile`` dict ``{input: (min, opt, max)}``) gives the range of an
        input's dims; the arena is planned for max once and any dims in range run without
        re-planning. Feeds outside the range raise ``InvalidArgument``.

    Accepted and ignored (they mean nothing to strata): ``inter_op_num_threads``,
    ``execution_mode``, ``execution_order``, ``log_severity_level``, ``log_verbosity_level``,
    ``logid``, ``optimized_model_filepath`` (no optimized model is written),
    ``enable_cpu_mem_arena``, ``enable_mem_pattern`` and ``enable_mem_reuse`` (memory is always
    planned statically, with reuse), ``use_deterministic_compute``, ``use_per_session_threads``,
    and session config entries (stored, readable with ``get_session_config_entry``).

    Execution providers: ``add_provider('CPUExecutionProvider')`` is accepted (others are
    ignored with a warning), ``has_providers``, ``set_provider_selection_policy`` (ignored).
    ``set_load_cancellation_flag(True)`` makes building a session raise ``Fail``.

    Not supported (raise ``NotImplemented``): ``add_initializer``,
    ``add_external_initializers``, ``add_external_initializers_from_files_in_memory``,
    ``register_custom_ops_library``, ``add_free_dimension_override_by_denotation``,
    ``add_provider_for_devices``, ``set_provider_selection_policy_delegate``,
    ``set_ep_context_data_read_func``.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.optimization_profile = {}
        self._dim_overrides = {}
        self._providers = []
        self._load_cancelled = False

    # -- strata's own ---------------------------------------------------------------------------

    def set_optimization_profile(self, input_name, min_shape, opt_shape, max_shape):
        """The range of ``input_name``'s dims: ``min <= opt <= max`` per dim (checked when the
        session is built)."""
        self.optimization_profile[str(input_name)] = (
            [int(d) for d in min_shape],
            [int(d) for d in opt_shape],
            [int(d) for d in max_shape],
        )

    # -- onnxruntime's --------------------------------------------------------------------------

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        """Fixes every symbolic dim called ``dim_name`` to ``dim_value``."""
        if int(dim_value) < 0:
            raise InvalidArgument(f"dim {dim_name!r}: override {dim_value} is negative")
        self._dim_overrides[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation, dim_value):
        raise NotImplemented(
            "strata does not read dim denotations; use add_free_dimension_override_by_name"
        )

    def add_session_config_entry(self, key, value):
        self._add_entry(key, value)

    def get_session_config_entry(self, key):
        return self._get_entry(key)

    def add_initializer(self, name, value):
        raise NotImplemented("strata does not take initializers from outside the model")

    def add_external_initializers(self, names, values):
        raise NotImplemented("strata does not take initializers from outside the model")

    def register_custom_ops_library(self, library_path):
        raise NotImplemented("strata does not load custom operator libraries")

    def add_external_initializers_from_files_in_memory(self, names, buffers, lengths):
        raise NotImplemented("strata does not take initializers from outside the model")

    # -- execution providers: strata has one, the CPU -------------------------------------------

    def add_provider(self, provider_name, provider_options=None):
        """Accepts ``CPUExecutionProvider``; other providers are ignored with a warning, as
        ``InferenceSession(providers=...)`` does."""
        from ._session import _provider_names

        _provider_names([provider_name])
        self._providers.append(str(provider_name))

    def has_providers(self):
        return bool(self._providers)

    def add_provider_for_devices(self, ep_devices, provider_options=None):
        raise NotImplemented("strata runs on the CPU only; it has no execution-provider devices")

    def set_provider_selection_policy(self, policy):
        """Accepted and ignored: strata has one provider, so there is nothing to select."""

    def set_provider_selection_policy_delegate(self, delegate):
        raise NotImplemented("strata runs on the CPU only; it has no execution-provider devices")

    def set_ep_context_data_read_func(self, func):
        raise NotImplemented("strata reads no execution-provider context data")

    def clear_ep_context_data_read_func(self):
        """No-op: strata reads no execution-provider context data."""

    def set_load_cancellation_flag(self, value):
        """True makes building a session with these options raise ``Fail`` (onnxruntime cancels
        a load in progress; strata checks before it starts)."""
        self._load_cancelled = bool(value)

    def _native_args(self):
        if self._load_cancelled:
            raise Fail("Session creation cancelled: the load cancellation flag is set")
        threads = int(self.intra_op_num_threads or 0)
        if threads < 0:
            raise InvalidArgument(f"intra_op_num_threads is {threads}, must be >= 0")
        return {
            "threads": threads,
            "optimize": int(self.graph_optimization_level) != GraphOptimizationLevel.ORT_DISABLE_ALL,
            "profiling": bool(self.enable_profiling),
            "profile": {k: tuple(v) for k, v in self.optimization_profile.items()} or None,
            "dim_overrides": dict(self._dim_overrides) or None,
        }


class RunOptions(_ConfigEntries):
    """Per-call options. ``terminate`` set to True makes ``run`` raise ``Fail`` before running;
    the log fields, ``only_execute_path_to_fetches`` (strata always runs the whole plan) and run
    config entries are accepted and ignored; ``add_active_adapter`` (LoRA) raises
    ``NotImplemented``."""

    def __init__(self):
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self.terminate = False

    def add_active_adapter(self, adapter):
        raise NotImplemented("strata does not load LoRA adapters")

    def add_run_config_entry(self, key, value):
        self._add_entry(key, value)

    def get_run_config_entry(self, key):
        return self._get_entry(key)
