//! Element-wise comparisons with broadcasting; every result is bool.

use strata_core::Tensor;

use crate::eager::binary::Binary;
use crate::eager::unary::Unary;
use crate::OpResult;

/// Comparisons (PyTorch names), with number forms. Mixed dtypes promote first.
pub trait EagerCompare {
    fn eq(&self, other: &Tensor) -> OpResult<Tensor>;
    fn ne(&self, other: &Tensor) -> OpResult<Tensor>;
    fn lt(&self, other: &Tensor) -> OpResult<Tensor>;
    fn le(&self, other: &Tensor) -> OpResult<Tensor>;
    fn gt(&self, other: &Tensor) -> OpResult<Tensor>;
    fn ge(&self, other: &Tensor) -> OpResult<Tensor>;
    fn eq_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn lt_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn gt_scalar(&self, value: f64) -> OpResult<Tensor>;
}

impl EagerCompare for Tensor {
    fn eq(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Eq.call(self, other)
    }
    fn ne(&self, other: &Tensor) -> OpResult<Tensor> {
        // ONNX has no NotEqual: Equal, then Not.
        Unary::Not.call(&Binary::Eq.call(self, other)?)
    }
    fn lt(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Lt.call(self, other)
    }
    fn le(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Le.call(self, other)
    }
    fn gt(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Gt.call(self, other)
    }
    fn ge(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Ge.call(self, other)
    }
    fn eq_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Eq.call_scalar(self, value)
    }
    fn lt_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Lt.call_scalar(self, value)
    }
    fn gt_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Gt.call_scalar(self, value)
    }
}
