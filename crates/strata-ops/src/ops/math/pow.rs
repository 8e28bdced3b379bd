//! Pow with broadcasting and mixed types (opset 12+): the base is f16/bf16/f32/f64/i32/i64, the
//! exponent any numeric dtype, the output the base's dtype. Float bases compute in f32/f64;
//! integer bases with integer exponents use exact wrapping integer powers.

use num_traits::AsPrimitive;
use strata_core::{DType, Element};

use crate::ops::math::binary::{zip_kernel, Binary, BinaryKind};
use crate::support::numeric::{Real, WideFloat};
use crate::{dispatch_types, Kernel, OpContext, OpResult, Operator};

/// An exponent element: integer exponents keep integer bases exact.
pub trait Exponent: Element + AsPrimitive<f64> {
    const IS_INT: bool;
    fn to_i64(self) -> i64;
}

macro_rules! exponent {
    ($int:literal: $($t:ty),*) => {$(
        impl Exponent for $t {
            const IS_INT: bool = $int;
            #[inline(always)]
            fn to_i64(self) -> i64 {
                // Saturating; only used when IS_INT.
                AsPrimitive::<f64>::as_(self) as i64
            }
        }
    )*};
}

exponent!(true: i8, i16, i32, i64, u8, u16, u32, u64);
exponent!(false: f32, f64, strata_core::f16, strata_core::bf16);

/// A base element: `x ** e` in its own type.
pub trait Base: Element {
    fn power<E: Exponent>(self, e: E) -> Self;
}

macro_rules! float_base {
    ($($t:ty),*) => {$(
        impl Base for $t {
            #[inline(always)]
            fn power<E: Exponent>(self, e: E) -> Self {
                let w = self.widen();
                Self::narrow(w.powf(<$t as Real>::Wide::lit(e.as_())))
            }
        }
    )*};
}

float_base!(f32, f64, strata_core::f16, strata_core::bf16);

macro_rules! int_base {
    ($($t:ty),*) => {$(
        impl Base for $t {
            #[inline(always)]
            fn power<E: Exponent>(self, e: E) -> Self {
                if E::IS_INT {
                    int_pow(self as i64, e.to_i64()) as $t
                } else {
                    // Through f64 and truncated back, as numpy's float result cast to int.
                    (self as f64).powf(e.as_()) as $t
                }
            }
        }
    )*};
}

int_base!(i32, i64);

/// `base ** exp` with wrapping; a negative exponent truncates `1 / base ** -exp` toward zero.
/// Wrapping in i64 then narrowing equals wrapping in the narrower type.
fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 if exp % 2 == 0 => 1,
            -1 => -1,
            _ => 0,
        };
    }
    let (mut acc, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    acc
}

#[derive(Debug, Clone, Copy)]
pub struct Pow;

impl BinaryKind for Pow {
    fn name(&self) -> &'static str {
        "Pow"
    }

    fn out_dtype(&self, a: DType, _b: DType) -> OpResult<DType> {
        Ok(a)
    }

    fn in_place(&self) -> bool {
        false
    }

    fn kernel(&self, a: DType, b: DType, legacy: Option<i64>) -> Option<Box<dyn Kernel>> {
        // Exponents of the base's own type or of the common f32/f64/i32/i64/u32/u64 types;
        // every pair is a separate kernel, so the rest are left out.
        macro_rules! exponents {
            ($t:ty) => {
                if b == a {
                    Some(zip_kernel("Pow", legacy, |x: $t, e: $t| x.power(e)))
                } else {
                    dispatch_types!(b, [F32 => f32, F64 => f64, I32 => i32, I64 => i64, U32 => u32,
                        U64 => u64], E => Some(zip_kernel("Pow", legacy, |x: $t, e: E| x.power(e))), _ => None)
                }
            };
        }
        dispatch_types!(a, [F32 => f32, F64 => f64, F16 => strata_core::f16,
            BF16 => strata_core::bf16, I32 => i32, I64 => i64], T => exponents!(T), _ => None)
    }
}

impl Pow {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Binary::build(Pow, ctx)
    }
}

/// The table of this family's power operator.
pub const OPS: &[(&str, crate::Constructor)] = &[("Pow", Pow::build)];

#[cfg(test)]
mod tests {
    use super::int_pow;
    use crate::support::test_util::run_op;
    use strata_core::Tensor;

    #[test]
    fn mixed_types() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let e = Tensor::from_slice(&[2i64], &[1]).unwrap();
        let y = run_op("Pow", 15, &[], &[x, e]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [1.0, 4.0, 9.0]);
        let xi = Tensor::from_slice(&[2i32, 3, -2], &[3]).unwrap();
        let ef = Tensor::from_slice(&[0.5f32, 2.0, 3.0], &[3]).unwrap();
        let y = run_op("Pow", 15, &[], &[xi.clone(), ef]).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [1, 9, -8]);
        let ei = Tensor::from_slice(&[31i32, 2, -1], &[3]).unwrap();
        let y = run_op("Pow", 15, &[], &[xi, ei]).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [i32::MIN, 9, 0]);
    }

    #[test]
    fn integer_powers_wrap() {
        assert_eq!(int_pow(3, 4), 81);
        assert_eq!(int_pow(-1, -3), -1);
        assert_eq!(int_pow(2, 64), 0);
        assert_eq!(int_pow(7, 0), 1);
    }
}
