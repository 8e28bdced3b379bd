//! The depthwise kernels' tap loads on top of [`Isa`], for f32 on AVX-512 (16 lanes) and on
//! AVX2 + FMA (8 lanes): each kernel is written once, generic over [`DwSimd`], and compiled per
//! instruction set by thin `#[target_feature]` entry points.
//!
//! AVX2 has no mask registers: its masks are vectors of lane masks (`_mm256_maskload_ps`).
//! Its stride-2 split leaves the outputs in a fixed lane order ([`DwSimd::in_order`] undoes it at
//! the store): in-lane shuffles instead of cross-lane permutes on every tap.

use std::arch::x86_64::*;

use super::simd::{lane_mask, Avx2, Avx512, Isa};

/// Defines `$dispatch(simd, args...)`, which runs the generic kernel `$kernel(isa, args...)` on
/// the detected ISA through two `#[target_feature]` entry points, `$avx512` (AVX-512F) and
/// `$avx2` (AVX2 + FMA).
macro_rules! entry_points {
    (
        $(#[$meta:meta])*
        $dispatch:ident($avx512:ident, $avx2:ident) => $kernel:ident($($arg:ident: $ty:ty),* $(,)?)
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $dispatch(simd: super::simd::Simd, $($arg: $ty),*) {
            // SAFETY: the token proves the entry point's features.
            unsafe {
                match simd {
                    super::simd::Simd::Avx512(isa) => $avx512(isa, $($arg),*),
                    super::simd::Simd::Avx2(isa) => $avx2(isa, $($arg),*),
                }
            }
        }
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx512f")]
        fn $avx512(isa: super::simd::Avx512, $($arg: $ty),*) {
            $kernel(isa, $($arg),*)
        }
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "avx2,fma")]
        fn $avx2(isa: super::simd::Avx2, $($arg: $ty),*) {
            $kernel(isa, $($arg),*)
        }
    };
}
pub(super) use entry_points;

/// The tap loads of the 3x3 depthwise kernels, on an [`Isa`].
pub(super) trait DwSimd: Isa {
    /// The load masks of one output vector's three taps in an input row (the loads
    /// [`DwSimd::taps`] makes at that stride).
    type TapMasks: Copy;

    /// The masks of the loads [`DwSimd::taps`] makes for outputs whose first tap reads column
    /// `s` of an input row `iw` wide, at stride `S` (1 or 2).
    fn tap_masks<const S: usize>(self, s: isize, iw: usize) -> Self::TapMasks;
    /// The three taps' inputs (columns `s + S * l + kx`, lane `l`, tap `kx`) of a vector of
    /// outputs, `p` pointing at column `s` of the row; columns off the row read as zero. At
    /// stride 2 the lanes may come in another order, the same for every tap.
    ///
    /// # Safety
    /// `m` was made by [`DwSimd::tap_masks`] for this `s` and row width, `p` = row + `s`.
    unsafe fn taps<const S: usize>(self, p: *const f32, m: &Self::TapMasks) -> [Self::V; 3];
    /// Columns from `s` that the loads of [`DwSimd::taps`] at stride `S` touch when no lane is
    /// masked off.
    fn load_reach<const S: usize>(self) -> usize;
    /// [`DwSimd::taps`] for a vector whose loads all lie inside the row (columns `s..s +
    /// load_reach`): no masks.
    ///
    /// # Safety
    /// Those columns are readable from `p`.
    unsafe fn taps_full<const S: usize>(self, p: *const f32) -> [Self::V; 3];
    /// A vector of outputs accumulated from [`DwSimd::taps`] at stride `S`, in column order.
    fn in_order<const S: usize>(self, v: Self::V) -> Self::V;
}

/// The bits of lanes `lo..hi` of `s..s + lanes` that are columns inside `0..iw` (columns `s +
/// l`): the lanes a load at column `s` may read.
#[inline(always)]
pub(super) fn row_bits(s: isize, iw: usize, lanes: usize) -> u32 {
    let lanes = lanes as isize;
    let lo = (-s).clamp(0, lanes);
    let hi = (iw as isize - s).clamp(0, lanes);
    let bits = |n: isize| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    if hi <= lo {
        0
    } else {
        bits(hi) & !bits(lo)
    }
}

impl DwSimd for Avx512 {
    type TapMasks = [__mmask16; 3];

    #[inline(always)]
    fn tap_masks<const S: usize>(self, s: isize, iw: usize) -> [__mmask16; 3] {
        let m = |s: isize| row_bits(s, iw, 16) as __mmask16;
        if S == 2 {
            [m(s), m(s + 16), m(s + 32) & 1]
        } else {
            [m(s), m(s + 1), m(s + 2)]
        }
    }
    #[inline(always)]
    unsafe fn taps<const S: usize>(self, p: *const f32, m: &[__mmask16; 3]) -> [__m512; 3] {
        // SAFETY: each load reads only the lanes its mask keeps, columns inside the row
        // (contract); AVX-512F is available.
        unsafe {
            if S == 2 {
                // The 33 columns under sixteen outputs: two permutes split the first 32 into
                // even and odd columns (taps 0 and 1), one lane shift of the even ones with
                // column 32 gives tap 2.
                let even =
                    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
                let odd =
                    _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
                let a0 = _mm512_maskz_loadu_ps(m[0], p);
                let a1 = _mm512_maskz_loadu_ps(m[1], p.wrapping_add(16));
                let a2 = _mm512_maskz_loadu_ps(m[2], p.wrapping_add(32));
                let t0 = _mm512_permutex2var_ps(a0, even, a1);
                let t1 = _mm512_permutex2var_ps(a0, odd, a1);
                let t2 = _mm512_castsi512_ps(_mm512_alignr_epi32(
                    _mm512_castps_si512(a2),
                    _mm512_castps_si512(t0),
                    1,
                ));
                [t0, t1, t2]
            } else {
                [
                    _mm512_maskz_loadu_ps(m[0], p),
                    _mm512_maskz_loadu_ps(m[1], p.wrapping_add(1)),
                    _mm512_maskz_loadu_ps(m[2], p.wrapping_add(2)),
                ]
            }
        }
    }
    #[inline(always)]
    fn load_reach<const S: usize>(self) -> usize {
        // Stride 2 reads one column of its third load.
        S * 15 + 3
    }
    #[inline(always)]
    unsafe fn taps_full<const S: usize>(self, p: *const f32) -> [__m512; 3] {
        let m = if S == 2 { [!0, !0, 1] } else { [!0; 3] };
        // SAFETY: the masks keep columns s..s + load_reach, readable (contract).
        unsafe { self.taps::<S>(p, &m) }
    }
    #[inline(always)]
    fn in_order<const S: usize>(self, v: __m512) -> __m512 {
        v
    }
}

impl Avx2 {
    /// The three taps from the loads of [`DwSimd::taps`]: at stride 1 the first three, at
    /// stride 2 columns `s..s + 16` split into even and odd (taps 0 and 1) and the even ones of
    /// `s + 2..s + 18` (tap 2), with in-lane shuffles: lanes hold outputs 0, 1, 4, 5, 2, 3, 6, 7.
    #[inline(always)]
    fn split<const S: usize>(self, [a, b, c, d]: [__m256; 4]) -> [__m256; 3] {
        if S != 2 {
            return [a, b, c];
        }
        // SAFETY: AVX is available (`self`).
        unsafe {
            [
                _mm256_shuffle_ps::<0x88>(a, b),
                _mm256_shuffle_ps::<0xdd>(a, b),
                _mm256_shuffle_ps::<0x88>(c, d),
            ]
        }
    }
}

/// AVX2's [`DwSimd::TapMasks`]: one mask per load, and whether all of them are full (then the
/// loads are plain ones).
#[derive(Clone, Copy)]
pub(super) struct Avx2TapMasks {
    masks: [__m256i; 4],
    full: bool,
}

impl DwSimd for Avx2 {
    type TapMasks = Avx2TapMasks;

    #[inline(always)]
    fn tap_masks<const S: usize>(self, s: isize, iw: usize) -> Avx2TapMasks {
        // Stride 2 loads columns s, s + 8 (taps 0 and 1) and s + 2, s + 10 (tap 2). (Loops,
        // not closures: a closure's intrinsics would not be inlined.)
        let at: [isize; 4] = if S == 2 { [0, 8, 2, 10] } else { [0, 1, 2, 0] };
        let mut m = Avx2TapMasks {
            // SAFETY: AVX is available (`self`).
            masks: [unsafe { _mm256_setzero_si256() }; 4],
            full: true,
        };
        for (mask, &a) in m.masks.iter_mut().zip(&at) {
            let bits = row_bits(s + a, iw, 8);
            *mask = lane_mask(self, bits);
            m.full &= bits == 0xff;
        }
        m
    }
    #[inline(always)]
    unsafe fn taps<const S: usize>(self, p: *const f32, m: &Avx2TapMasks) -> [__m256; 3] {
        if m.full {
            // SAFETY: a full mask means every lane is a column of the row (contract).
            return unsafe { self.taps_full::<S>(p) };
        }
        let at: [usize; 4] = if S == 2 { [0, 8, 2, 10] } else { [0, 1, 2, 0] };
        // SAFETY: each masked load reads only the columns inside the row (contract;
        // masked-off lanes do not fault); AVX is available.
        let l: [__m256; 4] = unsafe {
            [
                _mm256_maskload_ps(p.wrapping_add(at[0]), m.masks[0]),
                _mm256_maskload_ps(p.wrapping_add(at[1]), m.masks[1]),
                _mm256_maskload_ps(p.wrapping_add(at[2]), m.masks[2]),
                _mm256_maskload_ps(p.wrapping_add(at[3]), m.masks[3]),
            ]
        };
        self.split::<S>(l)
    }
    #[inline(always)]
    fn load_reach<const S: usize>(self) -> usize {
        if S == 2 {
            18
        } else {
            10
        }
    }
    #[inline(always)]
    unsafe fn taps_full<const S: usize>(self, p: *const f32) -> [__m256; 3] {
        // SAFETY: columns s..s + load_reach are readable (contract); AVX is available.
        let l: [__m256; 4] = unsafe {
            if S == 2 {
                [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(2)),
                    _mm256_loadu_ps(p.add(10)),
                ]
            } else {
                let a = _mm256_loadu_ps(p);
                [a, _mm256_loadu_ps(p.add(1)), _mm256_loadu_ps(p.add(2)), a]
            }
        };
        self.split::<S>(l)
    }
    #[inline(always)]
    fn in_order<const S: usize>(self, v: __m256) -> __m256 {
        if S != 2 {
            return v;
        }
        // SAFETY: AVX2 is available (`self`). Pairs (0, 1), (4, 5), (2, 3), (6, 7) -> in order.
        unsafe { _mm256_castpd_ps(_mm256_permute4x64_pd::<0xd8>(_mm256_castps_pd(v))) }
    }
}
