//! The stride-1 direct convolution's multiply-adds for f32 on AVX-512: a register block of
//! [`OC_BLOCK`] output channels x `C` vectors of 16 consecutive flattened positions, its
//! accumulators kept over every input channel and tap, then compressed to the valid lanes and
//! stored with the epilogue.

use std::arch::x86_64::*;

use super::direct_stride1::OC_BLOCK;
use super::few_channels_avx512::clamp;
use super::row_band::{Clamp, LANES};

/// Where one vector of 16 flattened positions goes: the lanes in `mask` (the others fall on
/// the padding columns or past the band) are the outputs `at..at + mask.count_ones()` of every
/// channel plane, in order.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Store {
    pub mask: u16,
    pub at: usize,
}

/// What every register block of one band shares.
pub(super) struct Block<'a> {
    /// The band: `cin` planes of `plane` elements, flattened positions of row stride `Wp`.
    pub src: &'a [f32],
    pub plane: usize,
    pub cin: usize,
    /// Per tap `(ky, kx)`, its offset from a position (`ky * dy * Wp + kx * dx`).
    pub taps: &'a [usize],
    pub clamp: Clamp,
    /// The output (and residual) of this batch item: `channels` planes of `out_plane`.
    pub out: *mut f32,
    pub residual: Option<&'a [f32]>,
    pub out_plane: usize,
    pub channels: usize,
}

impl Block<'_> {
    /// Channels `oc0..oc0 + OC_BLOCK` (those below `channels`) at the `C` vectors of flattened
    /// positions starting at `q0`: `out[c][stores[v].at + j] = clamp(start[c] + sum over
    /// input channels i and taps t of weights[(i * taps + t) * OC_BLOCK + c - oc0] * src[i *
    /// plane + q0 + 16 v + taps[t] + lane] (+ residual))` for the `j`-th lane set in
    /// `stores[v].mask`.
    ///
    /// # Safety
    /// AVX-512F is available; `out + c * out_plane + stores[v].at` is valid for the vector's
    /// stores for every channel of the block, and written by no other thread meanwhile.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn run<const C: usize>(
        &self,
        oc0: usize,
        q0: usize,
        weights: &[f32],
        start: &[f32; OC_BLOCK],
        stores: &[Store; C],
    ) {
        const R: usize = OC_BLOCK;
        let reach = self.taps.iter().copied().max().unwrap_or(0);
        // Every load stays inside the band and every weight inside the block's.
        assert!(
            self.cin >= 1 && (self.cin - 1) * self.plane + q0 + C * LANES + reach <= self.src.len()
        );
        assert!(weights.len() >= self.cin * self.taps.len() * R);
        if let Some(r) = self.residual {
            assert!(r.len() >= self.channels * self.out_plane);
            for s in stores {
                assert!(s.at + s.mask.count_ones() as usize <= self.out_plane);
            }
        }
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        for (a, &s) in acc.iter_mut().zip(start) {
            *a = [_mm512_set1_ps(s); C];
        }
        let mut w = weights.as_ptr();
        for i in 0..self.cin {
            let src = self.src[i * self.plane + q0..].as_ptr();
            for &off in self.taps {
                let mut x = [_mm512_setzero_ps(); C];
                for (c, x) in x.iter_mut().enumerate() {
                    // SAFETY: inside the band (asserted above).
                    *x = unsafe { _mm512_loadu_ps(src.add(off + c * LANES)) };
                }
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `cin * taps * R` weights (asserted above), R per tap.
                    let wv = _mm512_set1_ps(unsafe { *w.add(r) });
                    for (a, &x) in a.iter_mut().zip(&x) {
                        *a = _mm512_fmadd_ps(x, wv, *a);
                    }
                }
                w = w.wrapping_add(R);
            }
        }
        let (lo, hi) = (_mm512_set1_ps(self.clamp.lo), _mm512_set1_ps(self.clamp.hi));
        let valid = self.channels.saturating_sub(oc0).min(R);
        for (r, a) in acc.iter().enumerate().take(valid) {
            let plane = (oc0 + r) * self.out_plane;
            for (&v, s) in a.iter().zip(stores) {
                if s.mask == 0 {
                    continue;
                }
                // The valid lanes, packed to the low end: consecutive outputs.
                let dense: __mmask16 = ((1u32 << s.mask.count_ones()) - 1) as u16;
                let mut v = _mm512_maskz_compress_ps(s.mask, v);
                let at = plane + s.at;
                if let Some(res) = self.residual {
                    // SAFETY: `at + count <= channels * out_plane` (asserted above).
                    let rv = unsafe { _mm512_maskz_loadu_ps(dense, res.as_ptr().add(at)) };
                    v = _mm512_add_ps(v, rv);
                }
                let v = clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: the caller's contract.
                unsafe { _mm512_mask_storeu_ps(self.out.add(at), dense, v) };
            }
        }
    }
}
