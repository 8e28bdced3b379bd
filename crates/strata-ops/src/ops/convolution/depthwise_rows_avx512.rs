//! The row-wise depthwise kernel's multiply-adds for f32 on AVX-512: all output rows of one
//! band of one plane in a call, a register block of `R` rows x `C` column vectors at a time
//! (eight accumulators, more rows when the rows are narrow), the channel's tap weight broadcast
//! once per tap and block.

use std::arch::x86_64::*;

use super::few_channels_avx512::clamp;
use super::row_band::{Clamp, LANES};

/// Column vectors of a row computed together, at most.
const MAX_CHUNK: usize = 4;

/// `out[oy * ow + j] = clamp(start + sum over taps t of k[t] * buf[oy * row_step + taps[t] +
/// j])` for `oy < rows`, `j < ow`.
///
/// # Safety
/// AVX-512F is available and every tap offset is at most `reach` (the reads then stay inside
/// `buf`, which is checked).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn band(
    buf: &[f32],
    (row_step, taps, reach): (usize, &[usize], usize),
    k: &[f32],
    start: f32,
    clamp: Clamp,
    out: &mut [f32],
    (rows, ow): (usize, usize),
) {
    let vectors = ow.div_ceil(LANES);
    assert!(k.len() == taps.len() && out.len() >= rows * ow && rows > 0 && ow > 0);
    assert!((rows - 1) * row_step + reach + vectors * LANES <= buf.len());
    let tail = ow - (vectors - 1) * LANES;
    let args = Args {
        buf: buf.as_ptr(),
        row_step,
        taps,
        k,
        start,
        clamp,
        out: out.as_mut_ptr(),
        ow,
    };
    let chunks = vectors.div_ceil(MAX_CHUNK);
    let mut v0 = 0;
    for c in 0..chunks {
        let count = vectors / chunks + usize::from(c < vectors % chunks);
        let last = v0 + count == vectors;
        let mask: __mmask16 = if !last || tail == LANES {
            0xffff
        } else {
            (1u16 << tail) - 1
        };
        let mut oy = 0;
        // SAFETY: rows oy.. of the block are below `rows`, the columns inside the row's
        // vectors (the last masked to `ow`); the reads were checked above.
        unsafe {
            // Blocks of `r` rows while they fit, then halves down to single rows.
            macro_rules! rows_of {
                ($c:literal, $($r:literal),*) => {{
                    $(
                        while rows - oy >= $r {
                            args.run::<$r, $c>(oy, v0, mask);
                            oy += $r;
                        }
                    )*
                }};
            }
            match count {
                1 => rows_of!(1, 8, 4, 2, 1),
                2 => rows_of!(2, 4, 2, 1),
                3 => rows_of!(3, 2, 1),
                _ => rows_of!(4, 2, 1),
            }
        }
        v0 += count;
    }
}

struct Args<'a> {
    buf: *const f32,
    row_step: usize,
    taps: &'a [usize],
    k: &'a [f32],
    start: f32,
    clamp: Clamp,
    out: *mut f32,
    ow: usize,
}

impl Args<'_> {
    /// Rows `oy..oy + R`, vectors `v0..v0 + C` (the last stored under `mask`).
    ///
    /// # Safety
    /// As [`band`], for rows and vectors inside the band.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn run<const R: usize, const C: usize>(&self, oy: usize, v0: usize, mask: __mmask16) {
        let mut acc = [[_mm512_set1_ps(self.start); C]; R];
        let first = self.buf.wrapping_add(oy * self.row_step + v0 * LANES);
        for (&at, &w) in self.taps.iter().zip(self.k) {
            let w = _mm512_set1_ps(w);
            for (i, a) in acc.iter_mut().enumerate() {
                let p = first.wrapping_add(i * self.row_step + at);
                for (c, a) in a.iter_mut().enumerate() {
                    // SAFETY: inside `buf` (the caller's contract).
                    let x = unsafe { _mm512_loadu_ps(p.add(c * LANES)) };
                    *a = _mm512_fmadd_ps(x, w, *a);
                }
            }
        }
        let (lo, hi) = (_mm512_set1_ps(self.clamp.lo), _mm512_set1_ps(self.clamp.hi));
        for (i, a) in acc.iter().enumerate() {
            let o = self.out.wrapping_add((oy + i) * self.ow + v0 * LANES);
            for (c, &v) in a.iter().enumerate() {
                let v = clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: inside the output row (the last vector masked to it).
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
