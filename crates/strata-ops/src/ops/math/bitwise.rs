//! Bitwise operators on integers: BitwiseAnd, BitwiseOr, BitwiseXor (broadcasting), BitwiseNot,
//! and BitShift (unsigned, and signed from opset 28: shifting by the width or more, or by a
//! negative amount, gives 0 to the left and the sign to the right).

use strata_core::DType;

use crate::ops::math::binary::{zip_kernel, Binary, BinaryKind};
use crate::ops::math::unary::{map_kernel_in_place, Unary, UnaryKind};
use crate::{
    dispatch_int, dispatch_signed, dispatch_unsigned, Kernel, OpContext, OpError, OpResult,
    Operator,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitwiseOp {
    And,
    Or,
    Xor,
    ShiftLeft,
    ShiftRight,
}

impl BitwiseOp {
    pub fn build(op: BitwiseOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Binary::build(op, ctx)
    }

    fn build_shift(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let direction = ctx.attrs.string("direction")?.ok_or_else(|| {
            OpError::attribute("BitShift", "direction", "is required (LEFT or RIGHT)")
        })?;
        let op = match direction.as_str() {
            "LEFT" => BitwiseOp::ShiftLeft,
            "RIGHT" => BitwiseOp::ShiftRight,
            other => {
                return Err(OpError::attribute(
                    "BitShift",
                    "direction",
                    format!("must be LEFT or RIGHT, got {other:?}"),
                ))
            }
        };
        Binary::build(op, ctx)
    }
}

impl BinaryKind for BitwiseOp {
    fn name(&self) -> &'static str {
        match self {
            BitwiseOp::And => "BitwiseAnd",
            BitwiseOp::Or => "BitwiseOr",
            BitwiseOp::Xor => "BitwiseXor",
            BitwiseOp::ShiftLeft | BitwiseOp::ShiftRight => "BitShift",
        }
    }

    fn in_place(&self) -> bool {
        // Rare ops: one out-of-place kernel per dtype keeps the code small.
        false
    }

    fn kernel(&self, a: DType, _b: DType, legacy: Option<i64>) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        match self {
            BitwiseOp::And => {
                dispatch_int!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| x & y)), _ => None)
            }
            BitwiseOp::Or => {
                dispatch_int!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| x | y)), _ => None)
            }
            BitwiseOp::Xor => {
                dispatch_int!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| x ^ y)), _ => None)
            }
            BitwiseOp::ShiftLeft => {
                dispatch_unsigned!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| {
                if y >= T::BITS as T { 0 } else { x << y }
            })), _ => dispatch_signed!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| {
                // Opset 28: a negative amount is out of range, like one of the width or more.
                if y < 0 || y >= T::BITS as T { 0 } else { x << y }
            })), _ => None))
            }
            BitwiseOp::ShiftRight => {
                dispatch_unsigned!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| {
                if y >= T::BITS as T { 0 } else { x >> y }
            })), _ => dispatch_signed!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| {
                // Arithmetic shift; out-of-range amounts leave only the sign.
                x >> if y < 0 || y >= T::BITS as T { T::BITS as T - 1 } else { y }
            })), _ => None))
            }
        }
    }
}

/// Bitwise complement of an integer tensor.
#[derive(Debug, Clone, Copy)]
pub struct BitwiseNot;

impl UnaryKind for BitwiseNot {
    fn name(&self) -> &'static str {
        "BitwiseNot"
    }

    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>> {
        dispatch_int!(dtype, T => Some(map_kernel_in_place("BitwiseNot", |x: T| !x)), _ => None)
    }
}

/// The table of this family's bitwise operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("BitwiseAnd", |c| BitwiseOp::build(BitwiseOp::And, c)),
    ("BitwiseOr", |c| BitwiseOp::build(BitwiseOp::Or, c)),
    ("BitwiseXor", |c| BitwiseOp::build(BitwiseOp::Xor, c)),
    ("BitwiseNot", |_| Unary::boxed(BitwiseNot)),
    ("BitShift", BitwiseOp::build_shift),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use crate::{Attr, OpError};
    use strata_core::Tensor;

    #[test]
    fn bitwise_ops() {
        let a = Tensor::from_slice(&[0b1100i32, -1], &[2]).unwrap();
        let b = Tensor::from_slice(&[0b1010i32], &[1]).unwrap();
        let and = run_op("BitwiseAnd", 18, &[], &[a.clone(), b.clone()]).unwrap();
        assert_eq!(and[0].to_vec::<i32>().unwrap(), [0b1000, 0b1010]);
        let xor = run_op("BitwiseXor", 18, &[], &[a.clone(), b]).unwrap();
        assert_eq!(xor[0].to_vec::<i32>().unwrap(), [0b0110, !0b1010]);
        let not = run_op("BitwiseNot", 18, &[], &[a]).unwrap();
        assert_eq!(not[0].to_vec::<i32>().unwrap(), [!0b1100, 0]);
    }

    #[test]
    fn shifts_past_the_width_give_zero() {
        let x = Tensor::from_slice(&[16u8, 16, 255], &[3]).unwrap();
        let y = Tensor::from_slice(&[1u8, 8, 200], &[3]).unwrap();
        let left = [("direction", Attr::String("LEFT".into()))];
        let right = [("direction", Attr::String("RIGHT".into()))];
        let l = run_op("BitShift", 11, &left, &[x.clone(), y.clone()]).unwrap();
        assert_eq!(l[0].to_vec::<u8>().unwrap(), [32, 0, 0]);
        let r = run_op("BitShift", 11, &right, &[x, y]).unwrap();
        assert_eq!(r[0].to_vec::<u8>().unwrap(), [8, 0, 0]);
    }

    #[test]
    fn signed_shifts() {
        let x = Tensor::from_slice(&[-8i8, 64, -1, -128], &[4]).unwrap();
        let y = Tensor::from_slice(&[1i8, 1, 9, -1], &[4]).unwrap();
        let left = [("direction", Attr::String("LEFT".into()))];
        let right = [("direction", Attr::String("RIGHT".into()))];
        let l = run_op("BitShift", 28, &left, &[x.clone(), y.clone()]).unwrap();
        assert_eq!(l[0].to_vec::<i8>().unwrap(), [-16, -128, 0, 0]);
        let r = run_op("BitShift", 28, &right, &[x, y]).unwrap();
        assert_eq!(r[0].to_vec::<i8>().unwrap(), [-4, 32, -1, -1]);
    }

    #[test]
    fn shift_needs_a_direction_and_ints() {
        let x = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let err = run_op("BitShift", 11, &[], &[x.clone(), x]).unwrap_err();
        assert!(err.to_string().contains("direction"), "{err}");
        let f = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        let left = [("direction", Attr::String("LEFT".into()))];
        let err = run_op("BitShift", 11, &left, &[f.clone(), f]).unwrap_err();
        assert!(matches!(err, OpError::NoKernel { .. }), "{err}");
    }
}
