//! `strata.cat(tensors, dim=0)` and `strata.stack(tensors, dim=0)` (mixed dtypes promote).

use pyo3::prelude::*;
use strata_core::Tensor;

use crate::eager::gil::run;
use crate::tensor::{tensor_list, PyTensor};

fn join(
    py: Python<'_>,
    op: fn(&[&Tensor], isize) -> strata_ops::OpResult<Tensor>,
    tensors: &Bound<'_, PyAny>,
    dim: isize,
) -> PyResult<PyTensor> {
    let tensors = tensor_list(tensors)?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let release =
        tensors.iter().map(Tensor::numel).sum::<usize>() >= crate::eager::gil::RELEASE_FROM;
    run(py, release, || op(&refs, dim)).map(PyTensor::from)
}

/// Joins `tensors` along an existing `dim` (every other dim must match).
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
pub fn cat(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    join(py, strata_ops::prelude::cat, tensors, dim)
}

/// Joins equally shaped `tensors` along a new `dim`.
#[pyfunction]
#[pyo3(signature = (tensors, dim = 0))]
pub fn stack(py: Python<'_>, tensors: &Bound<'_, PyAny>, dim: isize) -> PyResult<PyTensor> {
    join(py, strata_ops::prelude::stack, tensors, dim)
}
