//! The second operand of an arithmetic op or comparison: a tensor or a Python number. Numbers
//! become 0-d tensors by PyTorch's rule for Python scalars: the tensor's dtype when the number's
//! kind fits it (an int with an integer or float tensor, a float with a float tensor), else
//! int64 (an int with a bool tensor) or float32 (a float with a non-float tensor).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use strata_core::{DType, Tensor};
use strata_ops::prelude::*;
use strata_ops::OpResult;

use crate::tensor::PyTensor;

/// A Python number.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

/// A tensor or a number.
pub(crate) enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(Scalar),
}

impl Scalar {
    /// `value` as a number: bool, int (fitting int64), float, or a numpy scalar of those kinds.
    pub(crate) fn extract(value: &Bound<'_, PyAny>) -> Option<Scalar> {
        if let Ok(b) = value.cast::<PyBool>() {
            return Some(Scalar::Bool(b.is_true()));
        }
        if value.is_instance_of::<PyInt>() {
            return value.extract::<i64>().ok().map(Scalar::Int);
        }
        if value.is_instance_of::<PyFloat>() {
            return value.extract::<f64>().ok().map(Scalar::Float);
        }
        // numpy scalars (np.float32(2), np.int64(3)): their Python value.
        let numpy_scalar = value
            .py()
            .import("numpy")
            .and_then(|np| np.getattr("generic"))
            .and_then(|generic| value.is_instance(&generic))
            .unwrap_or(false);
        if numpy_scalar {
            let item = value.call_method0("item").ok()?;
            if !item.is(value) {
                return Scalar::extract(&item);
            }
        }
        None
    }

    fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The dtype this number takes against a tensor of `dtype`.
    pub(crate) fn dtype_against(self, dtype: DType) -> DType {
        match self {
            Scalar::Bool(_) => dtype,
            Scalar::Int(_) if dtype == DType::Bool => DType::I64,
            Scalar::Int(_) => dtype,
            Scalar::Float(_) if dtype.is_float() => dtype,
            Scalar::Float(_) => DType::F32,
        }
    }

    /// The dtype of a number on its own: bool, int64 or float32.
    pub(crate) fn own_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::I64,
            Scalar::Float(_) => DType::F32,
        }
    }

    /// This number as a 0-d tensor of `dtype`.
    pub(crate) fn to_tensor(self, dtype: DType) -> OpResult<Tensor> {
        let made = match (self, dtype) {
            (Scalar::Bool(b), DType::Bool) => Tensor::from_bools(&[b], &[]),
            (_, DType::F32) => Tensor::scalar(self.as_f64() as f32),
            (_, DType::F64) => Tensor::scalar(self.as_f64()),
            (Scalar::Int(i), DType::I64) => Tensor::scalar(i),
            (Scalar::Int(i), DType::I32) if i32::try_from(i).is_ok() => Tensor::scalar(i as i32),
            // Other dtypes by Cast, for its rounding and wrapping rules.
            (Scalar::Int(i), _) => return Tensor::scalar(i)?.to_dtype(dtype),
            (_, _) => return Tensor::scalar(self.as_f64())?.to_dtype(dtype),
        };
        Ok(made?)
    }
}

impl<'a> Operand<'a> {
    /// `value` as an operand, or None for anything else (the operator then returns
    /// NotImplemented, and a method raises TypeError).
    pub(crate) fn extract(value: &'a Bound<'_, PyAny>) -> Option<Operand<'a>> {
        if let Ok(t) = value.cast::<PyTensor>() {
            return Some(Operand::Tensor(&t.get().inner));
        }
        Scalar::extract(value).map(Operand::Scalar)
    }

    /// `value` as an operand, or a TypeError naming `op`.
    pub(crate) fn required(op: &str, value: &'a Bound<'_, PyAny>) -> PyResult<Operand<'a>> {
        Operand::extract(value).ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "{op}: expected a strata.Tensor or a number, got {}",
                value
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
    }

    /// The operand as a tensor against `other` (a number takes its dtype from `other`).
    pub(crate) fn tensor_against(&self, other: &Tensor) -> OpResult<std::borrow::Cow<'a, Tensor>> {
        Ok(match self {
            Operand::Tensor(t) => std::borrow::Cow::Borrowed(*t),
            Operand::Scalar(s) => {
                std::borrow::Cow::Owned(s.to_tensor(s.dtype_against(other.dtype()))?)
            }
        })
    }

    pub(crate) fn numel(&self) -> usize {
        match self {
            Operand::Tensor(t) => t.numel(),
            Operand::Scalar(_) => 1,
        }
    }
}
