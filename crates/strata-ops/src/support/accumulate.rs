//! Element arithmetic for reductions, running sums and scatter reductions. Each element type
//! accumulates in a wider type where precision needs it (f16 and bf16 in f32); integers wrap
//! like the ONNX reference's fixed-width arithmetic and never panic.

use strata_core::{bf16, f16, Element};

/// An element type that can be folded: widened to an accumulator, combined, narrowed back.
pub(crate) trait Accumulate: Element + Copy {
    type Acc: Copy + PartialOrd + Send + Sync;

    fn widen(self) -> Self::Acc;
    fn narrow(acc: Self::Acc) -> Self;
    fn zero() -> Self::Acc;
    fn one() -> Self::Acc;
    /// The identity of max: -inf for floats, the type's minimum for integers.
    fn lowest() -> Self::Acc;
    /// The identity of min.
    fn highest() -> Self::Acc;
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn mul(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn abs(a: Self::Acc) -> Self::Acc;
    fn to_f64(a: Self::Acc) -> f64;
    /// Saturating for integers (NaN becomes 0), like a numpy `astype` of in-range values.
    fn from_f64(v: f64) -> Self::Acc;
}

/// Max that keeps a NaN already accumulated (and compiles to a vector max).
#[inline(always)]
pub(crate) fn max_of<A: PartialOrd>(a: A, b: A) -> A {
    if b > a {
        b
    } else {
        a
    }
}

#[inline(always)]
pub(crate) fn min_of<A: PartialOrd>(a: A, b: A) -> A {
    if b < a {
        b
    } else {
        a
    }
}

macro_rules! float_accumulate {
    ($($t:ty),*) => {$(
        impl Accumulate for $t {
            type Acc = $t;
            #[inline(always)] fn widen(self) -> $t { self }
            #[inline(always)] fn narrow(a: $t) -> $t { a }
            #[inline(always)] fn zero() -> $t { 0.0 }
            #[inline(always)] fn one() -> $t { 1.0 }
            #[inline(always)] fn lowest() -> $t { <$t>::NEG_INFINITY }
            #[inline(always)] fn highest() -> $t { <$t>::INFINITY }
            #[inline(always)] fn add(a: $t, b: $t) -> $t { a + b }
            #[inline(always)] fn mul(a: $t, b: $t) -> $t { a * b }
            #[inline(always)] fn abs(a: $t) -> $t { a.abs() }
            #[inline(always)] fn to_f64(a: $t) -> f64 { a as f64 }
            #[inline(always)] fn from_f64(v: f64) -> $t { v as $t }
        }
    )*};
}

macro_rules! half_accumulate {
    ($($t:ty),*) => {$(
        impl Accumulate for $t {
            type Acc = f32;
            #[inline(always)] fn widen(self) -> f32 { self.to_f32() }
            #[inline(always)] fn narrow(a: f32) -> $t { <$t>::from_f32(a) }
            #[inline(always)] fn zero() -> f32 { 0.0 }
            #[inline(always)] fn one() -> f32 { 1.0 }
            #[inline(always)] fn lowest() -> f32 { f32::NEG_INFINITY }
            #[inline(always)] fn highest() -> f32 { f32::INFINITY }
            #[inline(always)] fn add(a: f32, b: f32) -> f32 { a + b }
            #[inline(always)] fn mul(a: f32, b: f32) -> f32 { a * b }
            #[inline(always)] fn abs(a: f32) -> f32 { a.abs() }
            #[inline(always)] fn to_f64(a: f32) -> f64 { a as f64 }
            #[inline(always)] fn from_f64(v: f64) -> f32 { v as f32 }
        }
    )*};
}

macro_rules! int_accumulate {
    ($($t:ty => $abs:expr),*) => {$(
        impl Accumulate for $t {
            type Acc = $t;
            #[inline(always)] fn widen(self) -> $t { self }
            #[inline(always)] fn narrow(a: $t) -> $t { a }
            #[inline(always)] fn zero() -> $t { 0 }
            #[inline(always)] fn one() -> $t { 1 }
            #[inline(always)] fn lowest() -> $t { <$t>::MIN }
            #[inline(always)] fn highest() -> $t { <$t>::MAX }
            #[inline(always)] fn add(a: $t, b: $t) -> $t { a.wrapping_add(b) }
            #[inline(always)] fn mul(a: $t, b: $t) -> $t { a.wrapping_mul(b) }
            #[inline(always)] fn abs(a: $t) -> $t { $abs(a) }
            #[inline(always)] fn to_f64(a: $t) -> f64 { a as f64 }
            #[inline(always)] fn from_f64(v: f64) -> $t { v as $t }
        }
    )*};
}

float_accumulate!(f32, f64);
half_accumulate!(f16, bf16);
int_accumulate!(
    i8 => i8::wrapping_abs, i16 => i16::wrapping_abs, i32 => i32::wrapping_abs,
    i64 => i64::wrapping_abs, u8 => |a| a, u16 => |a| a, u32 => |a| a, u64 => |a| a
);

/// Calls `$body` with `$t` bound to the Rust type of `$dtype` for every plain numeric dtype
/// (bool as `u8` when `$bool` is true); evaluates `$fallback` otherwise.
macro_rules! dispatch_accumulate {
    ($dtype:expr, bool: $bool:expr, $t:ident => $body:expr, _ => $fallback:expr) => {{
        use strata_core::DType;
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::F16 => {
                type $t = strata_core::f16;
                $body
            }
            DType::BF16 => {
                type $t = strata_core::bf16;
                $body
            }
            DType::I8 => {
                type $t = i8;
                $body
            }
            DType::I16 => {
                type $t = i16;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::U16 => {
                type $t = u16;
                $body
            }
            DType::U32 => {
                type $t = u32;
                $body
            }
            DType::U64 => {
                type $t = u64;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            DType::Bool if $bool => {
                type $t = u8;
                $body
            }
            _ => $fallback,
        }
    }};
}
pub(crate) use dispatch_accumulate;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_and_halves_widen() {
        assert_eq!(i8::add(127, 1), -128);
        assert_eq!(i8::abs(-128), -128);
        assert_eq!(u8::mul(16, 16), 0);
        assert_eq!(f16::widen(f16::from_f32(1.5)), 1.5f32);
        assert_eq!(bf16::narrow(2.0), bf16::from_f32(2.0));
        assert_eq!(i32::from_f64(2.9), 2);
        assert_eq!(i32::from_f64(-2.9), -2);
        assert_eq!(u8::from_f64(f64::NAN), 0);
        assert_eq!(max_of(1.0f32, 2.0), 2.0);
        assert_eq!(min_of(3u8, 2), 2);
    }
}
