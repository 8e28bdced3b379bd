//! Comparisons with a tensor or a number (`eq`, `ne`, `lt`, `le`, `gt`, `ge` and the operators
//! `== != < <= > >=`): bool tensors, broadcast, mixed dtypes promoted first.

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use strata_ops::prelude::*;

use crate::eager::arith::binary;
use crate::eager::operand::Operand;
use crate::tensor::PyTensor;

#[pymethods]
impl PyTensor {
    fn eq(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::eq,
            &self.inner,
            &Operand::required("eq", other)?,
            false,
        )
    }
    fn ne(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::ne,
            &self.inner,
            &Operand::required("ne", other)?,
            false,
        )
    }
    fn lt(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::lt,
            &self.inner,
            &Operand::required("lt", other)?,
            false,
        )
    }
    fn le(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::le,
            &self.inner,
            &Operand::required("le", other)?,
            false,
        )
    }
    fn gt(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::gt,
            &self.inner,
            &Operand::required("gt", other)?,
            false,
        )
    }
    fn ge(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(
            py,
            EagerCompare::ge,
            &self.inner,
            &Operand::required("ge", other)?,
            false,
        )
    }

    /// Element-wise comparison; NotImplemented for operands that are neither a tensor nor a
    /// number (so `t == None` is False, as for any object).
    fn __richcmp__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let Some(operand) = Operand::extract(other) else {
            return Ok(py.NotImplemented());
        };
        let f = match op {
            CompareOp::Eq => EagerCompare::eq,
            CompareOp::Ne => EagerCompare::ne,
            CompareOp::Lt => EagerCompare::lt,
            CompareOp::Le => EagerCompare::le,
            CompareOp::Gt => EagerCompare::gt,
            CompareOp::Ge => EagerCompare::ge,
        };
        Ok(Py::new(py, binary(py, f, &self.inner, &operand, false)?)?.into_any())
    }
}
