//! The input band's zero-padded row fill on AVX-512 (see `row_band`).

use std::arch::x86_64::*;

use super::simd::Avx512;

/// f32 lanes of a 512-bit vector.
const LANES: usize = 16;

/// `dst[j] = src[j - pad]` where that is inside `src`, else zero: one padded input row, with
/// masked loads and stores (no element outside `src` or `dst` is touched), on AVX-512F (the
/// token proves it).
#[target_feature(enable = "avx512f")]
pub(super) fn pad_row(_: Avx512, src: &[f32], pad: usize, dst: &mut [f32]) {
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
