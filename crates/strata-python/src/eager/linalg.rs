//! Matrix products (`matmul`, `@`) and 2-D convolution (`conv2d`, a method and
//! `strata.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)` as in
//! `torch.nn.functional`). Both always release the GIL while they run.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::prelude::*;

use crate::eager::gil::run;
use crate::tensor::PyTensor;

/// `[a, b]` from an int (both) or a pair of ints (PyTorch's `stride=2` / `stride=(2, 1)`).
pub(crate) fn pair(name: &str, value: &Bound<'_, PyAny>) -> PyResult<[usize; 2]> {
    if let Ok(v) = value.extract::<usize>() {
        return Ok([v, v]);
    }
    value
        .extract::<(usize, usize)>()
        .map(|(a, b)| [a, b])
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a non-negative int or a pair of them, not {}",
                value.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })
}

/// `value` as a pair, or `[default; 2]` when absent.
pub(crate) fn opt_pair(
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
    default: usize,
) -> PyResult<[usize; 2]> {
    match value {
        Some(v) if !v.is_none() => pair(name, v),
        _ => Ok([default; 2]),
    }
}

fn matmul(py: Python<'_>, a: &Tensor, b: &Tensor) -> PyResult<PyTensor> {
    run(py, true, || a.matmul(b)).map(PyTensor::from)
}

#[allow(clippy::too_many_arguments)]
fn conv(
    py: Python<'_>,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: Option<&Bound<'_, PyAny>>,
    groups: usize,
) -> PyResult<PyTensor> {
    if groups == 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "conv2d: groups must be at least 1",
        ));
    }
    let args = Conv2d {
        stride: opt_pair("stride", stride, 1)?,
        padding: opt_pair("padding", padding, 0)?,
        dilation: opt_pair("dilation", dilation, 1)?,
        groups,
    };
    run(py, true, || input.conv2d(weight, bias, args)).map(PyTensor::from)
}

#[pymethods]
impl PyTensor {
    /// The matrix product, numpy-style: batch dims broadcast, 1-D operands promoted.
    fn matmul(&self, py: Python<'_>, other: PyRef<'_, PyTensor>) -> PyResult<PyTensor> {
        matmul(py, &self.inner, &other.inner)
    }

    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match other.cast::<PyTensor>() {
            Ok(b) => Ok(Py::new(py, matmul(py, &self.inner, &b.get().inner)?)?.into_any()),
            Err(_) => Ok(py.NotImplemented()),
        }
    }

    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match other.cast::<PyTensor>() {
            Ok(a) => Ok(Py::new(py, matmul(py, &a.get().inner, &self.inner)?)?.into_any()),
            Err(_) => Ok(py.NotImplemented()),
        }
    }

    /// 2-D convolution of `[N, C, H, W]` by `weight` `[M, C/groups, kH, kW]`, plus `bias` `[M]`.
    #[pyo3(signature = (weight, bias = None, stride = None, padding = None, dilation = None, groups = 1))]
    #[allow(clippy::too_many_arguments)]
    fn conv2d(
        &self,
        py: Python<'_>,
        weight: PyRef<'_, PyTensor>,
        bias: Option<PyRef<'_, PyTensor>>,
        stride: Option<&Bound<'_, PyAny>>,
        padding: Option<&Bound<'_, PyAny>>,
        dilation: Option<&Bound<'_, PyAny>>,
        groups: usize,
    ) -> PyResult<PyTensor> {
        conv(
            py,
            &self.inner,
            &weight.inner,
            bias.as_ref().map(|b| &b.inner),
            stride,
            padding,
            dilation,
            groups,
        )
    }
}

/// `strata.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`.
#[pyfunction]
#[pyo3(signature = (input, weight, bias = None, stride = None, padding = None, dilation = None, groups = 1))]
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    py: Python<'_>,
    input: PyRef<'_, PyTensor>,
    weight: PyRef<'_, PyTensor>,
    bias: Option<PyRef<'_, PyTensor>>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: Option<&Bound<'_, PyAny>>,
    groups: usize,
) -> PyResult<PyTensor> {
    conv(
        py,
        &input.inner,
        &weight.inner,
        bias.as_ref().map(|b| &b.inner),
        stride,
        padding,
        dilation,
        groups,
    )
}
