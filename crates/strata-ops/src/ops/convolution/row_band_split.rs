//! The stride-2 column phase split of the row band's fill (see `row_band`), generic over the
//! vector width: the even and odd elements of two vectors with one shuffle each.

use super::simd::{Avx2, Avx512, Isa, Simd};

/// Splits `src` into its even and odd elements: `even[j] = src[2j]`, `odd[j] = src[2j + 1]`
/// for `j < even.len()`.
pub(super) fn split_phases(simd: Simd, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    // SAFETY: the token proves the entry point's features.
    unsafe {
        match simd {
            Simd::Avx512(isa) => split_avx512(isa, src, even, odd),
            Simd::Avx2(isa) => split_avx2(isa, src, even, odd),
        }
    }
}

#[target_feature(enable = "avx512f")]
fn split_avx512(isa: Avx512, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    split(isa, src, even, odd)
}

#[target_feature(enable = "avx2,fma")]
fn split_avx2(isa: Avx2, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    split(isa, src, even, odd)
}

#[inline(always)]
fn split<I: Isa>(isa: I, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let (n, lanes) = (even.len(), I::LANES);
    assert!(odd.len() == n && src.len() >= 2 * n);
    let (s, e, o) = (src.as_ptr(), even.as_mut_ptr(), odd.as_mut_ptr());
    let mut j = 0;
    while j + lanes <= n {
        // SAFETY: src holds 2n >= 2j + 2 lanes elements, even and odd n >= j + lanes
        // (asserted).
        unsafe {
            let (a, b) = (isa.load(s.add(2 * j)), isa.load(s.add(2 * j + lanes)));
            isa.store(e.add(j), isa.evens(a, b));
            isa.store(o.add(j), isa.odds(a, b));
        }
        j += lanes;
    }
    for j in j..n {
        even[j] = src[2 * j];
        odd[j] = src[2 * j + 1];
    }
}
