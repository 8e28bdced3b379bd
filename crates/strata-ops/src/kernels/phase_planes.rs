//! Phase planes: a window operator's input plane laid out so that every kernel tap reads one
//! flat contiguous run (depthwise convolution, window sums, max pooling).
//!
//! The plane is copied once into padded *phase planes*, one per stride phase: padded element
//! `(r, c)` goes to phase `(r % sr, c % sc)` at `(r / sr, c / sc)`. Output `(oy, ox)` of a
//! virtual output `WP` columns wide (the phase planes' width, `>= OW`) then takes tap `(ky, kx)`
//! from flat index `oy * WP + ox + shift(ky, kx)` of its phase plane, so a whole plane is one
//! long vectorized run per tap, whatever its width, with no edge cases for the padding; the
//! `WP - OW` extra columns of each row are computed and dropped.

use crate::kernels::spatial::WindowGeometry;

/// One spatial axis of a plane: input and output extents, kernel taps, stride, leading pad and
/// dilation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis {
    pub input: usize,
    pub output: usize,
    pub taps: usize,
    pub stride: usize,
    pub pad: usize,
    pub dilation: usize,
}

impl Axis {
    pub fn of(w: &WindowGeometry, axis: usize) -> Self {
        Axis {
            input: w.in_dims[axis],
            output: w.out_dims[axis],
            taps: w.kernel[axis],
            stride: w.strides[axis],
            pad: w.pads_begin[axis],
            dilation: w.dilations[axis],
        }
    }

    /// A unit axis (the height of a 1-D convolution).
    pub const UNIT: Axis = Axis {
        input: 1,
        output: 1,
        taps: 1,
        stride: 1,
        pad: 0,
        dilation: 1,
    };

    /// Input offset of tap `t` relative to `o * stride`.
    pub fn offset(&self, t: usize) -> isize {
        (t * self.dilation) as isize - self.pad as isize
    }

    /// The outputs `o` whose tap at `offset` reads inside the input: `0 <= o * stride + offset
    /// < input`.
    pub fn valid(&self, offset: isize) -> std::ops::Range<usize> {
        let s = self.stride as isize;
        let lo = if offset < 0 { (-offset + s - 1) / s } else { 0 };
        let hi = if (self.input as isize) > offset {
            (self.input as isize - 1 - offset) / s + 1
        } else {
            0
        };
        let (lo, hi) = (lo as usize, (hi as usize).min(self.output));
        lo.min(hi)..hi
    }
}

/// Outputs accumulated in registers at once: whole vectors at AVX-512 and AVX2 widths.
pub(crate) const BLOCK: usize = 64;
/// Largest phase-plane buffer (elements) the flat path takes; larger planes use the row path.
pub(crate) const FLAT_MAX: usize = 1 << 18;
/// Most kernel taps the flat path takes (7x7); larger kernels use the row path.
pub(crate) const MAX_TAPS: usize = 49;

/// The flat layout of one plane: phase planes of `hp x wp`, their count, and each tap's phase
/// plane and flat shift.
pub(crate) struct FlatGeometry {
    pub wp: usize,
    pub plane_len: usize,
    pub phases: (usize, usize),
    /// Virtual output elements: `rows.output * wp`, rounded up to whole blocks.
    pub virtual_len: usize,
    /// Buffer elements: every phase plane, then slack so the last block's reads stay inside.
    pub buffer_len: usize,
}

impl FlatGeometry {
    pub fn of(rows: Axis, cols: Axis) -> Option<Self> {
        let span = |a: Axis| (a.output - 1) * a.stride + (a.taps - 1) * a.dilation + 1;
        let (hp, wp) = (
            span(rows).div_ceil(rows.stride),
            span(cols).div_ceil(cols.stride),
        );
        let phases = (rows.stride, cols.stride);
        let plane_len = hp.checked_mul(wp)?;
        let virtual_len = rows.output.checked_mul(wp)?.div_ceil(BLOCK) * BLOCK;
        let buffer_len = plane_len
            .checked_mul(phases.0.checked_mul(phases.1)?)?
            .checked_add(virtual_len)?;
        let fits = buffer_len <= FLAT_MAX && rows.taps * cols.taps <= MAX_TAPS;
        fits.then_some(FlatGeometry {
            wp,
            plane_len,
            phases,
            virtual_len,
            buffer_len,
        })
    }

    /// Where tap `(ky, kx)` reads: the start of its phase plane plus its shift in it.
    pub fn tap_start(&self, rows: Axis, cols: Axis, ky: usize, kx: usize) -> usize {
        let (ay, ax) = (ky * rows.dilation, kx * cols.dilation);
        let phase = (ay % rows.stride) * self.phases.1 + ax % cols.stride;
        phase * self.plane_len + (ay / rows.stride) * self.wp + ax / cols.stride
    }
}

/// Copies plane `x` into the phase planes of `g`, `fill` wherever a padded position lies outside
/// the input (the slack after the planes is left as is: only dropped columns read it).
#[inline(always)]
pub(crate) fn fill_phase_planes<T: Copy>(
    x: &[T],
    rows: Axis,
    cols: Axis,
    g: &FlatGeometry,
    fill: T,
    buffer: &mut [T],
) {
    for pr in 0..g.phases.0 {
        for pc in 0..g.phases.1 {
            let phase = &mut buffer[(pr * g.phases.1 + pc) * g.plane_len..][..g.plane_len];
            for (i, dst) in phase.chunks_exact_mut(g.wp).enumerate() {
                // Padded row i * sr + pr is input row iy.
                let iy = (i * rows.stride + pr) as isize - rows.pad as isize;
                if iy < 0 || iy >= rows.input as isize {
                    dst.fill(fill);
                    continue;
                }
                let src = &x[iy as usize * cols.input..][..cols.input];
                // Padded column j * sc + pc is input column j * sc + pc - pad: inside the row
                // for j in lo..hi.
                let (sc, pad) = (cols.stride, cols.pad);
                let lo = pad.saturating_sub(pc).div_ceil(sc).min(g.wp);
                let hi = (cols.input + pad)
                    .saturating_sub(pc)
                    .div_ceil(sc)
                    .min(g.wp)
                    .max(lo);
                dst[..lo].fill(fill);
                dst[hi..].fill(fill);
                if lo == hi {
                    continue;
                }
                let (dst, src) = (&mut dst[lo..hi], &src[lo * sc + pc - pad..]);
                match sc {
                    // Rows are short: an inline loop beats a call to memcpy per row.
                    1 => {
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d = v;
                        }
                    }
                    2 => {
                        // Pairs vectorize as interleaved loads; the last element may be alone.
                        let pairs = dst.len().min(src.len() / 2);
                        for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
                            *d = pair[0];
                        }
                        if let Some(last) = dst.get_mut(pairs) {
                            *last = src[2 * pairs];
                        }
                    }
                    _ => {
                        for (d, &v) in dst.iter_mut().zip(src.iter().step_by(sc)) {
                            *d = v;
                        }
                    }
                }
            }
        }
    }
}
