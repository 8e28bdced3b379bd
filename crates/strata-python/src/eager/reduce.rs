//! Reductions with `dim` (an int, a sequence of ints, or None for every dim) and `keepdim`:
//! `sum`, `mean`, `amax`, `amin`, `prod`; `argmax`/`argmin` (int64 indices; without a dim, into
//! the flattened tensor); and `max`/`min`, which give `(values, indices)` along a dim as
//! PyTorch's do, or the single extreme without one.

use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::prelude::*;
use strata_ops::OpResult;

use crate::eager::gil::{large, run};
use crate::tensor::PyTensor;

/// `dim` as the list the eager ops take (empty: every dim).
fn dims(dim: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<isize>> {
    match dim {
        None => Ok(Vec::new()),
        Some(d) if d.is_none() => Ok(Vec::new()),
        Some(d) => match d.extract::<isize>() {
            Ok(one) => Ok(vec![one]),
            Err(_) => d.extract::<Vec<isize>>(),
        },
    }
}

type ReduceFn = fn(&Tensor, &[isize], bool) -> OpResult<Tensor>;
type ArgFn = fn(&Tensor, Option<isize>, bool) -> OpResult<Tensor>;

fn reduce(
    py: Python<'_>,
    op: ReduceFn,
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<PyTensor> {
    let dims = dims(dim)?;
    run(py, large(t), || op(t, &dims, keepdim)).map(PyTensor::from)
}

/// `max`/`min`: the extreme over everything, or `(values, indices)` along `dim`.
fn extreme(
    py: Python<'_>,
    t: &Tensor,
    dim: Option<isize>,
    keepdim: bool,
    largest: bool,
) -> PyResult<Py<PyAny>> {
    let (values, arg): (ReduceFn, ArgFn) = if largest {
        (EagerReduce::amax, EagerReduce::argmax)
    } else {
        (EagerReduce::amin, EagerReduce::argmin)
    };
    match dim {
        None => Ok(Py::new(
            py,
            PyTensor::from(run(py, large(t), || values(t, &[], false))?),
        )?
        .into_any()),
        Some(d) => {
            let (v, i) = run(py, large(t), || {
                Ok((values(t, &[d], keepdim)?, arg(t, Some(d), keepdim)?))
            })?;
            Ok((PyTensor::from(v), PyTensor::from(i))
                .into_pyobject(py)?
                .into_any()
                .unbind())
        }
    }
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn sum(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        reduce(py, EagerReduce::sum, &self.inner, dim, keepdim)
    }
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn mean(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        reduce(py, EagerReduce::mean, &self.inner, dim, keepdim)
    }
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn amax(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        reduce(py, EagerReduce::amax, &self.inner, dim, keepdim)
    }
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn amin(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        reduce(py, EagerReduce::amin, &self.inner, dim, keepdim)
    }
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn prod(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<PyTensor> {
        reduce(py, EagerReduce::prod, &self.inner, dim, keepdim)
    }

    #[pyo3(signature = (dim = None, keepdim = false))]
    fn argmax(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.argmax(dim, keepdim)).map(PyTensor::from)
    }
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn argmin(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<PyTensor> {
        let t = &self.inner;
        run(py, large(t), || t.argmin(dim, keepdim)).map(PyTensor::from)
    }

    /// The largest element, or `(values, indices)` along `dim`.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn max(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<Py<PyAny>> {
        extreme(py, &self.inner, dim, keepdim, true)
    }
    /// The smallest element, or `(values, indices)` along `dim`.
    #[pyo3(signature = (dim = None, keepdim = false))]
    fn min(&self, py: Python<'_>, dim: Option<isize>, keepdim: bool) -> PyResult<Py<PyAny>> {
        extreme(py, &self.inner, dim, keepdim, false)
    }
}
