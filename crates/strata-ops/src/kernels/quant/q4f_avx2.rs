//! AVX2 kernels for [`Q4Weights`]: a row dequantized to f32, a row dotted with f32
//! activations (dequantize and multiply-add fused), and a row dotted with [`Q8Block`]
//! activations in integers. Every function requires AVX2, FMA and F16C, checked by the caller.

use std::arch::x86_64::*;

use strata_core::QUANT_BLOCK;

use super::avx2::{dot_i8_i8, hsum, load_q8, nibbles};
use super::q4f::{GroupParams, Q4Weights, GROUP_BYTES};
use super::q8::Q8Block;

/// Group `g` of a row dequantized into four vectors (elements 0..8, 8..16, 16..24, 24..32).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `qs` must hold 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_f32(qs: *const u8, p: GroupParams) -> [__m256; 4] {
    // SAFETY: the caller guarantees 16 readable bytes.
    let b = unsafe { _mm_loadu_si128(qs.cast()) };
    let mask = _mm_set1_epi8(0x0F);
    let halves = [
        _mm_and_si128(b, mask),
        _mm_and_si128(_mm_srli_epi16(b, 4), mask),
    ];
    let mut out = [_mm256_setzero_ps(); 4];
    for (h, &v) in halves.iter().enumerate() {
        let (s, z) = (_mm256_set1_ps(p.s[h]), _mm256_set1_ps(p.z[h]));
        for (e, part) in [v, _mm_srli_si128(v, 8)].into_iter().enumerate() {
            let q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
            out[2 * h + e] = _mm256_mul_ps(_mm256_sub_ps(q, z), s);
        }
    }
    out
}

/// Elements `p0..p0 + out.len()` of row `j` of `w` into `out` (`p0` a multiple of 32, the range
/// inside the row).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dequantize_range(w: &Q4Weights<'_>, j: usize, p0: usize, out: &mut [f32]) {
    debug_assert_eq!(p0 % QUANT_BLOCK, 0);
    let end = (p0 + out.len()).min(w.cols());
    let qs = w.qs_of(j);
    for g in p0 / QUANT_BLOCK..end.div_ceil(QUANT_BLOCK) {
        let k0 = g * QUANT_BLOCK;
        // SAFETY: group g's 16 bytes are inside the row (g < ceil(k / 32) = its groups).
        let v = unsafe { group_f32(qs.as_ptr().add(g * GROUP_BYTES), w.params(j, g)) };
        if k0 + QUANT_BLOCK <= end {
            for (e, v) in v.into_iter().enumerate() {
                // SAFETY: k0 - p0 + 8e + 8 <= end - p0 <= out.len().
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(k0 - p0 + 8 * e), v) };
            }
        } else {
            let mut tmp = [0.0f32; QUANT_BLOCK];
            for (e, v) in v.into_iter().enumerate() {
                // SAFETY: `tmp` holds 32 values.
                unsafe { _mm256_storeu_ps(tmp.as_mut_ptr().add(8 * e), v) };
            }
            out[k0 - p0..end - p0].copy_from_slice(&tmp[..end - k0]);
        }
    }
}

/// Row `j` of `w` dotted with `x` (`k` values) in f32.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_row_f32(w: &Q4Weights<'_>, j: usize, x: &[f32]) -> f32 {
    let k = w.cols().min(x.len());
    let qs = w.qs_of(j);
    let mut acc = [_mm256_setzero_ps(); 4];
    let whole = k / QUANT_BLOCK;
    for g in 0..whole {
        let k0 = g * QUANT_BLOCK;
        // SAFETY: group g is inside the row.
        let v = unsafe { group_f32(qs.as_ptr().add(g * GROUP_BYTES), w.params(j, g)) };
        for (e, v) in v.into_iter().enumerate() {
            // SAFETY: k0 + 8e + 8 <= k <= x.len().
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(k0 + 8 * e)) };
            acc[e] = _mm256_fmadd_ps(v, xv, acc[e]);
        }
    }
    let mut tail = 0.0f32;
    if whole < w.groups() {
        let k0 = whole * QUANT_BLOCK;
        let mut tmp = [0.0f32; QUANT_BLOCK];
        // SAFETY: the last group is inside the row.
        let v = unsafe { group_f32(qs.as_ptr().add(whole * GROUP_BYTES), w.params(j, whole)) };
        for (e, v) in v.into_iter().enumerate() {
            // SAFETY: `tmp` holds 32 values.
            unsafe { _mm256_storeu_ps(tmp.as_mut_ptr().add(8 * e), v) };
        }
        tail = tmp.iter().zip(&x[k0..k]).map(|(a, b)| a * b).sum();
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    hsum(sum) + tail
}

/// Row `j` of `w` dotted with quantized activations, one [`Q8Block`] per group: per group the
/// weights minus their zero points meet the activations in an 8-bit integer dot, each half
/// scaled by its block's scale times the activation scale.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `ys` holds at least one block per group; the zero points
/// are integers 0..=15.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_row_q8(w: &Q4Weights<'_>, j: usize, ys: &[Q8Block]) -> f32 {
    let qs = w.qs_of(j);
    let mut acc = _mm256_setzero_ps();
    for (g, y) in ys.iter().enumerate().take(w.groups()) {
        let p = w.params(j, g);
        // SAFETY: group g is inside the row.
        let q = unsafe { nibbles(qs.as_ptr().add(g * GROUP_BYTES)) };
        let z = _mm256_set_m128i(_mm_set1_epi8(p.z[1] as i8), _mm_set1_epi8(p.z[0] as i8));
        // SAFETY: `y` is a live block.
        let dot = dot_i8_i8(_mm256_sub_epi8(q, z), unsafe { load_q8(y) });
        let s = _mm256_set_m128(_mm_set1_ps(p.s[1] * y.d), _mm_set1_ps(p.s[0] * y.d));
        acc = _mm256_fmadd_ps(s, dot, acc);
    }
    hsum(acc)
}
