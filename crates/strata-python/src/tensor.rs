//! `strata.Tensor`: a Python handle on a strata tensor (copying the handle is cheap; views share
//! memory). Construction from numpy arrays and Python data, conversion back to numpy, the
//! properties (`shape`, `dtype`, `version`) and views. The eager ops on it are in `eager/`.

use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyTuple};
use strata_core::{DType, Tensor};

use crate::convert::{
    array_dtype, array_to_tensor, as_array, dtype_from_py, numpy_dtype_object, output_to_numpy,
};
use crate::errors;

/// A strata tensor. Made with `strata.tensor(data)`, `strata.from_numpy(array)` or an eager op;
/// `t.numpy()` copies it back out. Eager ops are methods with PyTorch's names (`t.softmax(-1)`,
/// `t.sum(dim=1, keepdim=True)`, `a @ b`, `a.add_(b)`).
#[pyclass(name = "Tensor", module = "strata", frozen)]
pub struct PyTensor {
    pub(crate) inner: Tensor,
}

impl From<Tensor> for PyTensor {
    fn from(inner: Tensor) -> Self {
        PyTensor { inner }
    }
}

/// A tensor holding a copy of `data` (an array, a nested sequence, a number or a Tensor).
/// Without `dtype`, arrays keep theirs; other Python data takes numpy's, except that floats
/// become float32 (as in PyTorch, not float64 as in numpy).
pub(crate) fn tensor_from_data(
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let wanted = dtype.map(dtype_from_py).transpose()?;
    if let Ok(t) = data.cast::<PyTensor>() {
        let t = &t.get().inner;
        let converted = match wanted {
            Some(d) => strata_ops::prelude::EagerConvert::to_dtype(t, d),
            None => strata_ops::prelude::EagerConvert::to_dtype(t, t.dtype()),
        };
        return converted.map_err(|e| errors::eager(&e));
    }
    let label = "tensor";
    let array = match (data.cast::<PyUntypedArray>(), wanted) {
        (Ok(array), None) => array.clone(),
        (Ok(array), Some(d)) => {
            if array_dtype(array, label)? == d {
                array.clone()
            } else {
                array
                    .call_method1("astype", (numpy_dtype_object(data.py(), d)?,))?
                    .cast_into()?
            }
        }
        (Err(_), Some(d)) => as_array(data, d, label)?,
        (Err(_), None) => {
            let array = data
                .py()
                .import("numpy")?
                .call_method1("asarray", (data,))?
                .cast_into::<PyUntypedArray>()?;
            if array_dtype(&array, label)? == DType::F64 {
                array.call_method1("astype", ("float32",))?.cast_into()?
            } else {
                array
            }
        }
    };
    let dtype = array_dtype(&array, label)?;
    array_to_tensor(&array, dtype, label)
}

/// Dims given as `f(2, 3)` or `f((2, 3))`; one -1 takes what the others leave of `numel`.
fn dims_arg(args: &Bound<'_, PyTuple>, numel: Option<usize>) -> PyResult<Vec<usize>> {
    let values: Vec<i64> = match args.len() {
        1 if args.get_item(0)?.extract::<i64>().is_err() => args.get_item(0)?.extract()?,
        _ => args.extract()?,
    };
    let inferred = values.iter().filter(|&&d| d == -1).count();
    if values.iter().any(|&d| d < -1) || inferred > 1 {
        return Err(PyValueError::new_err(format!(
            "invalid shape {values:?}: dims are non-negative, with at most one -1"
        )));
    }
    let known: usize = values
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    values
        .iter()
        .map(|&d| match (d, numel) {
            (-1, Some(n)) if known > 0 && n % known == 0 => Ok(n / known),
            (-1, _) => Err(PyValueError::new_err(format!(
                "shape {values:?} does not fit {} elements",
                numel.unwrap_or(0)
            ))),
            (d, _) => Ok(d as usize),
        })
        .collect()
}

impl PyTensor {
    fn view_result(result: strata_core::Result<Tensor>) -> PyResult<PyTensor> {
        result.map(PyTensor::from).map_err(|e| errors::core(&e))
    }
}

#[pymethods]
impl PyTensor {
    #[new]
    #[pyo3(signature = (data, dtype = None))]
    fn py_new(data: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        tensor_from_data(data, dtype).map(PyTensor::from)
    }

    /// A numpy array holding a copy of the elements.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        output_to_numpy(py, &self.inner)
    }

    /// numpy's conversion hook (`np.asarray(t)`): a copy, optionally of another dtype.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(PyValueError::new_err(
                "a strata tensor cannot be seen by numpy without a copy",
            ));
        }
        let array = self.numpy(py)?;
        match dtype {
            Some(d) => array.call_method1("astype", (d,)),
            None => Ok(array),
        }
    }

    /// The dims, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.dims())
    }

    /// The dims (PyTorch's `size()`), or one of them.
    #[pyo3(signature = (dim = None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<isize>) -> PyResult<Bound<'py, PyAny>> {
        match dim {
            None => Ok(self.shape(py)?.into_any()),
            Some(d) => {
                let rank = self.inner.rank() as isize;
                let axis = if d < 0 { d + rank } else { d };
                if !(0..rank).contains(&axis) {
                    return Err(errors::core(&strata_core::CoreError::AxisOutOfRange {
                        op: "size",
                        axis: d,
                        rank: rank as usize,
                    }));
                }
                Ok(self.inner.dims()[axis as usize]
                    .into_pyobject(py)?
                    .into_any())
            }
        }
    }

    /// The element type, as a numpy dtype (ml_dtypes' for bfloat16 and the 8-, 4- and 2-bit
    /// types).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_dtype_object(py, self.inner.dtype())
    }

    /// The version counter of the memory: every in-place write bumps it (none in inference
    /// mode), and views share it.
    #[getter]
    fn version(&self) -> u64 {
        self.inner.version()
    }

    /// Where the memory is: `"cpu"`.
    #[getter]
    fn device(&self) -> String {
        self.inner.device().to_string()
    }

    /// This tensor (eager tensors made from Python live on the CPU).
    fn cpu(slf: &Bound<'_, Self>) -> PyResult<Py<PyTensor>> {
        match slf.get().inner.device() {
            strata_core::Device::Cpu => Ok(slf.clone().unbind()),
            other => Err(errors::raise(
                errors::Kind::NotImplemented,
                format!("cpu: copying a tensor from {other} is not supported"),
            )),
        }
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.inner.rank()
    }

    fn dim(&self) -> usize {
        self.inner.rank()
    }

    fn numel(&self) -> usize {
        self.inner.numel()
    }

    fn is_contiguous(&self) -> bool {
        self.inner.is_contiguous()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.inner
            .dims()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    /// Identity, as PyTorch's: `==` is element-wise, so it cannot define the hash.
    fn __hash__(slf: &Bound<'_, Self>) -> isize {
        slf.as_ptr() as isize
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let array = self.numpy(py)?;
        let body: String = py
            .import("numpy")?
            .call_method(
                "array2string",
                (array,),
                Some(&[("separator", ", "), ("prefix", "tensor(")].into_py_dict(py)?),
            )?
            .extract()?;
        Ok(format!("tensor({body}, dtype={})", self.dtype(py)?.str()?))
    }

    /// The one element as a Python number.
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.inner.numel() != 1 {
            return Err(PyValueError::new_err(format!(
                "item() needs a tensor of one element, not dims {:?}",
                self.inner.dims()
            )));
        }
        self.numpy(py)?.call_method0("item")
    }

    /// The elements as nested Python lists.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.numpy(py)?.call_method0("tolist")
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        self.item(py)?.is_truthy()
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.item(py)?.extract()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        self.item(py)?.call_method0("__int__")?.extract()
    }

    /// A view with new dims (`t.reshape(2, -1)`); a copy when the layout needs one.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = dims_arg(shape, Some(self.inner.numel()))?;
        Self::view_result(self.inner.reshape(&dims))
    }

    /// A view with new dims; the tensor must be contiguous.
    #[pyo3(signature = (*shape))]
    fn view(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = dims_arg(shape, Some(self.inner.numel()))?;
        Self::view_result(self.inner.view(&dims))
    }

    /// A view broadcasting size-1 dims to `shape`.
    #[pyo3(signature = (*shape))]
    fn expand(&self, shape: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = dims_arg(shape, None)?;
        Self::view_result(self.inner.expand(&dims))
    }

    #[pyo3(signature = (*dims))]
    fn permute(&self, dims: &Bound<'_, PyTuple>) -> PyResult<PyTensor> {
        let dims = dims_arg(dims, None)?;
        Self::view_result(self.inner.permute(&dims))
    }

    fn transpose(&self, dim0: isize, dim1: isize) -> PyResult<PyTensor> {
        Self::view_result(self.inner.transpose(dim0, dim1))
    }

    fn unsqueeze(&self, dim: isize) -> PyResult<PyTensor> {
        Self::view_result(self.inner.unsqueeze(dim))
    }

    #[pyo3(signature = (dim = None))]
    fn squeeze(&self, dim: Option<isize>) -> PyResult<PyTensor> {
        Self::view_result(self.inner.squeeze(dim))
    }

    #[pyo3(signature = (start_dim = 0, end_dim = -1))]
    fn flatten(&self, start_dim: isize, end_dim: isize) -> PyResult<PyTensor> {
        Self::view_result(self.inner.flatten(start_dim, end_dim))
    }

    /// This tensor when already contiguous, else a contiguous copy.
    fn contiguous(slf: &Bound<'_, Self>) -> PyResult<Py<PyTensor>> {
        if slf.get().inner.is_contiguous() {
            return Ok(slf.clone().unbind());
        }
        Py::new(slf.py(), Self::view_result(slf.get().inner.contiguous())?)
    }

    /// A copy in memory of its own (its own version counter).
    fn clone(&self) -> PyResult<PyTensor> {
        let t = &self.inner;
        Self::view_result(
            t.contiguous()
                .and_then(|c| c.detached(t.device(), t.memory_kind())),
        )
    }
}

/// `strata.tensor(data, dtype=None)`: a tensor holding a copy of `data`.
#[pyfunction]
#[pyo3(signature = (data, dtype = None))]
pub fn tensor(data: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
    tensor_from_data(data, dtype).map(PyTensor::from)
}

/// `strata.from_numpy(array)`: a tensor holding a copy of `array`, of its dtype. (Unlike
/// PyTorch's, the memory is not shared: strata tensors live in strata's allocator.)
#[pyfunction]
pub fn from_numpy(array: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
    let array = array.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "from_numpy() takes a numpy array, not {}",
            array
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let dtype = array_dtype(array, "tensor")?;
    array_to_tensor(array, dtype, "tensor").map(PyTensor::from)
}

/// `strata.zeros(*shape, dtype=float32)`.
#[pyfunction]
#[pyo3(signature = (*shape, dtype = None))]
pub fn zeros(shape: &Bound<'_, PyTuple>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
    let dims = dims_arg(shape, None)?;
    let dtype = dtype.map(dtype_from_py).transpose()?.unwrap_or(DType::F32);
    Tensor::zeros(&dims, dtype)
        .map(PyTensor::from)
        .map_err(|e| errors::core(&e))
}

/// Lists of tensors for `cat`/`stack` (any sequence of `strata.Tensor`).
pub(crate) fn tensor_list(tensors: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    tensors
        .try_iter()?
        .map(|item| {
            let item = item?;
            item.cast::<PyTensor>()
                .map(|t| t.get().inner.clone())
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "expected a sequence of strata.Tensor, got an element of type {}",
                        item.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })
        })
        .collect()
}
