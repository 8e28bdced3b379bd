//! The row-wise depthwise kernel's multiply-adds for f32 on AVX-512 or AVX2: all output rows of
//! one band of one plane in a call, a register block of `R` rows x `C` column vectors at a time
//! (eight accumulators, more rows when the rows are narrow), the channel's tap weight broadcast
//! once per tap and block.

use super::depthwise_simd::entry_points;
use super::row_band::Clamp;
use super::simd::Isa;

/// Column vectors of a row computed together, at most.
const MAX_CHUNK: usize = 4;

entry_points! {
    /// `out[oy * ow + j] = clamp(start + sum over taps t of k[t] * buf[oy * row_step + taps[t]
    /// + j])` for `oy < rows`, `j < ow`. (Reads are checked: every tap offset must be at most
    /// `reach`, and the band's reads then inside `buf`, asserted.)
    rows_band(band_avx512, band_avx2) => band(
        buf: &[f32],
        shape: (usize, &[usize], usize),
        k: &[f32],
        start: f32,
        clamp: Clamp,
        out: &mut [f32],
        size: (usize, usize),
    )
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn band<I: Isa>(
    isa: I,
    buf: &[f32],
    (row_step, taps, reach): (usize, &[usize], usize),
    k: &[f32],
    start: f32,
    clamp: Clamp,
    out: &mut [f32],
    (rows, ow): (usize, usize),
) {
    let vectors = ow.div_ceil(I::LANES);
    assert!(k.len() == taps.len() && out.len() >= rows * ow && rows > 0 && ow > 0);
    assert!(taps.iter().all(|&t| t <= reach));
    assert!((rows - 1) * row_step + reach + vectors * I::LANES <= buf.len());
    let tail = ow - (vectors - 1) * I::LANES;
    let args = Args {
        isa,
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
        let last = if v0 + count == vectors {
            tail
        } else {
            I::LANES
        };
        let mut oy = 0;
        // SAFETY: rows oy.. of the block are below `rows`, the columns inside the row's
        // vectors (the last stored up to `ow`); the reads were checked above.
        unsafe {
            // Blocks of `r` rows while they fit, then halves down to single rows.
            macro_rules! rows_of {
                ($c:literal, $($r:literal),*) => {{
                    $(
                        while rows - oy >= $r {
                            args.run::<$r, $c>(oy, v0, last);
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

struct Args<'a, I> {
    isa: I,
    buf: *const f32,
    row_step: usize,
    taps: &'a [usize],
    k: &'a [f32],
    start: f32,
    clamp: Clamp,
    out: *mut f32,
    ow: usize,
}

impl<I: Isa> Args<'_, I> {
    /// Rows `oy..oy + R`, vectors `v0..v0 + C` (the last storing its first `last` lanes).
    ///
    /// # Safety
    /// As [`band`], for rows and vectors inside the band.
    #[inline(always)]
    unsafe fn run<const R: usize, const C: usize>(&self, oy: usize, v0: usize, last: usize) {
        let (isa, lanes) = (self.isa, I::LANES);
        let mut acc = [[isa.splat(self.start); C]; R];
        let first = self.buf.wrapping_add(oy * self.row_step + v0 * lanes);
        for (&at, &w) in self.taps.iter().zip(self.k) {
            let w = isa.splat(w);
            for (i, a) in acc.iter_mut().enumerate() {
                let p = first.wrapping_add(i * self.row_step + at);
                for (c, a) in a.iter_mut().enumerate() {
                    // SAFETY: inside `buf` (the caller's contract).
                    let x = unsafe { isa.load(p.add(c * lanes)) };
                    *a = isa.fmadd(x, w, *a);
                }
            }
        }
        let (lo, hi) = isa.bounds(self.clamp);
        for (i, a) in acc.iter().enumerate() {
            let o = self.out.wrapping_add((oy + i) * self.ow + v0 * lanes);
            for (c, &v) in a.iter().enumerate() {
                let v = isa.clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: inside the output row (the last vector stored up to it).
                unsafe {
                    if c + 1 < C {
                        isa.store(o.add(c * lanes), v);
                    } else {
                        isa.store_first(o.add(c * lanes), last, v);
                    }
                }
            }
        }
    }
}
