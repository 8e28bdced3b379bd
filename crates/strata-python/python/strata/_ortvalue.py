"""``OrtValue``, ``OrtDevice`` and ``IOBinding`` as onnxruntime has them, for the CPU.

strata runs on the CPU only, so an ``OrtValue`` is a numpy array: ``ortvalue_from_numpy`` keeps
the array it is given (no copy, as onnxruntime does for the CPU) and ``numpy()`` returns it. An
``IOBinding`` records the feeds and the outputs wanted (optionally into preallocated
``OrtValue``s or CPU buffers) and ``InferenceSession.run_with_iobinding`` runs them.
"""

import ctypes

import numpy as np

from ._errors import InvalidArgument, NotImplemented

# onnx.TensorProto's element types and onnxruntime's names for them.
_ELEMENT_TYPES = {
    1: ("float", "float32"),
    2: ("uint8", "uint8"),
    3: ("int8", "int8"),
    4: ("uint16", "uint16"),
    5: ("int16", "int16"),
    6: ("int32", "int32"),
    7: ("int64", "int64"),
    8: ("string", "object"),
    9: ("bool", "bool"),
    10: ("float16", "float16"),
    11: ("double", "float64"),
    12: ("uint32", "uint32"),
    13: ("uint64", "uint64"),
    16: ("bfloat16", "bfloat16"),
    17: ("float8e4m3fn", "float8_e4m3fn"),
    18: ("float8e4m3fnuz", "float8_e4m3fnuz"),
    19: ("float8e5m2", "float8_e5m2"),
    20: ("float8e5m2fnuz", "float8_e5m2fnuz"),
    21: ("uint4", "uint4"),
    22: ("int4", "int4"),
    23: ("float4e2m1", "float4_e2m1fn"),
    24: ("float8e8m0", "float8_e8m0fnu"),
    25: ("uint2", "uint2"),
    26: ("int2", "int2"),
}
_BY_NUMPY_NAME = {numpy_name: code for code, (_, numpy_name) in _ELEMENT_TYPES.items()}


def _numpy_dtype(code):
    """The numpy dtype of an onnx element type (ml_dtypes' for bfloat16, float8, int4 …)."""
    try:
        _, name = _ELEMENT_TYPES[int(code)]
    except (KeyError, TypeError, ValueError):
        raise InvalidArgument(f"onnx element type {code!r} is not one strata runs") from None
    if hasattr(np, name) or name == "object":
        return np.dtype(name)
    try:
        import ml_dtypes
    except ImportError:
        raise NotImplemented(f"{name} needs the ml_dtypes package: pip install ml_dtypes") from None
    return np.dtype(getattr(ml_dtypes, name))


def _element_code(dtype):
    dtype = np.dtype(dtype)
    name = "object" if dtype.kind in "OUS" else dtype.name
    try:
        return _BY_NUMPY_NAME[name]
    except KeyError:
        raise InvalidArgument(f"numpy dtype {dtype} has no onnx element type") from None


def _cpu_only(device_type):
    if str(device_type).lower() != "cpu":
        raise NotImplemented(f"strata runs on the CPU only; device {device_type!r} is not available")


class OrtDevice:
    """A device: always the CPU for strata."""

    def __init__(self, device_type="cpu", device_id=0):
        _cpu_only(device_type)
        self._id = int(device_id)

    @staticmethod
    def make(device_type="cpu", device_id=0, vendor_id=-1):
        return OrtDevice(device_type, device_id)

    @staticmethod
    def cpu():
        return 0

    def device_type(self):
        return OrtDevice.cpu()

    def device_id(self):
        return self._id

    def device_vendor_id(self):
        return 0

    def __repr__(self):
        return f"OrtDevice('cpu', {self._id})"


class OrtValue:
    """A tensor on the CPU, backed by a numpy array."""

    __slots__ = ("_array",)

    def __init__(self, array):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"an OrtValue holds a numpy array, not {type(array).__name__}")
        self._array = array

    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj, /, device_type="cpu", device_id=0, vendor_id=-1):
        """An OrtValue over ``numpy_obj`` itself (no copy; a non-contiguous array is copied)."""
        _cpu_only(device_type)
        if not isinstance(numpy_obj, np.ndarray):
            raise TypeError(f"expected a numpy array, got {type(numpy_obj).__name__}")
        _element_code(numpy_obj.dtype)
        return cls(numpy_obj if numpy_obj.flags.c_contiguous else np.ascontiguousarray(numpy_obj))

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data, /, onnx_element_type):
        """An OrtValue of ``onnx_element_type`` over ``data``'s bytes (e.g. float8 values held
        in a uint8 array)."""
        dtype = _numpy_dtype(onnx_element_type)
        data = np.ascontiguousarray(data)
        if data.dtype.itemsize != dtype.itemsize:
            raise InvalidArgument(
                f"a {data.dtype} array cannot hold {_ELEMENT_TYPES[int(onnx_element_type)][0]} "
                f"elements ({data.dtype.itemsize} bytes each, not {dtype.itemsize})"
            )
        return cls(data.view(dtype))

    @classmethod
    def ortvalue_from_shape_and_type(
        cls, shape, element_type, device_type="cpu", device_id=0, vendor_id=-1, memory_info=None
    ):
        """A new OrtValue of ``shape``; ``element_type`` is a numpy type (``np.float32``) or an
        onnx element type (``onnx.TensorProto.FLOAT``)."""
        _cpu_only(device_type)
        dtype = _numpy_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
        _element_code(dtype)
        return cls(np.zeros([int(d) for d in shape], dtype=dtype))

    def numpy(self):
        """The array itself (not a copy, as onnxruntime returns for the CPU)."""
        return self._array

    def __array__(self, dtype=None, copy=None):
        if dtype is None or np.dtype(dtype) == self._array.dtype:
            return self._array.copy() if copy else self._array
        return self._array.astype(dtype)

    def shape(self):
        return list(self._array.shape)

    def data_type(self):
        return f"tensor({_ELEMENT_TYPES[_element_code(self._array.dtype)][0]})"

    def element_type(self):
        """The onnx element type (``onnx.TensorProto.FLOAT`` …)."""
        return _element_code(self._array.dtype)

    def device_name(self):
        return "cpu"

    def data_ptr(self):
        return self._array.ctypes.data

    def tensor_size_in_bytes(self):
        return self._array.nbytes

    def has_value(self):
        return True

    def is_tensor(self):
        return True

    def is_sparse_tensor(self):
        return False

    def is_tensor_sequence(self):
        return False

    def as_sparse_tensor(self):
        raise NotImplemented("strata has no sparse tensors")

    def update_inplace(self, data):
        """Copies ``data`` (same shape) into this value's buffer."""
        data = np.asarray(data)
        if data.shape != self._array.shape:
            raise InvalidArgument(
                f"update_inplace: shape {list(data.shape)} differs from the value's "
                f"{list(self._array.shape)}"
            )
        np.copyto(self._array, data, casting="same_kind")

    def __repr__(self):
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


def _array_at(buffer_ptr, element_type, shape):
    """A numpy array over CPU memory at ``buffer_ptr`` (as a caller of ``bind_input`` with a
    pointer promises: ``shape`` elements of ``element_type`` live there)."""
    dtype = _numpy_dtype(element_type) if isinstance(element_type, int) else np.dtype(element_type)
    if dtype.kind == "O":
        raise InvalidArgument("strings cannot be bound by pointer")
    shape = [int(d) for d in shape]
    count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_char * count).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


class IOBinding:
    """onnxruntime's IOBinding for the CPU: bind inputs and outputs, then
    ``session.run_with_iobinding(binding)``; outputs bound without a buffer come back from
    ``get_outputs()`` / ``copy_outputs_to_cpu()``, preallocated ones are filled in place."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = []  # (name, OrtValue to fill, or None)
        self._results = []

    # inputs
    def bind_cpu_input(self, name, arr_on_cpu):
        self._inputs[str(name)] = np.asarray(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        _cpu_only(device_type)
        self._inputs[str(name)] = _array_at(buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name, ortvalue):
        self._inputs[str(name)] = ortvalue.numpy()

    def clear_binding_inputs(self):
        self._inputs.clear()

    # outputs
    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None):
        _cpu_only(device_type)
        target = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(
                    f"output {name!r}: a buffer_ptr needs its element_type and shape"
                )
            target = OrtValue(_array_at(buffer_ptr, element_type, shape))
        self._bind_output(name, target)

    def bind_ortvalue_output(self, name, ortvalue):
        self._bind_output(name, ortvalue)

    def _bind_output(self, name, target):
        name = str(name)
        self._outputs = [(n, t) for n, t in self._outputs if n != name] + [(name, target)]

    def clear_binding_outputs(self):
        self._outputs.clear()
        self._results = []

    def get_outputs(self):
        """The bound outputs of the last run, as OrtValues."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self):
        return self.get_outputs()

    def copy_outputs_to_cpu(self):
        """The bound outputs of the last run, as numpy arrays (copies)."""
        return [v.numpy().copy() for v in self._results]

    def synchronize_inputs(self):
        """No-op: strata's inputs are on the CPU already."""

    def synchronize_outputs(self):
        """No-op: strata's outputs are on the CPU already."""

    def _run(self, run_options):
        names = [n for n, _ in self._outputs] or [o.name for o in self._session.get_outputs()]
        arrays = self._session.run(names, self._inputs, run_options)
        targets = dict(self._outputs)
        results = []
        for name, array in zip(names, arrays):
            target = targets.get(name)
            if target is None:
                results.append(OrtValue(array))
                continue
            dest = target.numpy()
            if dest.shape != array.shape or dest.dtype != array.dtype:
                raise InvalidArgument(
                    f"output {name!r}: the bound buffer is {dest.dtype}{list(dest.shape)} but the "
                    f"output is {array.dtype}{list(array.shape)}"
                )
            np.copyto(dest, array)
            results.append(target)
        self._results = results


SessionIOBinding = IOBinding
