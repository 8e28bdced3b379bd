//! The few-input-channel convolution's multiply-adds, generic over the vector width: one output
//! row of every channel per call, a register block of [`OC_BLOCK`] channels x `C` column
//! vectors at a time, each tap one vector load per column vector and one broadcast weight per
//! channel. Thin `#[target_feature]` entry points per ISA choose the widest `C`.

use std::ops::Range;

use super::few_channels::OC_BLOCK;
use super::row_band::Clamp;
use super::simd::{Avx2, Avx512, Isa};

/// What every row of a band shares.
pub(super) struct Row<'a> {
    /// The band's input row under the output row; tap `t` reads `src[taps[t]..]`.
    pub src: &'a [f32],
    pub taps: &'a [usize],
    /// The largest tap offset.
    pub reach: usize,
    /// Interleaved by blocks of [`OC_BLOCK`] channels (see `FewChannelWeights`).
    pub weights: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub clamp: Clamp,
    /// Channel `c`'s row starts at `out + at + c * plane`, `ow` columns.
    pub out: *mut f32,
    pub at: usize,
    pub plane: usize,
    pub channels: usize,
    pub ow: usize,
}

/// One output row of channels `block` on AVX-512: 4 x 5 column vectors of 16 (20 of 32
/// registers accumulate).
///
/// # Safety
/// As [`Row::channels`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_avx512(isa: Avx512, row: &Row, block: Range<usize>) {
    // SAFETY: the caller's contract; the token proves AVX-512F.
    unsafe { row.channels::<Avx512, 5>(isa, block) }
}

/// As [`row_avx512`] on AVX2 + FMA: 4 x 2 column vectors of 8 (8 of 16 registers
/// accumulate; 4 x 3 would take all 16, which spilled in the direct kernel).
///
/// # Safety
/// As [`Row::channels`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn row_avx2(isa: Avx2, row: &Row, block: Range<usize>) {
    // SAFETY: the caller's contract; the token proves AVX2 and FMA.
    unsafe { row.channels::<Avx2, 2>(isa, block) }
}

impl Row<'_> {
    /// One output row (`ow` columns) of channels `c` in `block` (which starts on a multiple of
    /// [`OC_BLOCK`]), `c < channels`: `out[at + c * plane + j] = clamp(bias[c] + sum over taps
    /// t of weights[(c / OC_BLOCK * taps + t) * OC_BLOCK + c % OC_BLOCK] * src[taps[t] + j])`.
    /// A register block of [`OC_BLOCK`] channels x up to `C` column vectors at a time, each
    /// block of channels finishing its whole row before the next (written in one go, its cache
    /// lines are filled once).
    ///
    /// # Safety
    /// `out + at + c * plane` is valid for `ow` writes for every channel of `block`, written by
    /// no other thread meanwhile.
    #[inline(always)]
    unsafe fn channels<I: Isa, const C: usize>(&self, isa: I, block: Range<usize>) {
        let lanes = I::LANES;
        let vectors = self.ow.div_ceil(lanes);
        // Every tap's loads stay inside `src`.
        assert!(self.taps.iter().all(|&t| t <= self.reach));
        assert!(self.reach + vectors * lanes <= self.src.len());
        let depth = self.taps.len();
        assert!(self.weights.len() >= self.channels.div_ceil(OC_BLOCK) * depth * OC_BLOCK);
        assert!(self.bias.is_none_or(|b| b.len() >= self.channels));
        assert!(block.start.is_multiple_of(OC_BLOCK) && block.end <= self.channels);
        let chunks = vectors.div_ceil(C);
        for oc0 in block.step_by(OC_BLOCK) {
            let mut v0 = 0;
            for k in 0..chunks {
                // Chunks as even as possible: the first `vectors % chunks` get one more.
                let count = vectors / chunks + usize::from(k < vectors % chunks);
                let cols = (self.ow - v0 * lanes).min(count * lanes);
                // SAFETY: the reads were asserted above; the writes are the caller's contract.
                unsafe {
                    match count {
                        1 => self.run::<I, 1>(isa, oc0, v0, cols),
                        2 => self.run::<I, 2>(isa, oc0, v0, cols),
                        3 => self.run::<I, 3>(isa, oc0, v0, cols),
                        4 => self.run::<I, 4>(isa, oc0, v0, cols),
                        _ => self.run::<I, 5>(isa, oc0, v0, cols),
                    }
                }
                v0 += count;
            }
        }
    }

    /// Channels `oc0..oc0 + OC_BLOCK` (those below `channels`), vectors `v0..v0 + N` holding
    /// columns `v0 * LANES..` up to `cols` of them.
    ///
    /// # Safety
    /// As [`Row::channels`], for vectors inside the row.
    #[inline(always)]
    unsafe fn run<I: Isa, const N: usize>(&self, isa: I, oc0: usize, v0: usize, cols: usize) {
        const R: usize = OC_BLOCK;
        let lanes = I::LANES;
        let depth = self.taps.len();
        let tail = cols - (N - 1) * lanes;
        let (lo, hi) = (isa.splat(self.clamp.lo), isa.splat(self.clamp.hi));
        let valid = (self.channels - oc0).min(R);
        // The bias (zero past the last channel) as a plain array: with the accumulators
        // started conditionally LLVM kept them in memory, a store after every multiply-add.
        let mut start = [0.0f32; R];
        if let Some(bias) = self.bias {
            start[..valid].copy_from_slice(&bias[oc0..oc0 + valid]);
        }
        let mut acc = [[isa.splat(0.0); N]; R];
        for (a, &s) in acc.iter_mut().zip(&start) {
            *a = [isa.splat(s); N];
        }
        let w = self.weights[oc0 / R * depth * R..][..depth * R].as_ptr();
        let src = self.src.as_ptr().wrapping_add(v0 * lanes);
        for (t, &off) in self.taps.iter().enumerate() {
            let mut x = [isa.splat(0.0); N];
            for (c, x) in x.iter_mut().enumerate() {
                // SAFETY: `off + (v0 + N) * LANES <= src.len()` (asserted by `channels`).
                *x = unsafe { isa.load(src.add(off + c * lanes)) };
            }
            for (i, a) in acc.iter_mut().enumerate() {
                // SAFETY: the block's weights hold `depth * R` values.
                let w = isa.splat(unsafe { *w.add(t * R + i) });
                for (a, &x) in a.iter_mut().zip(&x) {
                    *a = isa.fmadd(x, w, *a);
                }
            }
        }
        for (i, a) in acc.iter().enumerate().take(valid) {
            let o = self
                .out
                .wrapping_add(self.at + (oc0 + i) * self.plane + v0 * lanes);
            for (c, &v) in a.iter().enumerate() {
                let v = isa.clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: columns c * LANES.. of this row are inside the `cols` the caller
                // may write; the last vector is cut to them.
                unsafe {
                    if c + 1 < N {
                        isa.store(o.add(c * lanes), v);
                    } else {
                        isa.store_first(o.add(c * lanes), tail, v);
                    }
                }
            }
        }
    }
}
