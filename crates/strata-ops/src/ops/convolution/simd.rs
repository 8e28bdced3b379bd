//! A small f32 vector abstraction over AVX-512 (`__m512`) and AVX2 + FMA (`__m256`), so the
//! direct, row and depthwise convolution kernels and the pooling kernels are written once,
//! generic over the vector width, and compiled per ISA by thin `#[target_feature]` entry points.
//!
//! An [`Isa`] value is a token: it exists only once its features were detected ([`Simd::detect`],
//! the one feature check these kernels make), so arithmetic through it is safe; loads and stores
//! stay `unsafe` (their pointers are the caller's to prove). Every method is
//! `#[inline(always)]`: inlined into an entry point compiled with the features, the intrinsics
//! become single instructions.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::row_band::{Clamp, ClampKind};

/// The f32 vector operations the kernels need, on the vector type [`Isa::V`].
pub(crate) trait Isa: Copy {
    type V: Copy;
    /// f32 lanes of [`Isa::V`].
    const LANES: usize;
    fn splat(self, x: f32) -> Self::V;
    /// `a * b + c`, fused.
    fn fmadd(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// `vminps`: `b` where either is NaN.
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// `vmaxps`: `b` where either is NaN.
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// `max(a, b)` where a NaN in either wins.
    fn max_nan(self, a: Self::V, b: Self::V) -> Self::V;
    /// The even elements of `lo` then `hi` (`lo[0], lo[2], .., hi[0], hi[2], ..`).
    fn evens(self, lo: Self::V, hi: Self::V) -> Self::V;
    /// The odd elements of `lo` then `hi`.
    fn odds(self, lo: Self::V, hi: Self::V) -> Self::V;

    /// # Safety
    /// `p` is valid for [`Isa::LANES`] reads.
    unsafe fn load(self, p: *const f32) -> Self::V;
    /// # Safety
    /// `p` is valid for [`Isa::LANES`] writes.
    unsafe fn store(self, p: *mut f32, v: Self::V);
    /// The first `n` lanes from `p`, zero in the others (which are not read).
    ///
    /// # Safety
    /// `p` is valid for `n.min(LANES)` reads.
    unsafe fn load_first(self, p: *const f32, n: usize) -> Self::V;
    /// The first `n` lanes of `v` to `p` (the others are not written). On AVX2 piecewise:
    /// AMD's masked stores are microcoded and slow.
    ///
    /// # Safety
    /// `p` is valid for `n.min(LANES)` writes.
    unsafe fn store_first(self, p: *mut f32, n: usize, v: Self::V);
    /// The lanes set in `mask` (bit `l` for lane `l`) from `p[0..mask.count_ones()]` in order,
    /// zero in the others.
    ///
    /// # Safety
    /// `p` is valid for `mask.count_ones()` reads; `mask` has no bit at or above `LANES`.
    unsafe fn load_lanes(self, p: *const f32, mask: u32) -> Self::V;
    /// The lanes of `v` set in `mask` to `p[0..mask.count_ones()]` in order.
    ///
    /// # Safety
    /// `p` is valid for `mask.count_ones()` writes; `mask` has no bit at or above `LANES`.
    unsafe fn store_lanes(self, p: *mut f32, mask: u32, v: Self::V);

    /// `v` clamped to `[lo, hi]` the way `kind` says: the activation the kernels apply in
    /// registers as they store.
    #[inline(always)]
    fn clamp(self, kind: ClampKind, v: Self::V, lo: Self::V, hi: Self::V) -> Self::V {
        match kind {
            ClampKind::None => v,
            // max(v, lo): a NaN becomes lo, as Relu's `x > 0 ? x : 0`.
            ClampKind::NanToLow => self.min(self.max(v, lo), hi),
            // max(lo, v): a NaN stays NaN, as Clip's comparisons.
            ClampKind::KeepNan => self.min(hi, self.max(lo, v)),
        }
    }

    /// `c`'s bounds, splat (the `lo` and `hi` of [`Isa::clamp`]).
    #[inline(always)]
    fn bounds(self, c: Clamp) -> (Self::V, Self::V) {
        (self.splat(c.lo), self.splat(c.hi))
    }
}

/// AVX-512F, detected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

impl Avx512 {
    #[cfg(target_arch = "x86_64")]
    fn detect() -> Option<Self> {
        std::arch::is_x86_feature_detected!("avx512f").then_some(Avx512(()))
    }
}

/// AVX2 and FMA, detected.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

impl Avx2 {
    #[cfg(target_arch = "x86_64")]
    fn detect() -> Option<Self> {
        (std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
            .then_some(Avx2(()))
    }
}

/// The mask of the first `n` of 16 lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn first16(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

// An `Avx512` token exists only where AVX-512F was detected; the pointer contracts are the
// methods' own.
#[cfg(target_arch = "x86_64")]
impl Isa for Avx512 {
    type V = __m512;
    const LANES: usize = 16;
    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    fn fmadd(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    fn max_nan(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe {
            let nan_a = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a);
            _mm512_mask_mov_ps(_mm512_max_ps(a, b), nan_a, a)
        }
    }
    #[inline(always)]
    fn evens(self, lo: __m512, hi: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe {
            let i = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            _mm512_permutex2var_ps(lo, i, hi)
        }
    }
    #[inline(always)]
    fn odds(self, lo: __m512, hi: __m512) -> __m512 {
        // SAFETY: the token proves AVX-512F.
        unsafe {
            let i = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            _mm512_permutex2var_ps(lo, i, hi)
        }
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m512 {
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m512) {
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_first(self, p: *const f32, n: usize) -> __m512 {
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe { _mm512_maskz_loadu_ps(first16(n), p) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize, v: __m512) {
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe { _mm512_mask_storeu_ps(p, first16(n), v) }
    }
    #[inline(always)]
    unsafe fn load_lanes(self, p: *const f32, mask: u32) -> __m512 {
        // Dense, then spread to the mask's lanes.
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe {
            let dense = _mm512_maskz_loadu_ps(first16(mask.count_ones() as usize), p);
            _mm512_maskz_expand_ps(mask as __mmask16, dense)
        }
    }
    #[inline(always)]
    unsafe fn store_lanes(self, p: *mut f32, mask: u32, v: __m512) {
        // Packed to the low end in a register (a compress to memory is slow), then stored.
        // SAFETY: the token proves AVX-512F; the pointer is the caller's contract.
        unsafe {
            let dense = _mm512_maskz_compress_ps(mask as __mmask16, v);
            _mm512_mask_storeu_ps(p, first16(mask.count_ones() as usize), dense)
        }
    }
}

/// `vmaskmovps`'s mask of the lanes set in `bits` (the low 8).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn lane_mask(_: Avx2, bits: u32) -> __m256i {
    // SAFETY: the token proves AVX2.
    unsafe {
        let each = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let set = _mm256_and_si256(_mm256_set1_epi32(bits as i32), each);
        _mm256_cmpeq_epi32(set, each)
    }
}

/// The bits of the first `n` of 8 lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn first8(n: usize) -> u32 {
    if n >= 8 {
        0xff
    } else {
        (1u32 << n) - 1
    }
}

// An `Avx2` token exists only where AVX2 and FMA were detected; the pointer contracts are the
// methods' own, and `vmaskmovps` does not touch the masked-off lanes' memory.
#[cfg(target_arch = "x86_64")]
impl Isa for Avx2 {
    type V = __m256;
    const LANES: usize = 8;
    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    fn fmadd(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe { _mm256_min_ps(a, b) }
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn max_nan(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe {
            let nan_a = _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a);
            _mm256_blendv_ps(_mm256_max_ps(a, b), a, nan_a)
        }
    }
    #[inline(always)]
    fn evens(self, lo: __m256, hi: __m256) -> __m256 {
        // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the 64-bit pairs reordered.
        // SAFETY: the token proves AVX2 + FMA.
        unsafe {
            let s = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(s)))
        }
    }
    #[inline(always)]
    fn odds(self, lo: __m256, hi: __m256) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA.
        unsafe {
            let s = _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(s)))
        }
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> __m256 {
        // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: __m256) {
        // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn load_first(self, p: *const f32, n: usize) -> __m256 {
        if n >= 8 {
            // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
            return unsafe { _mm256_loadu_ps(p) };
        }
        // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
        unsafe { _mm256_maskload_ps(p, lane_mask(self, first8(n))) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, n: usize, v: __m256) {
        // SAFETY: the token proves AVX2 + FMA; each store writes lanes below n (the caller's
        // contract): four, two and one of them, from the low end of what is left.
        unsafe {
            if n >= 8 {
                return _mm256_storeu_ps(p, v);
            }
            let mut q = _mm256_castps256_ps128(v);
            let mut at = 0;
            if n & 4 != 0 {
                _mm_storeu_ps(p, q);
                q = _mm256_extractf128_ps(v, 1);
                at = 4;
            }
            if n & 2 != 0 {
                _mm_storel_pd(p.add(at) as *mut f64, _mm_castps_pd(q));
                q = _mm_movehl_ps(q, q);
                at += 2;
            }
            if n & 1 != 0 {
                _mm_store_ss(p.add(at), q);
            }
        }
    }
    #[inline(always)]
    unsafe fn load_lanes(self, p: *const f32, mask: u32) -> __m256 {
        if mask == 0xff {
            // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
            return unsafe { _mm256_loadu_ps(p) };
        }
        // Each run of set lanes `s..s + n` holds the next `n` elements: lane `l` reads
        // `p[k + l - s]`, `k` the elements before the run. Runs' lanes are disjoint: or-ed.
        let mut v = self.splat(0.0);
        let (mut rest, mut k) = (mask, 0usize);
        while rest != 0 {
            let s = rest.trailing_zeros();
            let bits = rest & !(rest + (1 << s));
            let at = p.wrapping_add(k).wrapping_sub(s as usize);
            // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
            v = unsafe { _mm256_or_ps(v, _mm256_maskload_ps(at, lane_mask(self, bits))) };
            k += bits.count_ones() as usize;
            rest &= !bits;
        }
        v
    }
    #[inline(always)]
    unsafe fn store_lanes(self, p: *mut f32, mask: u32, v: __m256) {
        if mask == 0xff {
            // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
            return unsafe { _mm256_storeu_ps(p, v) };
        }
        let (mut rest, mut k) = (mask, 0usize);
        while rest != 0 {
            let s = rest.trailing_zeros();
            // The run of set bits from `s`: adding its lowest bit carries through it.
            let bits = rest & !(rest + (1 << s));
            let at = p.wrapping_add(k).wrapping_sub(s as usize);
            // SAFETY: the token proves AVX2 + FMA; the pointer is the caller's contract.
            unsafe { _mm256_maskstore_ps(at, lane_mask(self, bits), v) };
            k += bits.count_ones() as usize;
            rest &= !bits;
        }
    }
}

/// The widest ISA the kernels have, detected.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Simd {
    Avx512(Avx512),
    Avx2(Avx2),
}

impl Simd {
    /// The widest ISA this CPU has, or `None` (not x86-64, or neither AVX-512F nor AVX2 +
    /// FMA). Cheap per call: std caches the CPUID answers, each check is an atomic load.
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            Avx512::detect()
                .map(Simd::Avx512)
                .or_else(|| Avx2::detect().map(Simd::Avx2))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// Every ISA this CPU has (AVX2 too where AVX-512 is detected), for tests that cover each.
    #[cfg(test)]
    pub(crate) fn all() -> Vec<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            let wide = Avx512::detect().map(Simd::Avx512);
            wide.into_iter()
                .chain(Avx2::detect().map(Simd::Avx2))
                .collect()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Vec::new()
        }
    }

    /// The AVX-512 token, where that is the ISA.
    pub(crate) fn avx512(self) -> Option<Avx512> {
        match self {
            Simd::Avx512(isa) => Some(isa),
            Simd::Avx2(_) => None,
        }
    }
}
