//! The softmax's row passes with AVX-512 intrinsics: the maximum and `exp(x − shift)`.
//!
//! The portable row loops compile poorly for them. `exp_flushed` per lane becomes about 40
//! vector instructions per 16 elements: separate multiplies and adds (Rust never contracts them
//! into FMAs), two clamps and a two-step power of two. Here it is 16: FMAs, `vroundscaleps`
//! and `vscalefps`, with the flush folded into the final zero mask. The maximum's 16 lanes were
//! folded one after another (a chain of 16 dependent compares per row; BERT's rows are only 8
//! vectors long); here it is a tree. Together these passes were a third of BERT's attention.

use std::arch::x86_64::*;

use super::EXP_FLUSH_BELOW;

/// `row = exp(row − shift)` flushed to 0 below the normal range, as [`super::exp_flushed`]
/// (within an ulp or two: FMA rounding differs); returns the row's sum.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
    let n = row.len();
    let ptr = row.as_mut_ptr();
    let shift = _mm512_set1_ps(shift);
    let mut sum = _mm512_setzero_ps();
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 lie inside `row`.
        let x = _mm512_sub_ps(unsafe { _mm512_loadu_ps(ptr.add(i)) }, shift);
        let e = exp16(x, u16::MAX);
        // SAFETY: as above.
        unsafe { _mm512_storeu_ps(ptr.add(i), e) };
        sum = _mm512_add_ps(sum, e);
        i += 16;
    }
    if i < n {
        // The n − i < 16 remaining lanes; the others are neither read nor written, and are 0.
        let lanes: __mmask16 = (1u16 << (n - i)) - 1;
        // SAFETY: the masked load and store touch only elements i..n of `row`.
        let x = _mm512_sub_ps(unsafe { _mm512_maskz_loadu_ps(lanes, ptr.add(i)) }, shift);
        let e = exp16(x, lanes);
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_ps(ptr.add(i), lanes, e) };
        sum = _mm512_add_ps(sum, e);
    }
    _mm512_reduce_add_ps(sum)
}

/// e^x on the lanes in `lanes` (others 0), 0 where x < [`EXP_FLUSH_BELOW`], NaN kept: the
/// Cephes polynomial of `fast_math::exp` on the same Cody–Waite reduction.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp16(x: __m512, lanes: __mmask16) -> __m512 {
    let low = _mm512_set1_ps(EXP_FLUSH_BELOW);
    // "Not less than, unordered": NaN lanes are kept.
    let keep = _mm512_mask_cmp_ps_mask::<_CMP_NLT_UQ>(lanes, x, low);
    // On a NaN, vmaxps returns its second operand: NaN stays NaN.
    let x = _mm512_max_ps(low, x);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    // e^r = p·r² + r + 1.
    let e = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    // x ≥ −87.3 keeps n ≥ −126, so e·2^n is a normal number.
    _mm512_maskz_scalef_ps(keep, e, n)
}

/// The row's maximum: NaN if any element is NaN (as Softmax gives NaN then), −∞ for an empty
/// row.
///
/// # Safety
/// The CPU supports AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_max(row: &[f32]) -> f32 {
    let n = row.len();
    let ptr = row.as_ptr();
    let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut nan: __mmask16 = 0;
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: elements i..i + 16 lie inside `row`.
        let x = unsafe { _mm512_loadu_ps(ptr.add(i)) };
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        max = _mm512_max_ps(max, x);
        i += 16;
    }
    if i < n {
        let lanes: __mmask16 = (1u16 << (n - i)) - 1;
        // SAFETY: the masked load reads only elements i..n of `row`; the other lanes are −∞.
        let x =
            unsafe { _mm512_mask_loadu_ps(_mm512_set1_ps(f32::NEG_INFINITY), lanes, ptr.add(i)) };
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        max = _mm512_max_ps(max, x);
    }
    if nan != 0 {
        f32::NAN
    } else {
        _mm512_reduce_max_ps(max)
    }
}
