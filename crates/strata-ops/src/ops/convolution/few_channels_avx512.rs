//! The few-input-channel convolution's multiply-adds for f32 on AVX-512: one output row of
//! every channel per call, a register block of [`OC_BLOCK`] channels x `C` column vectors at a
//! time, each tap one vector load per column vector and one broadcast weight per channel.

use std::arch::x86_64::*;
use std::ops::Range;

use super::few_channels_block::{MAX_VECTORS, OC_BLOCK};
use super::row_band::{Clamp, ClampKind, LANES};

/// One output row (`ow` columns) of channels `c` in `block` (which starts on a multiple of
/// [`OC_BLOCK`]), `c < channels`: `out[at + c * plane + j] = clamp(bias[c] + sum over taps t of
/// weights[(c / OC_BLOCK * taps + t) * OC_BLOCK + c % OC_BLOCK] * src[taps[t] + j])`. A register
/// block of [`OC_BLOCK`] channels x up to [`MAX_VECTORS`] column vectors at a time, each block
/// of channels finishing its whole row before the next (written in one go, its cache lines are
/// filled once).
///
/// # Safety
/// AVX-512F is available; every tap offset is at most `reach`; `out + at + c * plane` is valid
/// for `ow` writes for every channel of the block, written by no other thread meanwhile.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row(
    src: &[f32],
    (taps, reach): (&[usize], usize),
    weights: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: *mut f32,
    (at, plane, channels): (usize, usize, usize),
    block: Range<usize>,
    ow: usize,
) {
    let vectors = ow.div_ceil(LANES);
    // Every tap's loads stay inside `src` (taps[t] <= reach, the caller's contract).
    assert!(reach + vectors * LANES <= src.len());
    assert!(weights.len() >= channels.div_ceil(OC_BLOCK) * taps.len() * OC_BLOCK);
    assert!(bias.is_none_or(|b| b.len() >= channels));
    assert!(block.start.is_multiple_of(OC_BLOCK) && block.end <= channels);
    let args = Args {
        src: src.as_ptr(),
        taps,
        weights,
        bias,
        clamp,
        out,
        at,
        plane,
        channels,
    };
    let chunks = vectors.div_ceil(MAX_VECTORS);
    for oc0 in block.step_by(OC_BLOCK) {
        let mut v0 = 0;
        for k in 0..chunks {
            // Chunks as even as possible: the first `vectors % chunks` get one more.
            let count = vectors / chunks + usize::from(k < vectors % chunks);
            let cols = (ow - v0 * LANES).min(count * LANES);
            // SAFETY: the reads were asserted above; the writes are the caller's contract.
            unsafe {
                match count {
                    1 => args.run::<1>(oc0, v0, cols),
                    2 => args.run::<2>(oc0, v0, cols),
                    3 => args.run::<3>(oc0, v0, cols),
                    4 => args.run::<4>(oc0, v0, cols),
                    _ => args.run::<5>(oc0, v0, cols),
                }
            }
            v0 += count;
        }
    }
}

struct Args<'a> {
    src: *const f32,
    taps: &'a [usize],
    weights: &'a [f32],
    bias: Option<&'a [f32]>,
    clamp: Clamp,
    out: *mut f32,
    at: usize,
    plane: usize,
    channels: usize,
}

impl Args<'_> {
    /// Channels `oc0..oc0 + OC_BLOCK` (those below `channels`), vectors `v0..v0 + C` holding
    /// columns `v0 * LANES..` up to `cols` of them.
    ///
    /// # Safety
    /// As [`row`], for vectors inside the row.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn run<const C: usize>(&self, oc0: usize, v0: usize, cols: usize) {
        const R: usize = OC_BLOCK;
        let depth = self.taps.len();
        let tail = cols - (C - 1) * LANES;
        let mask: __mmask16 = if tail >= LANES {
            0xffff
        } else {
            (1u16 << tail) - 1
        };
        let (lo, hi) = (_mm512_set1_ps(self.clamp.lo), _mm512_set1_ps(self.clamp.hi));
        let valid = (self.channels - oc0).min(R);
        // The bias (zero past the last channel) as a plain array: with the accumulators
        // started conditionally LLVM kept them in memory, a store after every multiply-add.
        let mut start = [0.0f32; R];
        if let Some(bias) = self.bias {
            start[..valid].copy_from_slice(&bias[oc0..oc0 + valid]);
        }
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for (a, &s) in acc.iter_mut().zip(&start) {
            *a = [_mm512_set1_ps(s); C];
        }
        let w = self.weights[oc0 / R * depth * R..][..depth * R].as_ptr();
        let src = self.src.wrapping_add(v0 * LANES);
        for (t, &off) in self.taps.iter().enumerate() {
            let mut x = [_mm512_setzero_ps(); C];
            for (c, x) in x.iter_mut().enumerate() {
                // SAFETY: `off + (v0 + C) * LANES <= src.len()` (asserted by `row`).
                *x = unsafe { _mm512_loadu_ps(src.add(off + c * LANES)) };
            }
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: the block's weights hold `depth * R` values.
                let w = _mm512_set1_ps(unsafe { *w.add(t * R + i) });
                for (a, &x) in a.iter_mut().zip(&x) {
                    *a = _mm512_fmadd_ps(x, w, *a);
                }
            }
        }
        for (i, a) in acc.iter().enumerate().take(valid) {
            let o = self
                .out
                .wrapping_add(self.at + (oc0 + i) * self.plane + v0 * LANES);
            for (c, &v) in a.iter().enumerate() {
                let v = clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: columns c * LANES.. of this row are inside the `cols` the caller
                // may write; the last vector is masked to them.
                unsafe {
                    if c + 1 < C {
                        _mm512_storeu_ps(o.add(c * LANES), v);
                    } else {
                        _mm512_mask_storeu_ps(o.add(c * LANES), mask, v);
                    }
                }
            }
        }
    }
}

/// `v` clamped to `[lo, hi]` the way `kind` says: the activation the row kernels apply in
/// registers as they store.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn clamp(kind: ClampKind, v: __m512, lo: __m512, hi: __m512) -> __m512 {
    match kind {
        ClampKind::None => v,
        // max(v, lo): a NaN becomes lo, as Relu's `x > 0 ? x : 0`.
        ClampKind::NanToLow => _mm512_min_ps(_mm512_max_ps(v, lo), hi),
        // max(lo, v): a NaN stays NaN, as Clip's comparisons.
        ClampKind::KeepNan => _mm512_min_ps(hi, _mm512_max_ps(lo, v)),
    }
}
