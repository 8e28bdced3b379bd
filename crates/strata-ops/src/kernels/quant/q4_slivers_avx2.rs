//! AVX2 kernels for [`Q4Slivers`]: a block of the f32 GEMM's packed B (slivers of 16 or 32
//! columns) filled straight from the layout, and the few-row product. Every function requires
//! AVX2 and FMA, checked by the caller.

use std::arch::x86_64::*;
use std::ops::Range;

use super::q4_slivers::{masked_params, Q4Slivers, SLIVER, STEP_BYTES};
use super::OutPtr;
use crate::kernels::gemm::BBlock;

/// Features `16h..16h + 16` of a step's 16 bytes (`h` 0: the low nibbles, 1: the high ones) as
/// two vectors of f32 integers 0..=15.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn half_f32(bytes: __m128i, h: usize) -> [__m256; 2] {
    let shifted = if h == 0 {
        bytes
    } else {
        _mm_srli_epi16::<4>(bytes)
    };
    let nib = _mm_and_si128(shifted, _mm_set1_epi8(0x0F));
    [
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nib)),
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(nib))),
    ]
}

/// Writes `block` (slivers of `nr` = 16 or 32 columns, `block.j0` a multiple of `nr`) into
/// `dst`: per step one load, then per 16 columns an unpack and two multiply-adds.
///
/// # Safety
/// AVX2 and FMA; `block.nr` 16 or 32 and `block.j0` a multiple of it, the block inside W
/// (`p0 + kc <= k`, `j0 + cols <= n`) and `dst` at least `block.elements()` long.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn fill_block(w: &Q4Slivers<'_>, block: BBlock, dst: &mut [f32]) {
    let (kc, nr, bs) = (block.kc, block.nr, w.block_size());
    debug_assert!((nr == 16 || nr == 32) && block.j0.is_multiple_of(nr));
    let halves = nr / 16;
    let end = block.p0 + kc;
    for (s, sliver) in dst[..block.elements()]
        .chunks_exact_mut(kc * nr)
        .enumerate()
    {
        let j = block.j0 + s * nr;
        let (c, first) = (j / SLIVER, j % SLIVER);
        let cols = (block.j0 + block.cols - j).min(nr);
        let mut out = sliver.as_mut_ptr();
        let mut p = block.p0;
        while p < end {
            let b = p / bs;
            let run = ((b + 1) * bs).min(end) - p;
            let prm = masked_params(w, (c, b), first, cols);
            // Scale and offset vectors of the sliver's 8-column quarters, low to high.
            // SAFETY: `prm` holds 64 values; first + 8q + 8 <= 32.
            let scale: [__m256; 4] = std::array::from_fn(|q| unsafe {
                _mm256_loadu_ps(prm.as_ptr().add(first + 8 * q))
            });
            // SAFETY: the offsets are the second 32 of `prm`'s 64 values; first + 8q + 8 <= 32.
            let offset: [__m256; 4] = std::array::from_fn(|q| unsafe {
                _mm256_loadu_ps(prm.as_ptr().add(SLIVER + first + 8 * q))
            });
            let step = w.step(c, p).as_ptr();
            for t in 0..run {
                // SAFETY: steps p..p + run < k of group c are contiguous in `qs`; the sliver
                // has kc rows of nr, of which this writes row p + t - p0.
                unsafe {
                    let bytes = _mm_loadu_si128(step.add(t * STEP_BYTES).cast());
                    for h in 0..halves {
                        let [a, b] = half_f32(bytes, first / 16 + h);
                        let q = 2 * h;
                        _mm256_storeu_ps(out, _mm256_fmadd_ps(a, scale[q], offset[q]));
                        _mm256_storeu_ps(
                            out.add(8),
                            _mm256_fmadd_ps(b, scale[q + 1], offset[q + 1]),
                        );
                        out = out.add(16);
                    }
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
/// AVX2 and FMA; `x` holds `m × k` values, `y` points at `m × n` values of which this call
/// owns the columns of `groups`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemv(w: &Q4Slivers<'_>, x: &[f32], m: usize, y: OutPtr, groups: Range<usize>) {
    debug_assert!(x.len() >= m * w.cols());
    // SAFETY: the caller's contract.
    unsafe {
        match m {
            1 => gemv_rows::<1, 2>(w, x, y, groups),
            2 => gemv_rows::<2, 1>(w, x, y, groups),
            _ => gemv_rows::<3, 1>(w, x, y, groups),
        }
    }
}

/// [`gemv`] for `M` rows, `U` steps at a time.
///
/// # Safety
/// As [`gemv`] with `m = M`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_rows<const M: usize, const U: usize>(
    w: &Q4Slivers<'_>,
    x: &[f32],
    y: OutPtr,
    groups: Range<usize>,
) {
    let (n, k, bs) = (w.rows(), w.cols(), w.block_size());
    let xp = x.as_ptr();
    for c in groups {
        let mut acc = [[[_mm256_setzero_ps(); 4]; M]; U];
        let mut p = 0;
        while p < k {
            let b = p / bs;
            let end = ((b + 1) * bs).min(k);
            // Padded features have zero parameters: their weights are 0.
            let prm = w.block_params(c, b).as_ptr();
            // SAFETY: a block's parameters are 64 values.
            let scale: [__m256; 4] =
                std::array::from_fn(|q| unsafe { _mm256_loadu_ps(prm.add(8 * q)) });
            // SAFETY: the offsets are the block's second 32 parameters (of 64).
            let offset: [__m256; 4] =
                std::array::from_fn(|q| unsafe { _mm256_loadu_ps(prm.add(SLIVER + 8 * q)) });
            let step = w.step(c, p).as_ptr();
            let mut t = 0;
            // One step of `U`: its 32 weights, then every row's multiply-adds.
            // SAFETY: steps p..end < k of group c are contiguous in `qs`, and
            // x[i * k + p + t] is inside x for i < M, p + t < k.
            let one = |acc: &mut [[__m256; 4]; M], t: usize| unsafe {
                let bytes = _mm_loadu_si128(step.add(t * STEP_BYTES).cast());
                let [a, b] = half_f32(bytes, 0);
                let [c, d] = half_f32(bytes, 1);
                let wv: [__m256; 4] =
                    std::array::from_fn(|q| _mm256_fmadd_ps([a, b, c, d][q], scale[q], offset[q]));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm256_set1_ps(*xp.add(i * k + p + t));
                    for q in 0..4 {
                        acc[q] = _mm256_fmadd_ps(wv[q], xv, acc[q]);
                    }
                }
            };
            while p + t + U <= end {
                for (u, acc) in acc.iter_mut().enumerate() {
                    one(acc, t + u);
                }
                t += U;
            }
            while p + t < end {
                one(&mut acc[0], t);
                t += 1;
            }
            p = end;
        }
        let cols = (n - c * SLIVER).min(SLIVER);
        for i in 0..M {
            let mut sum = acc[0][i];
            for acc in &acc[1..] {
                for q in 0..4 {
                    sum[q] = _mm256_add_ps(sum[q], acc[i][q]);
                }
            }
            let mut tmp = [0.0f32; SLIVER];
            for (q, v) in sum.into_iter().enumerate() {
                // SAFETY: `tmp` holds 32 values.
                unsafe { _mm256_storeu_ps(tmp.as_mut_ptr().add(8 * q), v) };
            }
            for (l, &v) in tmp.iter().enumerate().take(cols) {
                // SAFETY: (i, 32c + l) is inside Y and its column belongs to this call.
                unsafe { y.write(i * n + c * SLIVER + l, v) };
            }
        }
    }
}
