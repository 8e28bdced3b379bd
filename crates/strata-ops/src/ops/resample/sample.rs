//! The element types the resampling kernels read and write: loaded as f64 (where the ONNX
//! reference computes) and stored rounded once; integers round half to even and saturate, as
//! the reference's `saturate_cast` does.

use num_traits::ToPrimitive;
use strata_core::{bf16, f16, DType, Element};

use crate::support::numeric::{Real, WideFloat};

pub(crate) trait Sample: Element + Copy {
    fn load(self) -> f64;
    fn store(v: f64) -> Self;
}

macro_rules! float_sample {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            #[inline(always)]
            fn load(self) -> f64 {
                self.widen().to_f64().unwrap_or(f64::NAN)
            }
            #[inline(always)]
            fn store(v: f64) -> Self {
                <$t>::narrow(<<$t as Real>::Wide as WideFloat>::lit(v))
            }
        }
    )*};
}

macro_rules! int_sample {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            #[inline(always)]
            fn load(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn store(v: f64) -> Self {
                // `as` saturates and maps NaN to 0.
                v.round_ties_even() as $t
            }
        }
    )*};
}

float_sample!(f32, f64, f16, bf16);
int_sample!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Whether `dtype` has a [`Sample`] implementation.
pub(crate) fn is_sampled(dtype: DType) -> bool {
    use DType::*;
    matches!(
        dtype,
        F32 | F64 | F16 | BF16 | I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64
    )
}

/// Calls `$body` with `$t` bound to the [`Sample`] type of `$dtype`; `$fallback` otherwise.
macro_rules! dispatch_sample {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [F32 => f32, F64 => f64, F16 => strata_core::f16,
            BF16 => strata_core::bf16, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8,
            U16 => u16, U32 => u32, U64 => u64], $t => $body, _ => $fallback)
    };
}
pub(crate) use dispatch_sample;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_half_even_and_saturate() {
        assert_eq!(u8::store(2.5), 2);
        assert_eq!(u8::store(3.5), 4);
        assert_eq!(u8::store(-3.0), 0);
        assert_eq!(i8::store(1e9), 127);
        assert_eq!(i32::store(f64::NAN), 0);
        assert_eq!(f16::store(0.5).load(), 0.5);
        assert!(is_sampled(DType::U8) && !is_sampled(DType::Bool));
    }
}
