//! Arithmetic per element type: wrapping for integers (ONNX leaves overflow to the type, Rust
//! must not panic), IEEE for floats, integer division by zero yields 0 instead of a panic.

use strata_core::{bf16, f16, Element};

pub trait Arith: Element {
    fn add(self, rhs: Self) -> Self;
    fn sub(self, rhs: Self) -> Self;
    fn mul(self, rhs: Self) -> Self;
    fn div(self, rhs: Self) -> Self;
}

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, r: Self) -> Self { self + r }
            #[inline(always)] fn sub(self, r: Self) -> Self { self - r }
            #[inline(always)] fn mul(self, r: Self) -> Self { self * r }
            #[inline(always)] fn div(self, r: Self) -> Self { self / r }
        }
    )*};
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(self, r: Self) -> Self { self.wrapping_add(r) }
            #[inline(always)] fn sub(self, r: Self) -> Self { self.wrapping_sub(r) }
            #[inline(always)] fn mul(self, r: Self) -> Self { self.wrapping_mul(r) }
            #[inline(always)] fn div(self, r: Self) -> Self { if r == 0 { 0 } else { self.wrapping_div(r) } }
        }
    )*};
}

float_arith!(f32, f64, f16, bf16);
int_arith!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Calls `$body` with `$t` bound to the Rust type of `$dtype` for every arithmetic dtype;
/// evaluates `$fallback` for the others.
#[macro_export]
macro_rules! dispatch_arith {
    ($dtype:expr, $t:ident => $body:expr, _ => $fallback:expr) => {{
        use strata_core::DType;
        match $dtype {
            DType::F32 => { type $t = f32; $body }
            DType::F64 => { type $t = f64; $body }
            DType::F16 => { type $t = strata_core::f16; $body }
            DType::BF16 => { type $t = strata_core::bf16; $body }
            DType::I8 => { type $t = i8; $body }
            DType::I16 => { type $t = i16; $body }
            DType::I32 => { type $t = i32; $body }
            DType::I64 => { type $t = i64; $body }
            DType::U8 => { type $t = u8; $body }
            DType::U16 => { type $t = u16; $body }
            DType::U32 => { type $t = u32; $body }
            DType::U64 => { type $t = u64; $body }
            _ => $fallback,
        }
    }};
}
