//! 2-D pooling over `[N, C, H, W]`: `max_pool2d`, `avg_pool2d` (PyTorch's arguments; `stride`
//! defaults to the kernel size) and the global forms.

use pyo3::prelude::*;
use strata_ops::prelude::*;

use crate::eager::gil::{large, run};
use crate::eager::linalg::{opt_pair, pair};
use crate::tensor::PyTensor;

fn window(
    kernel_size: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    ceil_mode: bool,
    count_include_pad: bool,
) -> PyResult<Pool2d> {
    let kernel = pair("kernel_size", kernel_size)?;
    Ok(Pool2d {
        kernel,
        stride: match stride {
            Some(s) if !s.is_none() => Some(pair("stride", s)?),
            _ => None,
        },
        padding: opt_pair("padding", padding, 0)?,
        ceil_mode,
        count_include_pad,
    })
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (kernel_size, stride = None, padding = None, ceil_mode = false))]
    fn max_pool2d(
        &self,
        py: Python<'_>,
        kernel_size: &Bound<'_, PyAny>,
        stride: Option<&Bound<'_, PyAny>>,
        padding: Option<&Bound<'_, PyAny>>,
        ceil_mode: bool,
    ) -> PyResult<PyTensor> {
        let w = window(kernel_size, stride, padding, ceil_mode, true)?;
        let t = &self.inner;
        run(py, large(t), || t.max_pool2d(w)).map(PyTensor::from)
    }

    /// Average pooling; padded zeros count in the divisor unless `count_include_pad=False`.
    #[pyo3(signature = (kernel_size, stride = None, padding = None, ceil_mode = false, count_include_pad = true))]
    fn avg_pool2d(
        &self,
        py: Python<'_>,
        kernel_size: &Bound<'_, PyAny>,
        stride: Option<&Bound<'_, PyAny>>,
        padding: Option<&Bound<'_, PyAny>>,
        ceil_mode: bool,
        count_include_pad: bool,
    ) -> PyResult<PyTensor> {
        let w = window(kernel_size, stride, padding, ceil_mode, count_include_pad)?;
        let t = &self.inner;
        run(py, large(t), || t.avg_pool2d(w)).map(PyTensor::from)
    }

    /// Max over each whole plane: `[N, C, 1, 1]`.
    fn global_max_pool2d(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.global_max_pool2d()).map(PyTensor::from)
    }

    /// Mean over each whole plane: `[N, C, 1, 1]`.
    fn global_avg_pool2d(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.global_avg_pool2d()).map(PyTensor::from)
    }
}
