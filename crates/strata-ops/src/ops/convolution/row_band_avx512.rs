//! The input band's row fills on AVX-512: a zero-padded row and the stride-2 column phase split
//! (see `row_band`).

use std::arch::x86_64::*;

/// f32 lanes of a 512-bit vector.
const LANES: usize = 16;

/// Splits `src` into its even and odd elements: `even[j] = src[2j]`, `odd[j] = src[2j + 1]`
/// for `j < even.len()`.
///
/// # Safety
/// AVX-512F is available.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn split_phases(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let n = even.len();
    assert!(odd.len() == n && src.len() >= 2 * n);
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let (s, e, o) = (src.as_ptr(), even.as_mut_ptr(), odd.as_mut_ptr());
    let mut j = 0;
    while j + LANES <= n {
        // SAFETY: src holds 2n >= 2j + 32 elements, even and odd n >= j + 16 (asserted).
        unsafe {
            let (a, b) = (
                _mm512_loadu_ps(s.add(2 * j)),
                _mm512_loadu_ps(s.add(2 * j + LANES)),
            );
            _mm512_storeu_ps(e.add(j), _mm512_permutex2var_ps(a, evens, b));
            _mm512_storeu_ps(o.add(j), _mm512_permutex2var_ps(a, odds, b));
        }
        j += LANES;
    }
    for j in j..n {
        even[j] = src[2 * j];
        odd[j] = src[2 * j + 1];
    }
}

/// `dst[j] = src[j - pad]` where that is inside `src`, else zero: one padded input row, with
/// masked loads and stores (no element outside `src` or `dst` is touched).
///
/// # Safety
/// AVX-512F is available.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pad_row(src: &[f32], pad: usize, dst: &mut [f32]) {
    let (w, n) = (src.len(), dst.len());
    let bits = |count: usize| -> u32 {
        if count >= LANES {
            0xffff
        } else {
            (1u32 << count) - 1
        }
    };
    let mut j = 0;
    while j < n {
        // Lanes l with 0 <= j + l - pad < w are loaded, lanes with j + l < n stored.
        let first = pad.saturating_sub(j);
        let end = (w + pad).saturating_sub(j);
        let load = (bits(end) & !bits(first)) as __mmask16;
        let store = bits(n - j) as __mmask16;
        // SAFETY: the masks keep every lane read inside `src` and every lane written inside
        // `dst`; masked-off lanes are not accessed.
        unsafe {
            let at = src.as_ptr().wrapping_add(j).wrapping_sub(pad);
            let v = _mm512_maskz_loadu_ps(load, at);
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(j), store, v);
        }
        j += LANES;
    }
}
