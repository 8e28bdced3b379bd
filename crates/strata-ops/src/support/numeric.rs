//! Arithmetic per element type: wrapping for integers (ONNX leaves overflow to the type, Rust
//! must not panic), IEEE for floats, integer division by zero yields 0 instead of a panic.
//! Also the float compute trait ([`Real`]) and the dtype → Rust type dispatch macros.

use num_traits::{Float, Zero};
use strata_core::{bf16, f16, Element};

pub trait Arith: Element + PartialOrd {
    fn add(self, rhs: Self) -> Self;
    fn sub(self, rhs: Self) -> Self;
    fn mul(self, rhs: Self) -> Self;
    fn div(self, rhs: Self) -> Self;
    /// Remainder with the sign of the divisor (numpy `mod`, ONNX Mod with `fmod=0`).
    fn rem_floor(self, rhs: Self) -> Self;
    /// Remainder with the sign of the dividend (C `fmod`, ONNX Mod with `fmod=1`).
    fn fmod(self, rhs: Self) -> Self;
    /// The larger value; NaN if either is NaN (numpy `maximum`).
    fn max_nan(self, rhs: Self) -> Self;
    /// The smaller value; NaN if either is NaN (numpy `minimum`).
    fn min_nan(self, rhs: Self) -> Self;
}

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, r: Self) -> Self { self + r }
            #[inline(always)] fn sub(self, r: Self) -> Self { self - r }
            #[inline(always)] fn mul(self, r: Self) -> Self { self * r }
            #[inline(always)] fn div(self, r: Self) -> Self { self / r }
            #[inline(always)]
            fn rem_floor(self, r: Self) -> Self {
                let m = self % r;
                if m != Self::zero() && (m < Self::zero()) != (r < Self::zero()) { m + r } else { m }
            }
            #[inline(always)] fn fmod(self, r: Self) -> Self { self % r }
            #[inline(always)]
            fn max_nan(self, r: Self) -> Self {
                if self.is_nan() || r.is_nan() { Self::nan() } else if self >= r { self } else { r }
            }
            #[inline(always)]
            fn min_nan(self, r: Self) -> Self {
                if self.is_nan() || r.is_nan() { Self::nan() } else if self <= r { self } else { r }
            }
        }
    )*};
}

/// f16/bf16: each operation in f32, rounded once (what the `half` operators do, but through
/// conversions that inline and vectorize).
macro_rules! half_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, r: Self) -> Self { Self::narrow(self.widen() + r.widen()) }
            #[inline(always)] fn sub(self, r: Self) -> Self { Self::narrow(self.widen() - r.widen()) }
            #[inline(always)] fn mul(self, r: Self) -> Self { Self::narrow(self.widen() * r.widen()) }
            #[inline(always)] fn div(self, r: Self) -> Self { Self::narrow(self.widen() / r.widen()) }
            #[inline(always)]
            fn rem_floor(self, r: Self) -> Self { Self::narrow(self.widen().rem_floor(r.widen())) }
            #[inline(always)] fn fmod(self, r: Self) -> Self { Self::narrow(self.widen() % r.widen()) }
            #[inline(always)]
            fn max_nan(self, r: Self) -> Self { Self::narrow(self.widen().max_nan(r.widen())) }
            #[inline(always)]
            fn min_nan(self, r: Self) -> Self { Self::narrow(self.widen().min_nan(r.widen())) }
        }
    )*};
}

macro_rules! int_arith {
    ($signed:literal: $($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, r: Self) -> Self { self.wrapping_add(r) }
            #[inline(always)] fn sub(self, r: Self) -> Self { self.wrapping_sub(r) }
            #[inline(always)] fn mul(self, r: Self) -> Self { self.wrapping_mul(r) }
            #[inline(always)] fn div(self, r: Self) -> Self { if r == 0 { 0 } else { self.wrapping_div(r) } }
            #[inline(always)]
            fn rem_floor(self, r: Self) -> Self {
                if r == 0 {
                    return 0;
                }
                let m = self.wrapping_rem(r);
                // Unsigned remainders already have the divisor's sign.
                if $signed && m != 0 && (m ^ r) < Self::default() { m.wrapping_add(r) } else { m }
            }
            #[inline(always)] fn fmod(self, r: Self) -> Self { if r == 0 { 0 } else { self.wrapping_rem(r) } }
            #[inline(always)] fn max_nan(self, r: Self) -> Self { Ord::max(self, r) }
            #[inline(always)] fn min_nan(self, r: Self) -> Self { Ord::min(self, r) }
        }
    )*};
}

float_arith!(f32, f64);
half_arith!(f16, bf16);
int_arith!(true: i8, i16, i32, i64);
int_arith!(false: u8, u16, u32, u64);

/// The float a [`Real`] computes in: `f32` or `f64`, with the few functions `num_traits` lacks.
pub trait WideFloat: Float + Send + Sync + 'static {
    /// A constant (attribute values, literals) in this type.
    fn lit(v: f64) -> Self;
    /// The error function (named apart from std's unstable `erf`).
    fn error_function(self) -> Self;
    /// e^x; for f32 a branch-free version that vectorizes.
    fn exp_v(self) -> Self;
    /// tanh(x); for f32 a branch-free version that vectorizes.
    fn tanh_v(self) -> Self;
    /// Rounds half to even (ONNX Round).
    fn round_half_even(self) -> Self;
}

impl WideFloat for f32 {
    #[inline(always)]
    fn lit(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn error_function(self) -> Self {
        crate::support::fast_math::erf(self)
    }
    #[inline(always)]
    fn exp_v(self) -> Self {
        crate::support::fast_math::exp(self)
    }
    #[inline(always)]
    fn tanh_v(self) -> Self {
        crate::support::fast_math::tanh(self)
    }
    #[inline(always)]
    fn round_half_even(self) -> Self {
        self.round_ties_even()
    }
}

impl WideFloat for f64 {
    #[inline(always)]
    fn lit(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn error_function(self) -> Self {
        crate::support::erf::erf(self)
    }
    #[inline(always)]
    fn exp_v(self) -> Self {
        self.exp()
    }
    #[inline(always)]
    fn tanh_v(self) -> Self {
        self.tanh()
    }
    #[inline(always)]
    fn round_half_even(self) -> Self {
        self.round_ties_even()
    }
}

/// A floating-point element type. Math runs in `Wide` (f32 for the 16-bit types) and is rounded
/// once on store, so f16/bf16 results match an f32 computation cast at the end.
pub trait Real: Arith + Copy {
    type Wide: WideFloat;
    fn widen(self) -> Self::Wide;
    fn narrow(w: Self::Wide) -> Self;
}

impl Real for f32 {
    type Wide = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(w: f32) -> Self {
        w
    }
}

impl Real for f64 {
    type Wide = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(w: f64) -> Self {
        w
    }
}

impl Real for f16 {
    type Wide = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        crate::support::f16_bits::f16_to_f32(self.to_bits())
    }
    #[inline(always)]
    fn narrow(w: f32) -> Self {
        f16::from_bits(crate::support::f16_bits::f32_to_f16(w))
    }
}

impl Real for bf16 {
    type Wide = f32;
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn narrow(w: f32) -> Self {
        bf16::from_f32(w)
    }
}

/// Calls `$body` with `$t` bound to the Rust type of `$dtype` for each listed
/// `DType variant => type` pair; evaluates `$fallback` for the others. The named macros below
/// are the lists the operators use.
#[macro_export]
macro_rules! dispatch_types {
    ($dtype:expr, [$($variant:ident => $ty:ty),* $(,)?], $t:ident => $body:expr, _ => $fallback:expr) => {{
        match $dtype {
            $(strata_core::DType::$variant => {
                #[allow(dead_code)]
                type $t = $ty;
                $body
            })*
            #[allow(unreachable_patterns)]
            _ => $fallback,
        }
    }};
}

/// Every arithmetic dtype (floats and integers).
#[macro_export]
macro_rules! dispatch_arith {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [F32 => f32, F64 => f64, F16 => strata_core::f16,
            BF16 => strata_core::bf16, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8,
            U16 => u16, U32 => u32, U64 => u64], $t => $body, _ => $fallback)
    };
}

/// Every arithmetic dtype plus bool (as `u8` holding 0 or 1).
#[macro_export]
macro_rules! dispatch_plain {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [F32 => f32, F64 => f64, F16 => strata_core::f16,
            BF16 => strata_core::bf16, I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8,
            U16 => u16, U32 => u32, U64 => u64, Bool => u8], $t => $body, _ => $fallback)
    };
}

/// The floating-point dtypes.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [F32 => f32, F64 => f64, F16 => strata_core::f16,
            BF16 => strata_core::bf16], $t => $body, _ => $fallback)
    };
}

/// The integer dtypes, signed and unsigned.
#[macro_export]
macro_rules! dispatch_int {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8,
            U16 => u16, U32 => u32, U64 => u64], $t => $body, _ => $fallback)
    };
}

/// The signed integer dtypes.
#[macro_export]
macro_rules! dispatch_signed {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [I8 => i8, I16 => i16, I32 => i32, I64 => i64],
            $t => $body, _ => $fallback)
    };
}

/// The unsigned integer dtypes.
#[macro_export]
macro_rules! dispatch_unsigned {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {
        $crate::dispatch_types!($dtype, [U8 => u8, U16 => u16, U32 => u32, U64 => u64],
            $t => $body, _ => $fallback)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_edges_do_not_panic() {
        assert_eq!(i32::MIN.div(-1), i32::MIN);
        assert_eq!(7i32.div(0), 0);
        assert_eq!((-7i32).div(2), -3);
        assert_eq!(i32::MIN.rem_floor(-1), 0);
        assert_eq!(i32::MIN.fmod(-1), 0);
        assert_eq!(5u8.rem_floor(0), 0);
    }

    #[test]
    fn remainders_follow_numpy() {
        assert_eq!((-7i32).rem_floor(3), 2);
        assert_eq!(7i32.rem_floor(-3), -2);
        assert_eq!((-7i32).fmod(3), -1);
        assert_eq!((-7.5f32).rem_floor(2.0), 0.5);
        assert_eq!((-7.5f32).fmod(2.0), -1.5);
    }

    #[test]
    fn max_min_propagate_nan() {
        assert!(1.0f32.max_nan(f32::NAN).is_nan());
        assert!(f64::NAN.min_nan(1.0).is_nan());
        assert_eq!(2.0f32.max_nan(-1.0), 2.0);
        assert_eq!((-3i8).min_nan(4), -3);
    }

    #[test]
    fn round_half_to_even() {
        assert_eq!(2.5f32.round_half_even(), 2.0);
        assert_eq!((-1.5f64).round_half_even(), -2.0);
        assert_eq!(
            f16::narrow(f16::from_f32(0.5).widen().round_half_even()).to_f32(),
            0.0
        );
    }
}
