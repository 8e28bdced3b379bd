//! The common case of QuantizeLinear and DequantizeLinear on its own fast loop: f32 values, one
//! f32 scale, one 8-bit zero point (or none), contiguous tensors. Same results as the general
//! path: `q = saturate(round_half_even(x / scale) + zero)` (NaN to the low end) and
//! `x = (q - zero) * scale`, in f32.

use strata_core::{DType, Tensor};

use crate::kernels::igemm::epilogue::{round_to_i32, Narrow};
use crate::OpResult;

// Scalars are read through guards: `to_vec` would allocate on every run.
fn scalar_f32(t: &Tensor) -> Option<f32> {
    if t.dtype() != DType::F32 || t.numel() != 1 {
        return None;
    }
    let read = t.read::<f32>().ok()?;
    read.as_slice()?.first().copied()
}

fn scalar_zero(t: &Tensor, dtype: DType) -> Option<i32> {
    if !t.is_defined() {
        return Some(0);
    }
    if t.numel() != 1 || t.dtype() != dtype {
        return None;
    }
    match dtype {
        DType::U8 => {
            let read = t.read::<u8>().ok()?;
            read.as_slice()?.first().map(|&v| i32::from(v))
        }
        DType::I8 => {
            let read = t.read::<i8>().ok()?;
            read.as_slice()?.first().map(|&v| i32::from(v))
        }
        _ => None,
    }
}

/// Quantizes `x` into `out` when the fast case applies; `Ok(false)` when it does not.
pub(crate) fn quantize(x: &Tensor, scale: &Tensor, zero: &Tensor, out: &Tensor) -> OpResult<bool> {
    let (Some(s), Some(z)) = (scalar_f32(scale), scalar_zero(zero, out.dtype())) else {
        return Ok(false);
    };
    if x.dtype() != DType::F32 || !x.is_contiguous() || !out.is_contiguous() {
        return Ok(false);
    }
    let read = x.read::<f32>()?;
    let Some(src) = read.as_slice() else {
        return Ok(false);
    };
    match out.dtype() {
        DType::U8 => {
            let mut w = out.write::<u8>()?;
            let Some(dst) = w.as_mut_slice() else {
                return Ok(false);
            };
            quantize_slice(src, s, z, dst);
        }
        DType::I8 => {
            let mut w = out.write::<i8>()?;
            let Some(dst) = w.as_mut_slice() else {
                return Ok(false);
            };
            quantize_slice(src, s, z, dst);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

crate::kernels::simd::multiversion! {
    /// `dst[i] = saturate(round_half_even(src[i] / scale) + zero)`, NaN to the type's minimum.
    /// Branch-free, so the loop vectorizes.
    pub(crate) fn quantize_slice<T: Narrow>(src: &[f32], scale: f32, zero: i32, dst: &mut [T]) {
        for (d, &v) in dst.iter_mut().zip(src) {
            let q = round_to_i32(v / scale).wrapping_add(zero);
            *d = T::narrow(q.max(T::LO).min(T::HI));
        }
    }
}
/// Dequantizes `x` into f32 `out` when the fast case applies; `Ok(false)` when it does not.
pub(crate) fn dequantize(
    x: &Tensor,
    scale: &Tensor,
    zero: &Tensor,
    out: &Tensor,
) -> OpResult<bool> {
    let (Some(s), Some(z)) = (scalar_f32(scale), scalar_zero(zero, x.dtype())) else {
        return Ok(false);
    };
    if out.dtype() != DType::F32 || !x.is_contiguous() || !out.is_contiguous() {
        return Ok(false);
    }
    let mut w = out.write::<f32>()?;
    let Some(dst) = w.as_mut_slice() else {
        return Ok(false);
    };
    macro_rules! fill {
        ($t:ty) => {{
            let read = x.read::<$t>()?;
            let Some(src) = read.as_slice() else {
                return Ok(false);
            };
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = (i32::from(v) - z) as f32 * s;
            }
        }};
    }
    match x.dtype() {
        DType::U8 => fill!(u8),
        DType::I8 => fill!(i8),
        _ => return Ok(false),
    }
    Ok(true)
}
