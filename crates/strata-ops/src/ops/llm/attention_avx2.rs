//! AVX2 + F16C forms of CachedAttention's inner loops, each giving exactly the numbers of the
//! portable code in `cached_attention.rs` (same products, same fused multiply-adds, same
//! summation order): a 16-lane accumulator is two `__m256` halves, f16 widening is `vcvtph2ps`
//! (exact) and rounding to f16 `vcvtps2ph` to nearest even. Every function requires AVX2, FMA
//! and F16C, checked by the caller at run time.

use std::arch::x86_64::*;

/// `v` rounded to f16 and back, eight at a time (the rest one by one).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn round_to_f16(v: &[f32], out: &mut [f32]) {
    let n = v.len().min(out.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, inside both slices.
        unsafe {
            let x = _mm256_loadu_ps(v.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    for (o, &x) in out[i..n].iter_mut().zip(&v[i..n]) {
        *o = crate::support::f16_bits::f16_to_f32(crate::support::f16_bits::f32_to_f16(x));
    }
}

/// Eight f16 at `p` widened.
///
/// # Safety
/// `p` must point at 8 readable u16; the CPU must have F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: *const u16) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned loads are allowed.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
}

/// The 16 lanes `lo ++ hi` summed in `_mm512_reduce_add_ps`'s order (see `ggml_math::reduce16`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce16(lo: __m256, hi: __m256) -> f32 {
    let h = _mm256_add_ps(lo, hi); // h[i] = v[i] + v[i + 8]
    let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)); // h[i] + h[i + 4]
    let r = _mm_add_ps(q, _mm_movehl_ps(q, q)); // (q0 + q2, q1 + q3)
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// tinyBLAS's dot of a query (already rounded to f16) with f16 keys: element `e` in lane
/// `e % 16` of one accumulator. `q.len()` is a multiple of 16.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `k` at least as long as `q`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_tiny(q: &[f32], k: &[u16]) -> f32 {
    debug_assert!(q.len().is_multiple_of(16) && k.len() >= q.len());
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut e = 0;
    while e + 16 <= q.len().min(k.len()) {
        // SAFETY: e + 16 <= the length of both slices.
        unsafe {
            lo = _mm256_fmadd_ps(
                _mm256_loadu_ps(q.as_ptr().add(e)),
                load_f16(k.as_ptr().add(e)),
                lo,
            );
            hi = _mm256_fmadd_ps(
                _mm256_loadu_ps(q.as_ptr().add(e + 8)),
                load_f16(k.as_ptr().add(e + 8)),
                hi,
            );
        }
        e += 16;
    }
    reduce16(lo, hi)
}

/// `ggml_vec_dot_f16`'s dot (see `ggml_math::dot_f16_order`): four 16-lane accumulators over
/// each 64 elements, the rest in f64.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `k` at least as long as `q`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_vec(q: &[f32], k: &[u16]) -> f32 {
    let n = q.len().min(k.len());
    let whole = n / 64 * 64;
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut e = 0;
    while e < whole {
        for (a, acc) in acc.iter_mut().enumerate() {
            // SAFETY: e + 8a + 8 <= whole <= the length of both slices.
            unsafe {
                *acc = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.as_ptr().add(e + 8 * a)),
                    load_f16(k.as_ptr().add(e + 8 * a)),
                    *acc,
                );
            }
        }
        e += 64;
    }
    // Accumulator i is halves (2i, 2i + 1): fold (0 + 2) + (1 + 3).
    let lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    let mut total = f64::from(reduce16(lo, hi));
    for (&a, &b) in q[whole..n].iter().zip(&k[whole..n]) {
        total += f64::from(a * crate::support::f16_bits::f16_to_f32(b));
    }
    total as f32
}

/// `acc[d] += v[d] · p` for the f16 values `v`, with fused multiply-adds.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_f16(acc: &mut [f32], v: &[u16], p: f32) {
    let n = acc.len().min(v.len());
    let pv = _mm256_set1_ps(p);
    let mut d = 0;
    while d + 8 <= n {
        // SAFETY: d + 8 <= the length of both slices.
        unsafe {
            let a = acc.as_mut_ptr().add(d);
            _mm256_storeu_ps(
                a,
                _mm256_fmadd_ps(load_f16(v.as_ptr().add(d)), pv, _mm256_loadu_ps(a)),
            );
        }
        d += 8;
    }
    for (a, &v) in acc[d..n].iter_mut().zip(&v[d..n]) {
        *a = crate::support::f16_bits::f16_to_f32(v).mul_add(p, *a);
    }
}

/// `dst[d]` = the 16 slots `slots[l·hd + d]` (l < 16) summed in `reduce16`'s order, for
/// every feature `d` at once.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `slots` holds 16 · `dst.len()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn fold_slots(slots: &[f32], dst: &mut [f32]) {
    let hd = dst.len();
    assert!(slots.len() >= 16 * hd);
    let mut d = 0;
    // SAFETY (every load below): slot l of feature d + 7 is at l·hd + d + 7 < 16·hd.
    let at = |l: usize, d: usize| unsafe { _mm256_loadu_ps(slots.as_ptr().add(l * hd + d)) };
    while d + 8 <= hd {
        let h: [__m256; 8] = std::array::from_fn(|i| _mm256_add_ps(at(i, d), at(i + 8, d)));
        let q: [__m256; 4] = std::array::from_fn(|i| _mm256_add_ps(h[i], h[i + 4]));
        let r = _mm256_add_ps(_mm256_add_ps(q[0], q[2]), _mm256_add_ps(q[1], q[3]));
        // SAFETY: d + 8 <= hd.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(d), r) };
        d += 8;
    }
    for (d, out) in dst.iter_mut().enumerate().skip(d) {
        let v: [f32; 16] = std::array::from_fn(|l| slots[l * hd + d]);
        *out = super::ggml_math::reduce16(&v);
    }
}
