//! AVX-512 fill of one packed GEMM sliver from [`Q4Weights`]: sixteen weight rows at a time,
//! each group of 32 dequantized into two registers per row and transposed in registers into the
//! sliver's rows (one 16-lane half each). Dequantizing rows and transposing them in a second
//! pass wrote and read every value once more.

use std::arch::x86_64::*;

use strata_core::QUANT_BLOCK;

use super::q4f::{Q4Weights, GROUP_BYTES};
use crate::kernels::interleave::avx512::{mask, transpose};

/// Writes the sliver of weight rows `j0..j0 + cols` (lanes, zero past `cols`, `nr` in all) by
/// depth `p0..p0 + kc` (rows) into `sliver`: `sliver[p * nr + l] = W[j0 + l][p0 + p]`.
///
/// # Safety
/// The CPU has AVX-512F; `p0` is a multiple of 32, `p0 + kc <= k`, `j0 + cols <= n`,
/// `cols <= nr` and `sliver.len() >= kc * nr`.
#[target_feature(enable = "avx512f")]
pub unsafe fn fill_sliver(
    w: &Q4Weights<'_>,
    j0: usize,
    cols: usize,
    p0: usize,
    kc: usize,
    sliver: &mut [f32],
    nr: usize,
) {
    debug_assert!(p0.is_multiple_of(QUANT_BLOCK) && p0 + kc <= w.cols() && cols <= nr);
    assert!(sliver.len() >= kc * nr && j0 + cols <= w.rows());
    let low = _mm_set1_epi8(0x0F);
    for l0 in (0..nr).step_by(16) {
        let lanes = cols.saturating_sub(l0).min(16);
        let store = mask(nr - l0);
        for g in p0 / QUANT_BLOCK..(p0 + kc).div_ceil(QUANT_BLOCK) {
            // Halves of group g: elements 32g + q (low nibbles) and 32g + 16 + q (high).
            let mut halves = [[_mm512_setzero_ps(); 16]; 2];
            let [lo, hi] = &mut halves;
            for (l, (lo, hi)) in lo.iter_mut().zip(hi.iter_mut()).enumerate().take(lanes) {
                let j = j0 + l0 + l;
                let p = w.params(j, g);
                let qs = &w.qs_of(j)[g * GROUP_BYTES..(g + 1) * GROUP_BYTES];
                // SAFETY: `qs` is a group's 16 bytes.
                let b = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
                let nibbles = [
                    _mm_and_si128(b, low),
                    _mm_and_si128(_mm_srli_epi16(b, 4), low),
                ];
                for (h, (out, &v)) in [lo, hi].into_iter().zip(&nibbles).enumerate() {
                    let q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
                    let z = _mm512_set1_ps(p.z[h]);
                    *out = _mm512_mul_ps(_mm512_sub_ps(q, z), _mm512_set1_ps(p.s[h]));
                }
            }
            for (h, half) in halves.iter_mut().enumerate() {
                transpose(half);
                let first = g * QUANT_BLOCK + 16 * h;
                for (q, &row) in half.iter().enumerate() {
                    // Sliver row of depth first + q, if inside this block.
                    let Some(p) = (first + q).checked_sub(p0).filter(|&p| p < kc) else {
                        continue;
                    };
                    // SAFETY: p < kc, so p * nr + l0 + 16 lanes masked to nr - l0 end by
                    // kc * nr <= sliver.len() (asserted above).
                    unsafe {
                        _mm512_mask_storeu_ps(sliver.as_mut_ptr().add(p * nr + l0), store, row)
                    };
                }
            }
        }
    }
}
