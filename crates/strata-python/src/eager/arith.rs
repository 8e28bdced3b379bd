//! Arithmetic: `add`/`sub`/`mul`/`div`/`pow` with a tensor or a number (broadcasting, PyTorch's
//! type promotion), the operators `+ - * / **` both ways round, and the in-place forms
//! (`add_`, `sub_`, `mul_`, `div_`, and `+=` …), which return the tensor itself and bump its
//! version once (not in inference mode).

use pyo3::prelude::*;
use strata_core::Tensor;
use strata_ops::prelude::*;
use strata_ops::OpResult;

use crate::eager::gil::{large, run};
use crate::eager::operand::Operand;
use crate::tensor::PyTensor;

type BinaryFn = fn(&Tensor, &Tensor) -> OpResult<Tensor>;
type InPlaceFn = for<'t> fn(&'t Tensor, &Tensor) -> OpResult<&'t Tensor>;

/// `op(a, other)`, or `op(other, a)` when `reflected`.
pub(crate) fn binary(
    py: Python<'_>,
    op: BinaryFn,
    a: &Tensor,
    other: &Operand<'_>,
    reflected: bool,
) -> PyResult<PyTensor> {
    let release = large(a) || other.numel() >= crate::eager::gil::RELEASE_FROM;
    let b = run(py, false, || other.tensor_against(a))?;
    let b: &Tensor = &b;
    let out = run(py, release, || if reflected { op(b, a) } else { op(a, b) })?;
    Ok(out.into())
}

/// A method's `op(a, other)`: a TypeError when `other` is neither a tensor nor a number.
fn method(
    py: Python<'_>,
    name: &str,
    op: BinaryFn,
    a: &Tensor,
    other: &Bound<'_, PyAny>,
) -> PyResult<PyTensor> {
    binary(py, op, a, &Operand::required(name, other)?, false)
}

/// An operator's `op(a, other)`: NotImplemented for other types, so Python tries theirs.
fn operator(
    py: Python<'_>,
    op: BinaryFn,
    a: &Tensor,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    match Operand::extract(other) {
        Some(operand) => Ok(Py::new(py, binary(py, op, a, &operand, reflected)?)?.into_any()),
        None => Ok(py.NotImplemented()),
    }
}

/// `op_(a, other)` in place; `a` itself back.
fn in_place<'py>(
    name: &str,
    op: InPlaceFn,
    slf: &Bound<'py, PyTensor>,
    other: &Bound<'_, PyAny>,
) -> PyResult<Bound<'py, PyTensor>> {
    let py = slf.py();
    let a = &slf.get().inner;
    let operand = Operand::required(name, other)?;
    let b = run(py, false, || operand.tensor_against(a))?;
    let b: &Tensor = &b;
    run(py, large(a), || op(a, b).map(|_| ()))?;
    Ok(slf.clone())
}

#[pymethods]
impl PyTensor {
    /// `self + other` (a tensor or a number), broadcast.
    fn add(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        method(py, "add", EagerArith::add, &self.inner, other)
    }
    fn sub(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        method(py, "sub", EagerArith::sub, &self.inner, other)
    }
    fn mul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        method(py, "mul", EagerArith::mul, &self.inner, other)
    }
    /// True division: integers give float32.
    fn div(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        method(py, "div", EagerArith::div, &self.inner, other)
    }
    fn pow(&self, py: Python<'_>, exponent: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        method(py, "pow", EagerArith::pow, &self.inner, exponent)
    }

    fn __add__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::add, &self.inner, other, false)
    }
    fn __radd__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::add, &self.inner, other, true)
    }
    fn __sub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::sub, &self.inner, other, false)
    }
    fn __rsub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::sub, &self.inner, other, true)
    }
    fn __mul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::mul, &self.inner, other, false)
    }
    fn __rmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::mul, &self.inner, other, true)
    }
    fn __truediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::div, &self.inner, other, false)
    }
    fn __rtruediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        operator(py, EagerArith::div, &self.inner, other, true)
    }
    fn __pow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Ok(py.NotImplemented());
        }
        operator(py, EagerArith::pow, &self.inner, other, false)
    }
    fn __rpow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Ok(py.NotImplemented());
        }
        operator(py, EagerArith::pow, &self.inner, other, true)
    }

    /// `self += other` in place (other broadcast to self's dims, result in self's dtype);
    /// returns self.
    fn add_<'py>(slf: &Bound<'py, Self>, other: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        in_place("add_", EagerArith::add_, slf, other)
    }
    fn sub_<'py>(slf: &Bound<'py, Self>, other: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        in_place("sub_", EagerArith::sub_, slf, other)
    }
    fn mul_<'py>(slf: &Bound<'py, Self>, other: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        in_place("mul_", EagerArith::mul_, slf, other)
    }
    fn div_<'py>(slf: &Bound<'py, Self>, other: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        in_place("div_", EagerArith::div_, slf, other)
    }

    fn __iadd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        in_place("+=", EagerArith::add_, slf, other).map(drop)
    }
    fn __isub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        in_place("-=", EagerArith::sub_, slf, other).map(drop)
    }
    fn __imul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        in_place("*=", EagerArith::mul_, slf, other).map(drop)
    }
    fn __itruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        in_place("/=", EagerArith::div_, slf, other).map(drop)
    }
}
