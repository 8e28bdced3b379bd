//! The im2col row unfold of 2-D f32 windows, vectorized (AVX-512 / AVX2): what
//! [`super::im2col`] runs for the common case, a convolution over one plane with any strides,
//! pads and dilations. Against the generic N-d walk it pays one division per call (the tap and
//! the first output row) instead of a per-axis decomposition, a `SmallVec` and an odometer, and
//! its gathers are vector loads: stride 1 a copy, stride 2 two loads and one even-lane shuffle
//! per vector of outputs (`vpermt2ps` on AVX-512). Measured on ResNet-50's 3x3 stride-2 layers
//! (single-layer models, AVX-512, alternating A/B against the generic walk), one thread: 128 <-
//! 128 at 56x56 0.86x, 256 <- 256 at 28x28 0.89x, 512 <- 512 at 14x14 0.91x; two threads 0.88x,
//! 0.89x, 0.93x. The unfold was 18-26 % of those layers' time; what is left of it (about 20 % on
//! the first) waits on the input's loads more than it executes (the rewrite with fewer
//! instructions per segment gained nothing), which is why the packed unfold prefetches the next
//! channel's rows (0.98x of the time without). Tried and dropped: filling the packed block
//! sliver by sliver instead of row by row (one write stream, but 26 channels' rows read per
//! sliver): 1.12x.
//!
//! Stores run ahead: a segment's last vector may spill past its end into positions a later
//! segment (or the same segment's right padding) writes afterwards, so almost every store is a
//! whole vector; only the end of the destination is masked.

use super::depthwise_simd::entry_points;
use super::simd::{Isa, Simd};
use crate::kernels::gemm::BBlock;
use crate::kernels::spatial::WindowGeometry;

/// A 2-D window's geometry as the row unfold needs it (input `ih x iw`, output `oh x ow`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Window2d {
    ih: usize,
    iw: usize,
    ow: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dy: usize,
    dx: usize,
    py: usize,
    px: usize,
}

impl Window2d {
    /// The 2-D window of `g`, or `None` when it is not 2-D or has no output column (nothing to
    /// unfold, and `ow` is a divisor).
    pub fn of(g: &WindowGeometry) -> Option<Self> {
        (g.in_dims.len() == 2 && g.out_dims[1] > 0 && g.kernel[1] > 0).then(|| Window2d {
            ih: g.in_dims[0],
            iw: g.in_dims[1],
            ow: g.out_dims[1],
            kw: g.kernel[1],
            sy: g.strides[0],
            sx: g.strides[1],
            dy: g.dilations[0],
            dx: g.dilations[1],
            py: g.pads_begin[0],
            px: g.pads_begin[1],
        })
    }
}

entry_points! {
    /// One row of the unfolded matrix: what tap `tap` sees at output positions `first..first +
    /// dst.len()` of `plane` (one input plane, `ih * iw` elements at least).
    unfold_row(row_avx512, row_avx2) => row(
        plane: &[f32],
        w: &Window2d,
        tap: usize,
        first: usize,
        dst: &mut [f32],
    )
}

/// Positions of one row unfolded at a time by [`unfold_packed`] (a stack buffer), a multiple of
/// every sliver width it is used with.
const CHUNK: usize = 512;

/// [`super::im2col::unfold_packed`] for a 2-D window on f32: `block` of the unfolded matrix of
/// `input` (`in_len` elements per channel) in the GEMM's packed-B layout. `dst` holds at least
/// `block.elements()`. Returns `false`, having written nothing, when `block.nr` does not divide
/// [`CHUNK`] (the register tiles' 8, 16 and 32 all do).
#[must_use]
pub(super) fn unfold_packed(
    simd: Simd,
    input: &[f32],
    in_len: usize,
    w: &Window2d,
    kernel_len: usize,
    block: BBlock,
    dst: &mut [f32],
) -> bool {
    // Also false for nr = 0 (only 0 is a multiple of 0).
    if !CHUNK.is_multiple_of(block.nr) {
        return false;
    }
    packed_on(simd, input, in_len, w, kernel_len, block, dst);
    true
}

entry_points! {
    /// [`unfold_packed`] once `block.nr` is known to divide [`CHUNK`].
    packed_on(packed_avx512, packed_avx2) => packed(
        input: &[f32],
        in_len: usize,
        w: &Window2d,
        kernel_len: usize,
        block: BBlock,
        dst: &mut [f32],
    )
}

#[inline(always)]
fn packed<I: Isa>(
    isa: I,
    input: &[f32],
    in_len: usize,
    w: &Window2d,
    kernel_len: usize,
    block: BBlock,
    dst: &mut [f32],
) {
    let (nr, kc) = (block.nr, block.kc);
    if kc == 0 || kernel_len == 0 || block.cols == 0 {
        return;
    }
    let dst = &mut dst[..block.elements()];
    let mut row_buf = [0.0f32; CHUNK];
    // The input rows this block reads of each channel: the next channel's are fetched into
    // cache a share per row of this one (its taps), ahead of their gathers.
    let kh = kernel_len / w.kw;
    let (oy0, oy1) = (block.j0 / w.ow, (block.j0 + block.cols - 1) / w.ow);
    let r0 = (oy0 * w.sy).saturating_sub(w.py).min(w.ih);
    let r1 = (oy1 * w.sy + (kh.max(1) - 1) * w.dy + 1)
        .saturating_sub(w.py)
        .clamp(r0, w.ih);
    let (ahead_from, ahead_len) = (r0 * w.iw, (r1 - r0) * w.iw);
    let (mut c, mut tap) = (block.p0 / kernel_len, block.p0 % kernel_len);
    for p in 0..kc {
        let plane = &input[c * in_len..(c + 1) * in_len];
        if let Some(next) =
            input.get((c + 1) * in_len + ahead_from..(c + 1) * in_len + ahead_from + ahead_len)
        {
            let share = next.len().div_ceil(kernel_len);
            let part = next.chunks(share.max(1)).nth(tap).unwrap_or(&[]);
            for line in part.chunks(16) {
                // SAFETY: a prefetch reads nothing (and never faults); the address is inside
                // `input`.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        line.as_ptr() as *const i8,
                    )
                };
            }
        }
        for start in (0..block.cols).step_by(CHUNK) {
            let width = CHUNK.min(block.cols - start);
            let buf = &mut row_buf[..width];
            row(isa, plane, w, tap, block.j0 + start, buf);
            // Whole slivers: vector copies; the last one partial, padded with zeros.
            for (s, part) in buf.chunks(nr).enumerate() {
                let out = &mut dst[((start / nr + s) * kc + p) * nr..][..nr];
                copy(isa, part, out);
            }
        }
        tap += 1;
        if tap == kernel_len {
            (c, tap) = (c + 1, 0);
        }
    }
}

/// `out[..src.len()] = src`, zero after it (`src.len() <= out.len()`).
#[inline(always)]
fn copy<I: Isa>(isa: I, src: &[f32], out: &mut [f32]) {
    assert!(src.len() <= out.len());
    let (l, n) = (I::LANES, out.len());
    let (s, d) = (src.as_ptr(), out.as_mut_ptr());
    if src.len() == n && n % l == 0 {
        // A whole sliver of whole vectors, the common case.
        for j in (0..n).step_by(l) {
            // SAFETY: j + l <= n elements of both.
            unsafe { isa.store(d.add(j), isa.load(s.add(j))) };
        }
        return;
    }
    let mut j = 0;
    while j < n {
        let have = src.len().saturating_sub(j);
        // SAFETY: reads `have.min(l)` elements of `src` from `j` (which it holds), and writes
        // `(n - j).min(l)` of `out` from `j` (which it holds); the pointers are formed with
        // `wrapping_add` and only dereferenced within those counts.
        unsafe {
            let v = if have >= l {
                isa.load(s.add(j))
            } else {
                isa.load_first(s.wrapping_add(j), have)
            };
            if n - j >= l {
                isa.store(d.add(j), v);
            } else {
                isa.store_first(d.add(j), n - j, v);
            }
        }
        j += l;
    }
}

/// The valid outputs `[lo, hi)` (clamped to `[0, out)`) of an axis whose output `o` reads
/// input `o * s + off`, inside when in `[0, input)`.
fn valid(input: usize, out: usize, s: usize, off: isize) -> (usize, usize) {
    let lo = if off >= 0 {
        0
    } else {
        off.unsigned_abs().div_ceil(s)
    }
    .min(out);
    let hi = if input as isize <= off {
        0
    } else {
        ((input as isize - off) as usize).div_ceil(s)
    }
    .clamp(lo, out);
    (lo, hi)
}

#[inline(always)]
fn row<I: Isa>(isa: I, plane: &[f32], w: &Window2d, tap: usize, first: usize, dst: &mut [f32]) {
    let (ky, kx) = (tap / w.kw, tap % w.kw);
    let off_y = (ky * w.dy) as isize - w.py as isize;
    let off_x = (kx * w.dx) as isize - w.px as isize;
    let (ow, sx) = (w.ow, w.sx);
    let (lo, hi) = valid(w.iw, ow, sx, off_x);
    let plane = &plane[..w.ih * w.iw];
    let (mut oy, mut x0) = (first / ow, first % ow);
    let n = dst.len();
    let mut done = 0;
    // Segments left to right, each written whole (zeros included), so what one spills past its
    // end the next overwrites.
    while done < n {
        let len = (ow - x0).min(n - done);
        let iy = (oy * w.sy) as isize + off_y;
        // Valid columns within this segment: [a, b).
        let (a, b) = (lo.clamp(x0, x0 + len), hi.clamp(x0, x0 + len));
        if iy < 0 || iy >= w.ih as isize || a >= b {
            zeros(isa, dst, done, len);
        } else {
            if a > x0 {
                zeros(isa, dst, done, a - x0);
            }
            // Input index of output column a: non-negative because a >= lo, in the row because
            // a < hi; the last one read, of column b - 1, too.
            let start = (iy as usize * w.iw + a * sx).wrapping_add_signed(off_x);
            let out = &mut dst[done + a - x0..];
            gather(isa, &plane[start..], sx, out, b - a);
            if b < x0 + len {
                zeros(isa, dst, done + b - x0, x0 + len - b);
            }
        }
        done += len;
        x0 = 0;
        oy += 1;
    }
}

/// `dst[at..at + count] = 0`; may also zero up to a vector's worth after it (never past
/// `dst`'s end), which the caller overwrites afterwards. `at + count <= dst.len()`.
#[inline(always)]
fn zeros<I: Isa>(isa: I, dst: &mut [f32], at: usize, count: usize) {
    assert!(at + count <= dst.len());
    let (l, zero) = (I::LANES, isa.splat(0.0));
    let room = dst.len() - at;
    let d = dst[at..].as_mut_ptr();
    let mut j = 0;
    while j < count {
        // SAFETY: writes at most `room - j` elements from `j` of `dst[at..]`, which holds
        // `room`.
        unsafe {
            if room - j >= l {
                isa.store(d.add(j), zero);
            } else {
                isa.store_first(d.add(j), room - j, zero);
            }
        }
        j += l;
    }
}

/// `out[j] = src[j * s]` for `j < count`; may also write `out[count..]` (up to a vector's
/// worth, with elements of `src`), which the caller overwrites afterwards. `count >= 1`,
/// `src.len() > (count - 1) * s`, `out.len() >= count`.
#[inline(always)]
fn gather<I: Isa>(isa: I, src: &[f32], s: usize, out: &mut [f32], count: usize) {
    assert!(count >= 1 && src.len() > (count - 1) * s && out.len() >= count);
    let l = I::LANES;
    let (sp, dp, room) = (src.as_ptr(), out.as_mut_ptr(), out.len());
    match s {
        1 | 2 => {
            let mut j = 0;
            while j < count {
                // Source elements from this vector's first: at least one (j < count).
                let have = src.len() - j * s;
                // SAFETY: every load reads at most `have` elements of `src` from `j * s`
                // (`load_first` reads only its first `n` lanes), every store at most
                // `room - j` of `out` from `j`; pointers past an end are formed with
                // `wrapping_add` and read or written for zero lanes.
                let v = unsafe {
                    let p = sp.add(j * s);
                    if s == 1 {
                        if have >= l {
                            isa.load(p)
                        } else {
                            isa.load_first(p, have)
                        }
                    } else if have >= 2 * l {
                        isa.evens(isa.load(p), isa.load(p.add(l)))
                    } else {
                        let lo = isa.load_first(p, have.min(l));
                        let hi = isa.load_first(p.wrapping_add(l), have.saturating_sub(l));
                        isa.evens(lo, hi)
                    }
                };
                // SAFETY: as above.
                unsafe {
                    if room - j >= l {
                        isa.store(dp.add(j), v);
                    } else {
                        isa.store_first(dp.add(j), room - j, v);
                    }
                }
                j += l;
            }
        }
        _ => {
            for (o, &x) in out[..count].iter_mut().zip(src.iter().step_by(s)) {
                *o = x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::spatial::WindowAttrs;

    /// Row `tap` of the unfolded plane, from the definition.
    fn naive_row(
        plane: &[f32],
        g: &WindowGeometry,
        tap: usize,
        cols: std::ops::Range<usize>,
    ) -> Vec<f32> {
        let (ky, kx) = (tap / g.kernel[1], tap % g.kernel[1]);
        cols.map(|p| {
            let (oy, ox) = (p / g.out_dims[1], p % g.out_dims[1]);
            let iy = (oy * g.strides[0] + ky * g.dilations[0]) as isize - g.pads_begin[0] as isize;
            let ix = (ox * g.strides[1] + kx * g.dilations[1]) as isize - g.pads_begin[1] as isize;
            if iy < 0 || ix < 0 || iy >= g.in_dims[0] as isize || ix >= g.in_dims[1] as isize {
                0.0
            } else {
                plane[iy as usize * g.in_dims[1] + ix as usize]
            }
        })
        .collect()
    }

    /// Random geometries (strides 1-3, pads, dilations, widths that are not multiples of the
    /// vector width, planes without slack after them) and column ranges, on every ISA this CPU
    /// has: each row equals the definition, and the packed blocks hold it sliver by sliver.
    #[test]
    fn rows_and_packed_blocks_match_the_definition_on_every_isa() {
        let mut rng = crate::support::rng::Rng::new(0x2d2d);
        let isas = Simd::all();
        assert_eq!(isas.is_empty(), Simd::detect().is_none());
        for case in 0..400 {
            let in_dims = [1 + rng.below(20), 1 + rng.below(40)];
            let kernel = [1 + rng.below(4), 1 + rng.below(4)];
            let strides = [1 + rng.below(3), 1 + rng.below(3)];
            let pads = [rng.below(3), rng.below(3)];
            let pads_end = [rng.below(3), rng.below(3)];
            let dilations = [1 + rng.below(2), 1 + rng.below(2)];
            let attrs = WindowAttrs {
                kernel: &kernel,
                strides: &strides,
                pads_begin: &pads,
                pads_end: &pads_end,
                dilations: &dilations,
                ceil_mode: false,
            };
            let Ok(g) = WindowGeometry::new("test", &in_dims, &attrs) else {
                continue;
            };
            let Some(w) = Window2d::of(&g) else {
                continue;
            };
            if g.out_len == 0 {
                continue;
            }
            let channels = 1 + rng.below(3);
            let input = rng.vec(channels * g.in_len);
            for &simd in &isas {
                for tap in 0..g.kernel_len {
                    let c = rng.below(channels);
                    let plane = &input[c * g.in_len..(c + 1) * g.in_len];
                    let first = rng.below(g.out_len);
                    let end = first + 1 + rng.below(g.out_len - first);
                    let want = naive_row(plane, &g, tap, first..end);
                    // Sentinels after the row: never written.
                    let mut got = vec![f32::NAN; end - first + 40];
                    got[end - first..].fill(-7.0);
                    unfold_row(simd, plane, &w, tap, first, &mut got[..end - first]);
                    assert_eq!(
                        got[..end - first],
                        want,
                        "case {case} {simd:?} {g:?} tap {tap} {first}..{end}"
                    );
                    assert!(
                        got[end - first..].iter().all(|&v| v == -7.0),
                        "case {case}: wrote past the row"
                    );
                }
                let rows = channels * g.kernel_len;
                let nr = [1, 8, 16, 32][rng.below(4)];
                let p0 = rng.below(rows);
                let kc = 1 + rng.below(rows - p0);
                let j0 = rng.below(g.out_len);
                let block = BBlock {
                    p0,
                    kc,
                    j0,
                    cols: 1 + rng.below(g.out_len - j0),
                    nr,
                };
                let mut dst = vec![f32::NAN; block.elements()];
                assert!(unfold_packed(
                    simd,
                    &input,
                    g.in_len,
                    &w,
                    g.kernel_len,
                    block,
                    &mut dst
                ));
                for (s, sliver) in dst.chunks(kc * nr).enumerate() {
                    for p in 0..kc {
                        let (c, tap) = ((p0 + p) / g.kernel_len, (p0 + p) % g.kernel_len);
                        let plane = &input[c * g.in_len..(c + 1) * g.in_len];
                        let cols = (s * nr).min(block.cols)..((s + 1) * nr).min(block.cols);
                        let mut want = naive_row(plane, &g, tap, j0 + cols.start..j0 + cols.end);
                        want.resize(nr, 0.0);
                        assert_eq!(
                            sliver[p * nr..(p + 1) * nr],
                            want,
                            "case {case} {simd:?} {block:?} sliver {s} row {p}"
                        );
                    }
                }
            }
        }
    }
}
