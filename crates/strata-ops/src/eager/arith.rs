//! Element-wise arithmetic with broadcasting, number forms and in-place forms.

use strata_core::Tensor;

use crate::eager::binary::Binary;
use crate::OpResult;

/// Element-wise arithmetic (PyTorch names). Mixed dtypes promote (integers with floats give
/// the float); `div` is true division (integers give f32).
pub trait EagerArith {
    fn add(&self, other: &Tensor) -> OpResult<Tensor>;
    fn sub(&self, other: &Tensor) -> OpResult<Tensor>;
    fn mul(&self, other: &Tensor) -> OpResult<Tensor>;
    fn div(&self, other: &Tensor) -> OpResult<Tensor>;
    fn pow(&self, exponent: &Tensor) -> OpResult<Tensor>;
    fn add_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn sub_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn mul_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn div_scalar(&self, value: f64) -> OpResult<Tensor>;
    fn pow_scalar(&self, exponent: f64) -> OpResult<Tensor>;
    /// `self += other` in place (other broadcast to self's dims); bumps the version once.
    fn add_(&self, other: &Tensor) -> OpResult<&Tensor>;
    fn sub_(&self, other: &Tensor) -> OpResult<&Tensor>;
    fn mul_(&self, other: &Tensor) -> OpResult<&Tensor>;
    fn div_(&self, other: &Tensor) -> OpResult<&Tensor>;
}

impl EagerArith for Tensor {
    #[inline]
    fn add(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Add.call(self, other)
    }
    fn sub(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Sub.call(self, other)
    }
    fn mul(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Mul.call(self, other)
    }
    fn div(&self, other: &Tensor) -> OpResult<Tensor> {
        Binary::Div.call(self, other)
    }
    fn pow(&self, exponent: &Tensor) -> OpResult<Tensor> {
        Binary::Pow.call(self, exponent)
    }
    fn add_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Add.call_scalar(self, value)
    }
    fn sub_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Sub.call_scalar(self, value)
    }
    fn mul_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Mul.call_scalar(self, value)
    }
    fn div_scalar(&self, value: f64) -> OpResult<Tensor> {
        Binary::Div.call_scalar(self, value)
    }
    fn pow_scalar(&self, exponent: f64) -> OpResult<Tensor> {
        Binary::Pow.call_scalar(self, exponent)
    }
    fn add_(&self, other: &Tensor) -> OpResult<&Tensor> {
        Binary::Add.call_in_place(self, other).map(|()| self)
    }
    fn sub_(&self, other: &Tensor) -> OpResult<&Tensor> {
        Binary::Sub.call_in_place(self, other).map(|()| self)
    }
    fn mul_(&self, other: &Tensor) -> OpResult<&Tensor> {
        Binary::Mul.call_in_place(self, other).map(|()| self)
    }
    fn div_(&self, other: &Tensor) -> OpResult<&Tensor> {
        Binary::Div.call_in_place(self, other).map(|()| self)
    }
}
