//! Float classification into bool: IsNaN, and IsInf with `detect_negative`/`detect_positive`.

use strata_core::DType;

use crate::ops::math::unary::{map_kernel, Unary, UnaryKind};
use crate::support::numeric::Real;
use crate::{dispatch_float, Kernel, OpContext, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatClass {
    IsNaN,
    IsInf { negative: bool, positive: bool },
}

impl FloatClass {
    fn build_is_inf(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Unary::boxed(FloatClass::IsInf {
            negative: ctx.attrs.int_or("detect_negative", 1)? != 0,
            positive: ctx.attrs.int_or("detect_positive", 1)? != 0,
        })
    }
}

impl UnaryKind for FloatClass {
    fn name(&self) -> &'static str {
        match self {
            FloatClass::IsNaN => "IsNaN",
            FloatClass::IsInf { .. } => "IsInf",
        }
    }

    fn out_dtype(&self, _input: DType) -> DType {
        DType::Bool
    }

    fn in_place(&self) -> bool {
        false
    }

    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        match *self {
            FloatClass::IsNaN => dispatch_float!(dtype, T => Some(map_kernel(name, |x: T| {
                num_traits::Float::is_nan(x.widen()) as u8
            })), _ => None),
            FloatClass::IsInf { negative, positive } => {
                dispatch_float!(dtype, T => Some(map_kernel(name, move |x: T| {
                    let w = x.widen();
                    let inf = num_traits::Float::is_infinite(w);
                    (inf && ((negative && w < 0.0) || (positive && w > 0.0))) as u8
                })), _ => None)
            }
        }
    }
}

/// The table of this family's float classification operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("IsNaN", |_| Unary::boxed(FloatClass::IsNaN)),
    ("IsInf", FloatClass::build_is_inf),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use crate::Attr;
    use strata_core::{DType, Tensor};

    #[test]
    fn classifies() {
        let x =
            Tensor::from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0], &[4]).unwrap();
        let nan = run_op("IsNaN", 13, &[], std::slice::from_ref(&x)).unwrap();
        assert_eq!(nan[0].dtype(), DType::Bool);
        assert_eq!(nan[0].to_bools().unwrap(), [true, false, false, false]);
        let inf = run_op("IsInf", 10, &[], std::slice::from_ref(&x)).unwrap();
        assert_eq!(inf[0].to_bools().unwrap(), [false, true, true, false]);
        let neg = [("detect_positive", Attr::Int(0))];
        let inf = run_op("IsInf", 10, &neg, &[x]).unwrap();
        assert_eq!(inf[0].to_bools().unwrap(), [false, false, true, false]);
    }
}
