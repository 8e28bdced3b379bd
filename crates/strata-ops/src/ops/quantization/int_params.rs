//! What the integer-GEMM operators share around the kernel (`kernels::igemm`): 8-bit operands
//! and outputs borrowed as kernel slices, zero points and scales read into planned scratch
//! (words of 4 bytes, so no heap allocation per run), and B packed at plan time when constant.

use std::sync::Arc;

use strata_core::{bf16, f16, DType, Tensor};

use crate::kernels::igemm::{Dest, IntSlice, PackedB};
use crate::support::scratch::carve;
use crate::{Fact, OpError, OpResult};

/// Scratch words for per-line parameters of an `m x n` product: A's zero points and scales
/// (m each), B's zero points, scales and the combined multipliers (n each), plus slack for
/// scalars.
pub(crate) fn param_words(m: usize, n: usize) -> Option<usize> {
    m.checked_mul(2)?
        .checked_add(n.checked_mul(3)?)?
        .checked_add(16)
}

/// Scratch words for packing a `k x n` B at run time (bytes and column sums).
pub(crate) fn packed_b_words(k: usize, n: usize) -> Option<usize> {
    PackedB::packed_len(k, n)?.div_ceil(4).checked_add(n)
}

/// Bytes of `words` words.
pub(crate) fn words_to_bytes(op: &str, words: Option<usize>) -> OpResult<usize> {
    words
        .and_then(|w| w.checked_mul(4))
        .ok_or_else(|| OpError::shape(op, "working memory size overflows"))
}

/// `len` f32 values carved from scratch words.
pub(crate) fn carve_f32<'w>(
    op: &str,
    work: &mut &'w mut [i32],
    len: usize,
) -> OpResult<&'w mut [f32]> {
    Ok(bytemuck::cast_slice_mut(carve(op, work, len)?))
}

fn check_line_len(op: &str, what: &str, t: &Tensor, lines: usize) -> OpResult<usize> {
    let len = t.numel();
    let ok = t.rank() == 0 || (t.rank() == 1 && (len == 1 || len == lines));
    if !ok {
        return Err(OpError::shape(
            op,
            format!(
                "{what} must be a scalar or a 1-D tensor of {lines}, got dims {:?}",
                t.dims()
            ),
        ));
    }
    Ok(len)
}

/// A zero point (scalar or one per line) as i32 values in the operand's own domain; an absent
/// one is 0.
pub(crate) fn zero_points_into<'w>(
    op: &str,
    what: &str,
    t: &Tensor,
    lines: usize,
    work: &mut &'w mut [i32],
) -> OpResult<&'w [i32]> {
    if !t.is_defined() {
        let dst = carve(op, work, 1)?;
        dst[0] = 0;
        return Ok(dst);
    }
    let len = check_line_len(op, what, t, lines)?;
    let dst = carve(op, work, len)?;
    match t.dtype() {
        DType::U8 => {
            let read = t.read::<u8>()?;
            for (d, &v) in dst.iter_mut().zip(read.elements()?.iter()) {
                *d = i32::from(v);
            }
        }
        DType::I8 => {
            let read = t.read::<i8>()?;
            for (d, &v) in dst.iter_mut().zip(read.elements()?.iter()) {
                *d = i32::from(v);
            }
        }
        dtype => {
            return Err(OpError::kernel(
                op,
                format!("{what} must be uint8 or int8, got {dtype}"),
            ))
        }
    }
    Ok(dst)
}

/// A scale (scalar or one per line) as f32 values.
pub(crate) fn scales_into<'w>(
    op: &str,
    what: &str,
    t: &Tensor,
    lines: usize,
    work: &mut &'w mut [i32],
) -> OpResult<&'w [f32]> {
    if !t.is_defined() {
        return Err(OpError::shape(op, format!("{what} is missing")));
    }
    let len = check_line_len(op, what, t, lines)?;
    let dst = carve_f32(op, work, len)?;
    match t.dtype() {
        DType::F32 => {
            let read = t.read::<f32>()?;
            dst.copy_from_slice(&read.elements()?);
        }
        DType::F16 => {
            let read = t.read::<f16>()?;
            for (d, v) in dst.iter_mut().zip(read.elements()?.iter()) {
                *d = v.to_f32();
            }
        }
        DType::BF16 => {
            let read = t.read::<bf16>()?;
            for (d, v) in dst.iter_mut().zip(read.elements()?.iter()) {
                *d = v.to_f32();
            }
        }
        dtype => {
            return Err(OpError::kernel(
                op,
                format!("{what} must be a float tensor, got {dtype}"),
            ))
        }
    }
    Ok(dst)
}

/// The requantization multipliers `a_scale * w_scale[j] / y_scale` per column, each step
/// rounded to f32 as onnxruntime computes them.
pub(crate) fn column_multipliers<'w>(
    op: &str,
    a_scale: f32,
    w_scale: &[f32],
    y_scale: Option<f32>,
    work: &mut &'w mut [i32],
) -> OpResult<&'w [f32]> {
    let dst = carve_f32(op, work, w_scale.len())?;
    for (d, &w) in dst.iter_mut().zip(w_scale) {
        let product = a_scale * w;
        *d = y_scale.map_or(product, |y| product / y);
    }
    Ok(dst)
}

/// Runs `f` on a contiguous u8/i8 tensor's values.
pub(crate) fn with_int_slice<R>(
    op: &str,
    t: &Tensor,
    f: impl FnOnce(IntSlice<'_>) -> OpResult<R>,
) -> OpResult<R> {
    let not_contiguous = || OpError::kernel(op, "an 8-bit operand is not contiguous");
    match t.dtype() {
        DType::U8 => {
            let read = t.read::<u8>()?;
            f(IntSlice::U8(read.as_slice().ok_or_else(not_contiguous)?))
        }
        DType::I8 => {
            let read = t.read::<i8>()?;
            f(IntSlice::I8(read.as_slice().ok_or_else(not_contiguous)?))
        }
        dtype => Err(OpError::kernel(
            op,
            format!("operand must be uint8 or int8, got {dtype}"),
        )),
    }
}

/// Runs `f` on a contiguous output of int32, uint8, int8 or float32.
pub(crate) fn with_dest<R>(
    op: &str,
    t: &Tensor,
    f: impl FnOnce(Dest<'_>) -> OpResult<R>,
) -> OpResult<R> {
    let not_contiguous = || OpError::kernel(op, "output is not contiguous");
    match t.dtype() {
        DType::I32 => {
            let mut w = t.write::<i32>()?;
            f(Dest::I32(w.as_mut_slice().ok_or_else(not_contiguous)?))
        }
        DType::U8 => {
            let mut w = t.write::<u8>()?;
            f(Dest::U8(w.as_mut_slice().ok_or_else(not_contiguous)?))
        }
        DType::I8 => {
            let mut w = t.write::<i8>()?;
            f(Dest::I8(w.as_mut_slice().ok_or_else(not_contiguous)?))
        }
        DType::F32 => {
            let mut w = t.write::<f32>()?;
            f(Dest::F32(w.as_mut_slice().ok_or_else(not_contiguous)?))
        }
        dtype => Err(OpError::kernel(op, format!("cannot write {dtype} output"))),
    }
}

/// B packed at plan time: `fact` is a constant 2-D `k x n` operand (else `None`).
pub(crate) fn prepack_matrix(op: &str, fact: &Fact) -> OpResult<Option<Arc<PackedB>>> {
    let Some(value) = fact.value.as_ref().filter(|v| v.rank() == 2) else {
        return Ok(None);
    };
    let (k, n) = (value.dims()[0], value.dims()[1]);
    with_int_slice(op, value, |b| Ok(PackedB::new(b, k, n, (n, 1))?)).map(|p| Some(Arc::new(p)))
}
