//! numpy arrays in, numpy arrays out, for session feeds and outputs and for eager tensors. A feed
//! must already have the input's dtype (as in onnxruntime); Python lists and scalars are first
//! made arrays of that dtype. Strided arrays are copied in logical order. Strings travel as object
//! arrays of `str`.

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{
    Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods, ToPyArray,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString};
use strata_core::{DType, Device, Element as TensorElement, MemoryKind, ReadGuard, Tensor};
use strata_runtime::{IoInfo, OutputView};

use crate::errors::{raise, Kind};

/// onnxruntime's element name (as in `tensor(float)`) and numpy's dtype name, where numpy (or
/// ml_dtypes, for bfloat16 and the 8-, 4- and 2-bit types) has one.
fn names(dtype: DType) -> (&'static str, Option<&'static str>) {
    match dtype {
        DType::F32 => ("float", Some("float32")),
        DType::F16 => ("float16", Some("float16")),
        DType::BF16 => ("bfloat16", Some("bfloat16")),
        DType::F64 => ("double", Some("float64")),
        DType::I8 => ("int8", Some("int8")),
        DType::I16 => ("int16", Some("int16")),
        DType::I32 => ("int32", Some("int32")),
        DType::I64 => ("int64", Some("int64")),
        DType::U8 => ("uint8", Some("uint8")),
        DType::U16 => ("uint16", Some("uint16")),
        DType::U32 => ("uint32", Some("uint32")),
        DType::U64 => ("uint64", Some("uint64")),
        DType::Bool => ("bool", Some("bool")),
        DType::String => ("string", Some("object")),
        DType::F8E4M3FN => ("float8e4m3fn", Some("float8_e4m3fn")),
        DType::F8E4M3FNUZ => ("float8e4m3fnuz", Some("float8_e4m3fnuz")),
        DType::F8E5M2 => ("float8e5m2", Some("float8_e5m2")),
        DType::F8E5M2FNUZ => ("float8e5m2fnuz", Some("float8_e5m2fnuz")),
        DType::F8E8M0 => ("float8e8m0", Some("float8_e8m0fnu")),
        DType::F4E2M1 => ("float4e2m1", Some("float4_e2m1fn")),
        DType::I4 => ("int4", Some("int4")),
        DType::U4 => ("uint4", Some("uint4")),
        DType::I2 => ("int2", Some("int2")),
        DType::U2 => ("uint2", Some("uint2")),
        DType::Q8_0 => ("q8_0", None),
        DType::Q4_0 => ("q4_0", None),
        DType::Q4_1 => ("q4_1", None),
        DType::Q5_0 => ("q5_0", None),
        DType::Q5_1 => ("q5_1", None),
        DType::Q4_K => ("q4_k", None),
        DType::Q5_K => ("q5_k", None),
        DType::Q6_K => ("q6_k", None),
    }
}

/// onnxruntime's name for a tensor type: `tensor(float)`, `tensor(int64)`, `tensor(string)` …
pub fn onnx_type_name(dtype: DType) -> String {
    format!("tensor({})", names(dtype).0)
}

/// The tensor for `value` fed to `input`.
pub fn feed_to_tensor(value: &Bound<'_, PyAny>, input: &IoInfo) -> PyResult<Tensor> {
    let label = format!("input {:?}", input.name);
    let array = as_array(value, input.dtype, &label)?;
    array_to_tensor(&array, input.dtype, &label)
}

/// A copy of `array` as a tensor of `dtype`; the array must already have that dtype. Errors
/// start with `label` (`input "x"`, `tensor`).
pub fn array_to_tensor(
    array: &Bound<'_, PyUntypedArray>,
    dtype: DType,
    label: &str,
) -> PyResult<Tensor> {
    match dtype {
        DType::String => strings_to_tensor(array, label),
        dtype if is_byte_coded(dtype) => byte_coded_to_tensor(array, dtype, label),
        DType::Bool => {
            let typed = typed_array::<bool>(array, dtype, label)?;
            let data = typed.readonly();
            let view = data.as_array();
            let values: Vec<bool> = match view.as_slice() {
                Some(s) => s.to_vec(),
                None => view.iter().copied().collect(),
            };
            Ok(
                Tensor::from_bools(&values, view.shape())
                    .map_err(|e| bad_array(label, array, e))?,
            )
        }
        dtype => strata_ops::dispatch_arith!(dtype, T => {
            let typed = typed_array::<T>(array, dtype, label)?;
            let data = typed.readonly();
            let view = data.as_array();
            let tensor = match view.as_slice() {
                Some(s) => Tensor::from_slice(s, view.shape()),
                None => Tensor::from_slice(&view.iter().copied().collect::<Vec<T>>(), view.shape()),
            };
            tensor.map_err(|e| bad_array(label, array, e))
        }, _ => Err(raise(Kind::NotImplemented, format!(
            "{label}: strata's Python binding cannot convert {dtype} ({})",
            onnx_type_name(dtype)
        )))),
    }
}

/// `value` as a numpy array; lists, tuples and scalars become arrays of `dtype`.
pub fn as_array<'py>(
    value: &Bound<'py, PyAny>,
    dtype: DType,
    label: &str,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return Ok(array.clone());
    }
    let py = value.py();
    let name = names(dtype).1.unwrap_or("object");
    let converted = numpy(py)?
        .call_method1("asarray", (value, numpy_dtype(py, dtype)?))
        .map_err(|e| {
            raise(
                Kind::InvalidArgument,
                format!(
                    "{label}: cannot make a {name} array ({}) of the {} given: {e}",
                    onnx_type_name(dtype),
                    value
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
    Ok(converted.cast_into::<PyUntypedArray>()?)
}

/// The strata dtype of a numpy array (str, bytes and object arrays hold text).
pub fn array_dtype(array: &Bound<'_, PyUntypedArray>, label: &str) -> PyResult<DType> {
    if matches!(array.dtype().kind(), b'O' | b'U' | b'S') {
        return Ok(DType::String);
    }
    let name = describe_dtype(array);
    dtype_named(&name).ok_or_else(|| {
        raise(
            Kind::InvalidArgument,
            format!("{label}: strata has no dtype for numpy's {name}"),
        )
    })
}

/// The strata dtype numpy (or ml_dtypes) calls `name`.
fn dtype_named(name: &str) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&d| d != DType::String && names(d).1 == Some(name))
}

/// The strata dtype for a `dtype=` argument: anything `numpy.dtype()` takes (`np.float32`,
/// `"float32"`, `"f4"`, `ml_dtypes.bfloat16`), or strata's own name (`"f32"`, `"bf16"`).
pub fn dtype_from_py(spec: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = spec.py();
    let unknown = || {
        raise(
            Kind::InvalidArgument,
            format!(
                "{} is not a dtype strata has (numpy's names, e.g. 'float32', or strata's, e.g. 'f32')",
                spec.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )
    };
    if let Ok(text) = spec.cast::<PyString>() {
        let text = text.to_cow()?;
        // ml_dtypes' names (`"float8_e4m3fn"`) too: numpy does not know them as strings.
        if let Some(dtype) = text.parse::<DType>().ok().or_else(|| dtype_named(&text)) {
            return Ok(dtype);
        }
    }
    let described = numpy(py)?
        .call_method1("dtype", (spec,))
        .map_err(|_| unknown())?;
    if matches!(
        described.getattr("kind")?.extract::<String>()?.as_str(),
        "O" | "U" | "S"
    ) {
        return Ok(DType::String);
    }
    let name: String = described.getattr("name")?.extract()?;
    dtype_named(&name).ok_or_else(unknown)
}

/// numpy's dtype object for `dtype` (ml_dtypes' for the types numpy lacks).
pub fn numpy_dtype_object(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    numpy(py)?.call_method1("dtype", (numpy_dtype(py, dtype)?,))
}

/// The numpy dtype of `dtype`: numpy's name, or ml_dtypes' type for the types numpy lacks.
fn numpy_dtype(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    let name = names(dtype).1.unwrap_or("object");
    if dtype == DType::BF16 || is_byte_coded(dtype) {
        return ml_dtypes(py, dtype)?.getattr(name);
    }
    Ok(PyString::new(py, name).into_any())
}

/// The `ml_dtypes` module (numpy's types for bfloat16, float8, float4, int4 and int2; what
/// onnx's own `numpy_helper` uses), or `NotImplemented` saying to install it.
fn ml_dtypes(py: Python<'_>, dtype: DType) -> PyResult<&Bound<'_, PyModule>> {
    static ML_DTYPES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(ML_DTYPES
        .get_or_try_init(py, || {
            PyModule::import(py, "ml_dtypes")
                .map(Bound::unbind)
                .map_err(|_| {
                    raise(
                        Kind::NotImplemented,
                        format!(
                        "{} needs the ml_dtypes package for its numpy type: pip install ml_dtypes",
                        onnx_type_name(dtype)
                    ),
                    )
                })
        })?
        .bind(py))
}

/// Types strata holds one byte per element as ml_dtypes does: float8 and float4 bit patterns,
/// and the 4- and 2-bit integers (unpacked).
fn is_byte_coded(dtype: DType) -> bool {
    dtype.is_low_precision_float() || dtype.is_sub_byte_int()
}

/// Bits of the signed sub-byte types; strata holds them sign-extended, ml_dtypes masked to
/// their low bits.
fn signed_bits(dtype: DType) -> Option<u32> {
    match dtype {
        DType::I4 => Some(4),
        DType::I2 => Some(2),
        _ => None,
    }
}

/// A float8/float4/int4/int2 array of the matching ml_dtypes type, its bytes copied (in
/// logical order) into a tensor of `dtype`.
fn byte_coded_to_tensor(
    array: &Bound<'_, PyUntypedArray>,
    dtype: DType,
    label: &str,
) -> PyResult<Tensor> {
    let py = array.py();
    let expected = names(dtype).1.unwrap_or_default();
    if describe_dtype(array) != expected {
        return Err(raise(
            Kind::InvalidArgument,
            format!(
                "{label}: got a {} array of shape {:?}, expected dtype {expected} ({}, from ml_dtypes)",
                describe_dtype(array),
                array.shape(),
                onnx_type_name(dtype)
            ),
        ));
    }
    let bytes = numpy(py)?
        .call_method1("ascontiguousarray", (array,))?
        .call_method1("view", ("uint8",))?
        .cast_into::<PyArrayDyn<u8>>()?;
    let bytes = bytes.readonly();
    let codes = bytes
        .as_slice()
        .map_err(|e| raise(Kind::Fail, e.to_string()))?;
    let dims = array.shape().to_vec();
    let tensor = Tensor::empty(&dims, dtype, Device::Cpu, MemoryKind::Default)
        .map_err(|e| bad_array(label, array, e))?;
    match signed_bits(dtype) {
        Some(bits) => {
            let mut out = tensor
                .write::<i8>()
                .map_err(|e| bad_array(label, array, e))?;
            let out = out
                .as_mut_slice()
                .ok_or_else(|| raise(Kind::Fail, "fresh tensor"))?;
            for (slot, &code) in out.iter_mut().zip(codes) {
                // Sign-extend the low `bits`: move their top bit to bit 7, shift back.
                *slot = ((code << (8 - bits)) as i8) >> (8 - bits);
            }
        }
        None => {
            let mut out = tensor
                .write::<u8>()
                .map_err(|e| bad_array(label, array, e))?;
            let out = out
                .as_mut_slice()
                .ok_or_else(|| raise(Kind::Fail, "fresh tensor"))?;
            out.copy_from_slice(codes);
        }
    }
    Ok(tensor)
}

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(NUMPY
        .get_or_try_init(py, || PyModule::import(py, "numpy").map(Bound::unbind))?
        .bind(py))
}

/// `array` as an array of `T`, or an `InvalidArgument` naming `label`, both dtypes and the
/// shape.
fn typed_array<'py, T: Element>(
    array: &Bound<'py, PyUntypedArray>,
    dtype: DType,
    label: &str,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    array.cast::<PyArrayDyn<T>>().cloned().map_err(|_| {
        let expected = numpy::dtype::<T>(array.py());
        raise(
            Kind::InvalidArgument,
            format!(
                "{label}: got a {} array of shape {:?}, expected dtype {} ({})",
                describe_dtype(array),
                array.shape(),
                expected,
                onnx_type_name(dtype)
            ),
        )
    })
}

fn describe_dtype(array: &Bound<'_, PyUntypedArray>) -> String {
    array.dtype().to_string()
}

fn bad_array(label: &str, array: &Bound<'_, PyUntypedArray>, err: strata_core::CoreError) -> PyErr {
    raise(
        Kind::InvalidArgument,
        format!(
            "{label} ({} array of shape {:?}): {err}",
            describe_dtype(array),
            array.shape()
        ),
    )
}

/// Text from an array of `str` (object or unicode) or `bytes` (decoded as UTF-8).
fn strings_to_tensor(array: &Bound<'_, PyUntypedArray>, label: &str) -> PyResult<Tensor> {
    let kind = array.dtype().kind();
    if !matches!(kind, b'O' | b'U' | b'S') {
        return Err(raise(
            Kind::InvalidArgument,
            format!(
                "{label}: got a {} array of shape {:?}, expected strings (tensor(string)): an object array of str, or a str/bytes array",
                describe_dtype(array),
                array.shape()
            ),
        ));
    }
    let flat = array.call_method0("ravel")?.call_method0("tolist")?;
    let list = flat.cast::<PyList>()?;
    let mut elements: Vec<Box<str>> = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let text: Box<str> = if let Ok(s) = item.cast::<PyString>() {
            s.to_cow()?.into()
        } else if let Ok(b) = item.cast::<PyBytes>() {
            std::str::from_utf8(b.as_bytes())
                .map_err(|e| {
                    raise(
                        Kind::InvalidArgument,
                        format!("{label}: element {index} is not UTF-8: {e}"),
                    )
                })?
                .into()
        } else {
            return Err(raise(
                Kind::InvalidArgument,
                format!(
                    "{label}: element {index} is a {}, expected str",
                    item.get_type().name()?
                ),
            ));
        };
        elements.push(text);
    }
    Tensor::from_strings(array.shape(), elements).map_err(|e| bad_array(label, array, e))
}

/// What a numpy array can be copied out of: a run's output or an eager tensor.
pub trait NumpySource {
    /// How errors name it: `output "y"`, `tensor`.
    fn label(&self) -> String;
    fn dims(&self) -> &[usize];
    fn dtype(&self) -> DType;
    fn read<T: TensorElement>(&self) -> Result<ReadGuard<'_, T>, String>;
    fn strings(&self) -> Result<Vec<&str>, String>;
}

impl NumpySource for OutputView<'_> {
    fn label(&self) -> String {
        format!("output {:?}", self.name())
    }
    fn dims(&self) -> &[usize] {
        OutputView::dims(self)
    }
    fn dtype(&self) -> DType {
        OutputView::dtype(self)
    }
    fn read<T: TensorElement>(&self) -> Result<ReadGuard<'_, T>, String> {
        OutputView::read(self).map_err(|e| e.to_string())
    }
    fn strings(&self) -> Result<Vec<&str>, String> {
        OutputView::strings(self).map_err(|e| e.to_string())
    }
}

impl NumpySource for Tensor {
    fn label(&self) -> String {
        "tensor".into()
    }
    fn dims(&self) -> &[usize] {
        Tensor::dims(self)
    }
    fn dtype(&self) -> DType {
        Tensor::dtype(self)
    }
    fn read<T: TensorElement>(&self) -> Result<ReadGuard<'_, T>, String> {
        Tensor::read(self).map_err(|e| e.to_string())
    }
    fn strings(&self) -> Result<Vec<&str>, String> {
        Tensor::strings(self).map_err(|e| e.to_string())
    }
}

/// A numpy array holding a copy of `output`.
pub fn output_to_numpy<'py>(
    py: Python<'py>,
    output: &impl NumpySource,
) -> PyResult<Bound<'py, PyAny>> {
    let dims = output.dims();
    let failed = |e: String| raise(Kind::Fail, format!("{}: {e}", output.label()));
    match output.dtype() {
        DType::String => {
            let strings = output.strings().map_err(failed)?;
            let list = PyList::new(py, strings)?;
            numpy(py)?
                .call_method1("array", (list, "object"))?
                .call_method1("reshape", (dims.to_vec(),))
        }
        dtype if is_byte_coded(dtype) => {
            let codes: Vec<u8> = match signed_bits(dtype) {
                Some(bits) => {
                    let guard = output.read::<i8>().map_err(failed)?;
                    let values = guard.elements().map_err(|e| failed(e.to_string()))?;
                    let mask = (1u8 << bits) - 1;
                    values.iter().map(|&v| v as u8 & mask).collect()
                }
                None => {
                    let guard = output.read::<u8>().map_err(failed)?;
                    guard
                        .elements()
                        .map_err(|e| failed(e.to_string()))?
                        .into_owned()
                }
            };
            shaped(py, &codes, dims)?.call_method1("view", (numpy_dtype(py, dtype)?,))
        }
        DType::Bool => {
            let guard = output.read::<u8>().map_err(failed)?;
            let values: Vec<bool> = guard
                .elements()
                .map_err(|e| failed(e.to_string()))?
                .iter()
                .map(|&b| b != 0)
                .collect();
            Ok(shaped(py, &values, dims)?.into_any())
        }
        dtype => strata_ops::dispatch_arith!(dtype, T => {
            let guard = output.read::<T>().map_err(failed)?;
            let values = guard.elements().map_err(|e| failed(e.to_string()))?;
            Ok(shaped(py, &values, dims)?.into_any())
        }, _ => Err(raise(Kind::NotImplemented, format!(
            "{}: strata's Python binding cannot return {} ({})",
            output.label(), dtype, onnx_type_name(dtype)
        )))),
    }
}

fn shaped<'py, T: Element + Clone>(
    py: Python<'py>,
    data: &[T],
    dims: &[usize],
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let view = ArrayViewD::from_shape(IxDyn(dims), data)
        .map_err(|e| raise(Kind::Fail, format!("output of shape {dims:?}: {e}")))?;
    Ok(view.to_pyarray(py))
}
