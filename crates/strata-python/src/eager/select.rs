//! Selection: `topk` (values and int64 indices), `index_select`, `gather`, and
//! `strata.where(condition, input, other)` (either value may be a number).

use pyo3::prelude::*;
use strata_ops::prelude::*;

use crate::eager::gil::{large, run};
use crate::eager::operand::{Operand, Scalar};
use crate::tensor::PyTensor;

#[pymethods]
impl PyTensor {
    /// The `k` largest (or smallest) elements along `dim` and their indices, best first
    /// (`sorted=False`: in input order).
    #[pyo3(signature = (k, dim = -1, largest = true, sorted = true))]
    fn topk(
        &self,
        py: Python<'_>,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> PyResult<(PyTensor, PyTensor)> {
        let t = &self.inner;
        let (values, indices) = run(py, large(t), || t.topk(k, dim, largest, sorted))?;
        Ok((values.into(), indices.into()))
    }

    /// The slices at `index` (1-D, int32/int64) along `dim`.
    fn index_select(
        &self,
        py: Python<'_>,
        dim: isize,
        index: PyRef<'_, PyTensor>,
    ) -> PyResult<PyTensor> {
        let t = &self.inner;
        let index = &index.inner;
        run(py, large(t), || t.index_select(dim, index)).map(PyTensor::from)
    }

    /// `out[i][j] = self[index[i][j]][j]` for `dim=0`, and so on (`index` has self's rank).
    fn gather(&self, py: Python<'_>, dim: isize, index: PyRef<'_, PyTensor>) -> PyResult<PyTensor> {
        let t = &self.inner;
        let index = &index.inner;
        run(py, large(t), || t.gather(dim, index)).map(PyTensor::from)
    }
}

/// `strata.where(condition, input, other)`: `input` where the bool `condition` holds, else
/// `other`, broadcast. A number takes the other value's dtype (int64/float32 when both are
/// numbers).
#[pyfunction]
#[pyo3(name = "where")]
pub fn where_(
    py: Python<'_>,
    condition: PyRef<'_, PyTensor>,
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    let x = Operand::required("where", input)?;
    let y = Operand::required("where", other)?;
    let scalar = |s: Scalar, against: &Operand<'_>| match against {
        Operand::Tensor(t) => s.to_tensor(s.dtype_against(t.dtype())),
        Operand::Scalar(o) => {
            // Both numbers: the wider kind of the two.
            let dtype = strata_ops::eager::promote_types("where", s.own_dtype(), o.own_dtype())?;
            s.to_tensor(dtype)
        }
    };
    let (x_t, y_t) = run(py, false, || {
        let x_t = match &x {
            Operand::Tensor(t) => (*t).clone(),
            Operand::Scalar(s) => scalar(*s, &y)?,
        };
        let y_t = match &y {
            Operand::Tensor(t) => (*t).clone(),
            Operand::Scalar(s) => scalar(*s, &x)?,
        };
        Ok((x_t, y_t))
    })?;
    let c = &condition.inner;
    run(py, large(c) || large(&x_t) || large(&y_t), || {
        where_cond(c, &x_t, &y_t)
    })
    .map(PyTensor::from)
}
