//! The 3x3 stride-1 depthwise kernel for small planes (MobileNetV2's 14x14 and 7x7) on AVX-512:
//! a plane's outputs taken sixteen consecutive *flat* positions at a time, whatever its width.
//!
//! With stride 1 and input rows as wide as output rows ("same" padding), tap `(ky, kx)` of flat
//! output `q = oy * ow + ox` reads flat input `q + (ky - pad_top) * iw + kx - pad_left`: one
//! unaligned load per tap for sixteen outputs, across row ends. The lanes whose tap falls in the
//! padding (a column off the row's ends, which the flat load reads from the neighbouring row,
//! or a row off the plane) are masked off; the masks depend only on the geometry and are made
//! once per call ([`Masks`]). A 7x7 plane is four vectors instead of seven mostly empty rows,
//! and unlike the blocked kernel nothing is transposed.

use std::arch::x86_64::*;

use super::depthwise_direct_plane::Plane;
use super::few_channels_avx512::clamp;
use super::row_band::Clamp;

const LANES: usize = 16;
const TAPS: usize = 9;
/// Most vectors of flat outputs in a plane (1024 outputs: 32x32).
pub(super) const MAX_VECTORS: usize = 64;
/// Output vectors held in registers at once (with the nine broadcast weights).
const CHUNK: usize = 8;

/// Whether the flat kernel takes a plane of this geometry: stride 1, input rows as wide as the
/// output rows, at most [`MAX_VECTORS`] vectors of outputs, padding before at most one.
pub(super) fn fits(g: &Plane) -> bool {
    g.stride == 1
        && g.iw == g.ow
        && g.pad_left <= 1
        && g.pad_top <= 1
        && g.oh > 0
        && g.ow > 0
        && (g.oh * g.ow).div_ceil(LANES) <= MAX_VECTORS
}

/// Per tap and output vector, the lanes whose input is inside the plane; per output vector,
/// the lanes that are outputs (the last vector may be partial).
pub(super) struct Masks {
    taps: [[u16; MAX_VECTORS]; TAPS],
    store: [u16; MAX_VECTORS],
    offsets: [isize; TAPS],
    vectors: usize,
}

impl Masks {
    /// The masks of geometry `g` (one [`fits`] accepted).
    pub(super) fn new(g: &Plane) -> Self {
        assert!(fits(g));
        let out_len = g.oh * g.ow;
        let mut m = Masks {
            taps: [[0; MAX_VECTORS]; TAPS],
            store: [0; MAX_VECTORS],
            offsets: [0; TAPS],
            vectors: out_len.div_ceil(LANES),
        };
        for (t, off) in m.offsets.iter_mut().enumerate() {
            let (dy, dx) = (
                (t / 3) as isize - g.pad_top as isize,
                (t % 3) as isize - g.pad_left as isize,
            );
            *off = dy * g.iw as isize + dx;
        }
        for v in 0..m.vectors {
            for l in 0..LANES {
                let q = v * LANES + l;
                if q >= out_len {
                    continue;
                }
                m.store[v] |= 1 << l;
                let (oy, ox) = ((q / g.ow) as isize, (q % g.ow) as isize);
                for t in 0..TAPS {
                    let iy = oy + (t / 3) as isize - g.pad_top as isize;
                    let ix = ox + (t % 3) as isize - g.pad_left as isize;
                    if (0..g.ih as isize).contains(&iy) && (0..g.iw as isize).contains(&ix) {
                        m.taps[t][v] |= 1 << l;
                    }
                }
            }
        }
        m
    }
}

/// `out[q] = clamp(start + sum over taps t of k[t] * x[q + offset(t)])` over the plane, the
/// padding read as zeros, for the geometry `masks` was made for.
///
/// # Safety
/// AVX-512F is available. (Lengths are asserted: `x` holds `ih * iw`, `out` `oh * ow` of the
/// geometry of `masks`; every load reads only lanes its mask keeps, which are inside `x`.)
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn plane(
    x: &[f32],
    g: &Plane,
    masks: &Masks,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    assert!(fits(g) && x.len() == g.ih * g.iw && out.len() == g.oh * g.ow);
    assert!(masks.vectors == out.len().div_ceil(LANES));
    let chunks = masks.vectors.div_ceil(CHUNK);
    let mut v0 = 0;
    for c in 0..chunks {
        // Chunks as even as possible: the first `vectors % chunks` get one more.
        let count = masks.vectors / chunks + usize::from(c < masks.vectors % chunks);
        // SAFETY: forwarded; `v0 + count <= vectors` (the counts add up to `vectors`).
        unsafe {
            match count {
                1 => chunk::<1>(x, masks, v0, k, start, clamp_to, out),
                2 => chunk::<2>(x, masks, v0, k, start, clamp_to, out),
                3 => chunk::<3>(x, masks, v0, k, start, clamp_to, out),
                4 => chunk::<4>(x, masks, v0, k, start, clamp_to, out),
                5 => chunk::<5>(x, masks, v0, k, start, clamp_to, out),
                6 => chunk::<6>(x, masks, v0, k, start, clamp_to, out),
                7 => chunk::<7>(x, masks, v0, k, start, clamp_to, out),
                _ => chunk::<8>(x, masks, v0, k, start, clamp_to, out),
            }
        }
        v0 += count;
    }
}

/// Output vectors `v0..v0 + C` of [`plane`].
///
/// # Safety
/// As [`plane`], with `v0 + C <= masks.vectors` and the lengths it asserts.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn chunk<const C: usize>(
    x: &[f32],
    masks: &Masks,
    v0: usize,
    k: &[f32; 9],
    start: f32,
    clamp_to: Clamp,
    out: &mut [f32],
) {
    let (lo, hi) = (_mm512_set1_ps(clamp_to.lo), _mm512_set1_ps(clamp_to.hi));
    let mut acc = [_mm512_set1_ps(start); C];
    let base = x.as_ptr();
    for ((&kt, &off), tap_masks) in k.iter().zip(&masks.offsets).zip(&masks.taps) {
        let w = _mm512_set1_ps(kt);
        // This tap's input for output vector v0, then one vector further per output vector.
        let p = base.wrapping_offset((v0 * LANES) as isize + off);
        let m: &[u16; C] = tap_masks[v0..v0 + C].try_into().expect("C masks");
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: the mask keeps the lanes whose flat input `q + offset(t)` is a position
            // of the plane (row and column inside it), so inside `x`; the others are not read.
            let xv = unsafe { _mm512_maskz_loadu_ps(m[j], p.wrapping_add(j * LANES)) };
            *a = _mm512_fmadd_ps(xv, w, *a);
        }
    }
    for (j, &a) in acc.iter().enumerate() {
        let v = v0 + j;
        // SAFETY: the store mask keeps the lanes below `oh * ow` = out.len() (asserted by
        // `plane`).
        unsafe {
            _mm512_mask_storeu_ps(
                out.as_mut_ptr().add(v * LANES),
                masks.store[v],
                clamp(clamp_to.kind, a, lo, hi),
            )
        };
    }
}
