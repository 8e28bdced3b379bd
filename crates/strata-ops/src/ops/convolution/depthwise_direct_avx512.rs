//! The 3x3 depthwise kernel's plane loop for f32 on AVX-512 at stride 1 or 2: sixteen outputs
//! of a row per vector, read straight from the NCHW input row (no band copy). At stride 2 the
//! 33 input columns under sixteen outputs come in two loads plus one masked element; two
//! two-source permutes split them into even and odd columns (taps 0 and 1) and one lane shift
//! of the even columns gives tap 2. At stride 1 the three taps are three unaligned loads.
//! Padding is masked loads (left and right) and skipped rows (top and bottom).

use std::arch::x86_64::*;

use super::few_channels_avx512::clamp;
use super::row_band::Clamp;

const LANES: usize = 16;
/// Output vectors of a row held in registers at once.
const CHUNK: usize = 4;

/// One plane's geometry: input `ih x iw`, output `oh x ow`, padding before (0 or 1), stride
/// (1 or 2, both axes).
#[derive(Clone, Copy, Debug)]
pub(super) struct Plane {
    pub stride: usize,
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub pad_top: usize,
    pub pad_left: usize,
}

/// The load mask of input columns `s..s + 16`: the lanes inside `0..iw`.
fn mask_at(s: isize, iw: usize) -> __mmask16 {
    let lo = (-s).clamp(0, 16);
    let hi = (iw as isize - s).clamp(0, 16);
    if hi <= lo {
        0
    } else {
        let bits = |n: isize| if n >= 16 { u32::MAX } else { (1u32 << n) - 1 };
        (bits(hi) & !bits(lo)) as __mmask16
    }
}

/// `out[oy * ow + ox] = clamp(start + sum over ky, kx of k[ky * 3 + kx] * x[s oy + ky -
/// pad_top][s ox + kx - pad_left])` with `s` the stride, padding read as zeros.
///
/// # Safety
/// AVX-512F is available. (Lengths are asserted: `x` holds `ih * iw`, `out` `oh * ow`; reads
/// past any edge are masked off or skipped, so any padding after the plane works.)
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn plane(
    x: &[f32],
    g: Plane,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    assert!(x.len() == g.ih * g.iw && out.len() == g.oh * g.ow);
    assert!(g.pad_top <= 1 && g.pad_left <= 1 && g.oh > 0 && g.ow > 0);
    // SAFETY: AVX-512F is available (the caller's contract); lengths were asserted.
    unsafe {
        match g.stride {
            1 => strided::<1>(x, g, k, start, clamp_to, out),
            2 => strided::<2>(x, g, k, start, clamp_to, out),
            s => panic!("stride {s} is not 1 or 2"),
        }
    }
}

/// [`plane`] at stride `S`.
///
/// # Safety
/// As [`plane`], with its lengths asserted.
#[target_feature(enable = "avx512f")]
unsafe fn strided<const S: usize>(
    x: &[f32],
    g: Plane,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let w: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(k[t]));
    let (lo, hi) = (_mm512_set1_ps(clamp_to.lo), _mm512_set1_ps(clamp_to.hi));
    let vectors = g.ow.div_ceil(LANES);
    let base = x.as_ptr();
    let dst = out.as_mut_ptr();
    let mut v0 = 0;
    while v0 < vectors {
        let count = CHUNK.min(vectors - v0);
        // Per vector: the masks of its three loads and of its store (rows share them).
        let mut masks = [[0 as __mmask16; 4]; CHUNK];
        for (j, m) in masks[..count].iter_mut().enumerate() {
            let ox0 = (v0 + j) * LANES;
            let s = (S * ox0) as isize - g.pad_left as isize;
            let stored = (g.ow - ox0).min(LANES);
            let store = ((1u32 << stored) - 1) as __mmask16;
            *m = if S == 2 {
                [
                    mask_at(s, g.iw),
                    mask_at(s + 16, g.iw),
                    mask_at(s + 32, g.iw) & 1,
                    store,
                ]
            } else {
                [
                    mask_at(s, g.iw),
                    mask_at(s + 1, g.iw),
                    mask_at(s + 2, g.iw),
                    store,
                ]
            };
        }
        for oy in 0..g.oh {
            let mut acc = [_mm512_set1_ps(start); CHUNK];
            for ky in 0..3 {
                let iy = (S * oy + ky) as isize - g.pad_top as isize;
                if iy < 0 || iy >= g.ih as isize {
                    continue;
                }
                let row = base.wrapping_add(iy as usize * g.iw);
                let (w0, w1, w2) = (w[ky * 3], w[ky * 3 + 1], w[ky * 3 + 2]);
                for (j, a) in acc[..count].iter_mut().enumerate() {
                    let s = (S * (v0 + j) * LANES) as isize - g.pad_left as isize;
                    let m = masks[j];
                    let p = row.wrapping_offset(s);
                    let (t0, t1, t2) = if S == 2 {
                        // SAFETY: each load reads only the lanes its mask keeps, which are
                        // columns inside 0..iw of input row iy (< ih), so inside `x`.
                        let (a0, a1, a2) = unsafe {
                            (
                                _mm512_maskz_loadu_ps(m[0], p),
                                _mm512_maskz_loadu_ps(m[1], p.wrapping_add(16)),
                                _mm512_maskz_loadu_ps(m[2], p.wrapping_add(32)),
                            )
                        };
                        let t0 = _mm512_permutex2var_ps(a0, even, a1);
                        let t1 = _mm512_permutex2var_ps(a0, odd, a1);
                        let t2 = _mm512_castsi512_ps(_mm512_alignr_epi32(
                            _mm512_castps_si512(a2),
                            _mm512_castps_si512(t0),
                            1,
                        ));
                        (t0, t1, t2)
                    } else {
                        // SAFETY: as above.
                        unsafe {
                            (
                                _mm512_maskz_loadu_ps(m[0], p),
                                _mm512_maskz_loadu_ps(m[1], p.wrapping_add(1)),
                                _mm512_maskz_loadu_ps(m[2], p.wrapping_add(2)),
                            )
                        }
                    };
                    *a = _mm512_fmadd_ps(t0, w0, *a);
                    *a = _mm512_fmadd_ps(t1, w1, *a);
                    *a = _mm512_fmadd_ps(t2, w2, *a);
                }
            }
            for (j, &a) in acc[..count].iter().enumerate() {
                let at = oy * g.ow + (v0 + j) * LANES;
                // SAFETY: the store mask keeps columns below ow of output row oy < oh.
                unsafe {
                    _mm512_mask_storeu_ps(
                        dst.wrapping_add(at),
                        masks[j][3],
                        clamp(clamp_to.kind, a, lo, hi),
                    )
                };
            }
        }
        v0 += count;
    }
}
