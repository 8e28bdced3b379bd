//! `softmax(dim)` and `log_softmax(dim)`.

use pyo3::prelude::*;
use strata_ops::prelude::*;

use crate::eager::gil::{large, run};
use crate::tensor::PyTensor;

#[pymethods]
impl PyTensor {
    /// Softmax along `dim` (negative counts from the end).
    fn softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.softmax(dim)).map(PyTensor::from)
    }

    fn log_softmax(&self, py: Python<'_>, dim: isize) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.log_softmax(dim)).map(PyTensor::from)
    }
}
