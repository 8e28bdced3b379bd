//! AVX-512 kernels for [`Q4Slivers`]: a block of the f32 GEMM's packed B (slivers of 32
//! columns) filled straight from the layout, and the few-row product. Every function requires
//! AVX-512F, checked by the caller.

use std::arch::x86_64::*;
use std::ops::Range;

use super::q4_slivers::{masked_params, Q4Slivers, SLIVER, STEP_BYTES};
use super::OutPtr;
use crate::kernels::gemm::BBlock;

/// The 32 features of one step as f32 integers 0..=15: features 0..16 and 16..32.
///
/// # Safety
/// AVX-512F; `step` points at 16 readable bytes.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn step_f32(step: *const u8) -> [__m512; 2] {
    // SAFETY: 16 readable bytes (the caller's contract).
    let v = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(step.cast()) });
    let lo = _mm512_and_si512(v, _mm512_set1_epi32(0x0F));
    let hi = _mm512_srli_epi32::<4>(v);
    [_mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi)]
}

/// Writes `block` (slivers of 32 columns, `block.j0` a multiple of 32) into `dst`: per step
/// one load, an unpack and two multiply-adds with the block's scale and offset vectors.
///
/// # Safety
/// AVX-512F; `block.nr == 32`, `block.j0 % 32 == 0`, the block inside W (`p0 + kc <= k`,
/// `j0 + cols <= n`) and `dst` at least `block.elements()` long.
#[target_feature(enable = "avx512f")]
pub unsafe fn fill_block(w: &Q4Slivers<'_>, block: BBlock, dst: &mut [f32]) {
    debug_assert!(block.nr == SLIVER && block.j0.is_multiple_of(SLIVER));
    let (kc, bs) = (block.kc, w.block_size());
    let end = block.p0 + kc;
    for (s, sliver) in dst[..block.elements()]
        .chunks_exact_mut(kc * SLIVER)
        .enumerate()
    {
        let j = block.j0 + s * SLIVER;
        let (c, cols) = (j / SLIVER, (block.j0 + block.cols - j).min(SLIVER));
        let mut out = sliver.as_mut_ptr();
        let mut p = block.p0;
        while p < end {
            let b = p / bs;
            let run = ((b + 1) * bs).min(end) - p;
            let prm = masked_params(w, (c, b), 0, cols);
            // SAFETY: `prm` holds 64 values.
            let [s0, s1, o0, o1] =
                std::array::from_fn(|v| unsafe { _mm512_loadu_ps(prm.as_ptr().add(16 * v)) });
            let step = w.step(c, p).as_ptr();
            for t in 0..run {
                // SAFETY: steps p..p + run < k of group c are contiguous in `qs`; the sliver
                // has kc rows of 32, of which this writes row p + t - p0.
                unsafe {
                    let [lo, hi] = step_f32(step.add(t * STEP_BYTES));
                    _mm512_storeu_ps(out, _mm512_fmadd_ps(lo, s0, o0));
                    _mm512_storeu_ps(out.add(16), _mm512_fmadd_ps(hi, s1, o1));
                    out = out.add(SLIVER);
                }
            }
            p += run;
        }
    }
}

/// `y[i][32c..32c + 32] = x[i] · W[32c..]ᵀ` for each group `c` in `groups` and each of the
/// `m` (1..=3) activation rows.
///
/// # Safety
/// AVX-512F; `x` holds `m × k` values, `y` points at `m × n` values of which this call owns
/// the columns of `groups`.
#[target_feature(enable = "avx512f")]
pub unsafe fn gemv(w: &Q4Slivers<'_>, x: &[f32], m: usize, y: OutPtr, groups: Range<usize>) {
    debug_assert!(x.len() >= m * w.cols());
    // Steps unrolled so 8 or more independent accumulators hide the multiply-add latency.
    // SAFETY: the caller's contract.
    unsafe {
        match m {
            1 => gemv_rows::<1, 4>(w, x, y, groups),
            2 => gemv_rows::<2, 2>(w, x, y, groups),
            _ => gemv_rows::<3, 2>(w, x, y, groups),
        }
    }
}

/// [`gemv`] for `M` rows, `U` steps at a time.
///
/// # Safety
/// As [`gemv`] with `m = M`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn gemv_rows<const M: usize, const U: usize>(
    w: &Q4Slivers<'_>,
    x: &[f32],
    y: OutPtr,
    groups: Range<usize>,
) {
    let (n, k, bs) = (w.rows(), w.cols(), w.block_size());
    let xp = x.as_ptr();
    for c in groups {
        let mut acc = [[[_mm512_setzero_ps(); 2]; M]; U];
        let mut p = 0;
        while p < k {
            let b = p / bs;
            let end = ((b + 1) * bs).min(k);
            // Padded features have zero parameters: their weights are 0.
            let prm = w.block_params(c, b).as_ptr();
            // SAFETY: a block's parameters are 64 values.
            let [s0, s1, o0, o1] =
                std::array::from_fn(|v| unsafe { _mm512_loadu_ps(prm.add(16 * v)) });
            let step = w.step(c, p).as_ptr();
            let mut t = 0;
            while p + t + U <= end {
                for (u, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: step p + t + u < end <= k of group c, inside its contiguous run
                    // of steps in `qs`.
                    let [lo, hi] = unsafe { step_f32(step.add((t + u) * STEP_BYTES)) };
                    let (w0, w1) = (_mm512_fmadd_ps(lo, s0, o0), _mm512_fmadd_ps(hi, s1, o1));
                    for (i, a) in acc.iter_mut().enumerate() {
                        // SAFETY: x[i * k + p + t + u] is inside x: i < M, p + t + u < k.
                        let xv = _mm512_set1_ps(unsafe { *xp.add(i * k + p + t + u) });
                        a[0] = _mm512_fmadd_ps(w0, xv, a[0]);
                        a[1] = _mm512_fmadd_ps(w1, xv, a[1]);
                    }
                }
                t += U;
            }
            while p + t < end {
                // SAFETY: step p + t < end <= k of group c, as above.
                let [lo, hi] = unsafe { step_f32(step.add(t * STEP_BYTES)) };
                let (w0, w1) = (_mm512_fmadd_ps(lo, s0, o0), _mm512_fmadd_ps(hi, s1, o1));
                for (i, a) in acc[0].iter_mut().enumerate() {
                    // SAFETY: x[i * k + p + t] is inside x: i < M, p + t < k.
                    let xv = _mm512_set1_ps(unsafe { *xp.add(i * k + p + t) });
                    a[0] = _mm512_fmadd_ps(w0, xv, a[0]);
                    a[1] = _mm512_fmadd_ps(w1, xv, a[1]);
                }
                t += 1;
            }
            p = end;
        }
        let cols = (n - c * SLIVER).min(SLIVER);
        let mask = |from: usize| -> __mmask16 {
            let lanes = cols.saturating_sub(from).min(16);
            ((1u32 << lanes) - 1) as __mmask16
        };
        for i in 0..M {
            let mut sum = acc[0][i];
            for acc in &acc[1..] {
                sum[0] = _mm512_add_ps(sum[0], acc[i][0]);
                sum[1] = _mm512_add_ps(sum[1], acc[i][1]);
            }
            // SAFETY: row i's columns 32c..32c + cols are inside Y and owned by this call.
            unsafe {
                let dst = y.0.add(i * n + c * SLIVER);
                _mm512_mask_storeu_ps(dst, mask(0), sum[0]);
                _mm512_mask_storeu_ps(dst.add(16), mask(16), sum[1]);
            }
        }
    }
}
