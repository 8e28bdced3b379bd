//! The input of the row-wise convolution kernels (few input channels, wide depthwise planes):
//! a band of input rows copied zero-padded and split into column phases, so that every tap of a
//! strided, padded or dilated window reads one contiguous run of columns, and the activations
//! those kernels apply in registers as they store.

use crate::kernels::activation::Activation;
use crate::kernels::phase_planes::Axis;
use crate::kernels::spatial::WindowGeometry;

#[cfg(target_arch = "x86_64")]
use super::simd::Simd;
#[cfg(target_arch = "x86_64")]
use super::{row_band_avx512, row_band_split};

/// Elements per vector.
pub(crate) const LANES: usize = 16;
/// At most this many taps over all input channels (the 3x3 RGB layer has 27, a 7x7 one 147).
pub(super) const MAX_DEPTH: usize = 160;
/// The band buffer's size target in elements (it should stay in L1).
const BAND_ELEMENTS: usize = 8 * 1024;

/// An activation applied in registers as the outputs are stored: none, Relu or Clip, when no
/// residual comes before it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clamp {
    pub lo: f32,
    pub hi: f32,
    pub kind: ClampKind,
}

/// How a [`Clamp`] treats a NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ClampKind {
    /// No clamp.
    None,
    /// A NaN becomes `lo`, as Relu's `x > 0 ? x : 0`.
    NanToLow,
    /// A NaN stays NaN, as Clip's comparisons.
    KeepNan,
}

impl Clamp {
    /// The in-register form of `post`, or `None` when it must run as a pass after the store
    /// (another activation, or a residual added first).
    pub(super) fn of(post: Activation, residual: bool) -> Option<Clamp> {
        let (lo, hi, kind) = match post {
            _ if residual => return None,
            Activation::None => (0.0, 0.0, ClampKind::None),
            Activation::Relu => (0.0, f32::INFINITY, ClampKind::NanToLow),
            Activation::Clip { min, max } => (min, max, ClampKind::KeepNan),
            _ => return None,
        };
        Some(Clamp { lo, hi, kind })
    }
}

/// How input rows are laid out for one band of output rows: input row `r` of the band (padded
/// row `oy0 * stride + r`), channel `c` and column phase `q` occupy `phase_len` elements at
/// `((r * cin + c) * phases + q) * phase_len`; element `j` is padded column `j * phases + q`.
#[derive(Debug)]
pub(super) struct Band {
    pub rows_axis: Axis,
    pub cols: Axis,
    /// Output rows per band.
    pub rows: usize,
    /// Column phases (the column stride).
    phases: usize,
    phase_len: usize,
    /// Elements of one input row over all channels and phases.
    pub row_len: usize,
    /// Elements of the buffer (the tallest band).
    pub len: usize,
    /// Per tap `(c, ky, kx)` (the first `depth`), its offset from the window's top-left
    /// corner of output row 0. An array: a run allocates nothing.
    taps: [usize; MAX_DEPTH],
    depth: usize,
    /// The largest tap offset.
    reach: usize,
}

impl Band {
    pub(super) fn new(w: &WindowGeometry, cin: usize) -> Self {
        let (rows_axis, cols) = (Axis::of(w, 0), Axis::of(w, 1));
        let phases = cols.stride;
        let vectors = cols.output.div_ceil(LANES);
        let reach = (cols.taps - 1) * cols.dilation / phases;
        let phase_len = vectors * LANES + reach;
        let row_len = cin * phases * phase_len;
        let per_row = row_len * rows_axis.stride;
        let rows = (BAND_ELEMENTS / per_row.max(1)).clamp(1, rows_axis.output.max(1));
        let len = Self::input_rows(&rows_axis, rows) * row_len;
        let mut taps = [0usize; MAX_DEPTH];
        let depth = (cin * w.kernel_len).min(MAX_DEPTH);
        for (t, at) in taps[..depth].iter_mut().enumerate() {
            let (c, ky, kx) = (
                t / w.kernel_len,
                t % w.kernel_len / cols.taps,
                t % cols.taps,
            );
            let (shift, q) = (kx * cols.dilation / phases, kx * cols.dilation % phases);
            *at = ky * rows_axis.dilation * row_len + (c * phases + q) * phase_len + shift;
        }
        let reach = taps[..depth].iter().copied().max().unwrap_or(0);
        Band {
            reach,
            depth,
            rows_axis,
            cols,
            rows,
            phases,
            phase_len,
            row_len,
            len,
            taps,
        }
    }

    pub(super) fn input_rows(rows: &Axis, band_rows: usize) -> usize {
        (band_rows - 1) * rows.stride + (rows.taps - 1) * rows.dilation + 1
    }

    /// The tap offsets.
    pub(super) fn taps(&self) -> &[usize] {
        &self.taps[..self.depth]
    }

    /// The largest tap offset.
    pub(super) fn reach(&self) -> usize {
        self.reach
    }

    /// Copies the input rows under output rows `oy0..oy0 + rows` of `x` (`cin` planes) into
    /// `buf`, zero-padded, split into column phases.
    pub(super) fn fill(&self, x: &[f32], oy0: usize, rows: usize, buf: &mut [f32]) {
        let (h, wd) = (self.rows_axis.input, self.cols.input);
        let pad = self.cols.pad;
        let used = Self::input_rows(&self.rows_axis, rows) * self.row_len;
        for (r, row) in buf[..used].chunks_exact_mut(self.row_len).enumerate() {
            let iy = (oy0 * self.rows_axis.stride + r) as isize - self.rows_axis.pad as isize;
            if iy < 0 || iy >= h as isize {
                row.fill(0.0);
                continue;
            }
            for (c, channel) in row
                .chunks_exact_mut(self.phases * self.phase_len)
                .enumerate()
            {
                let src = &x[(c * h + iy as usize) * wd..][..wd];
                #[cfg(target_arch = "x86_64")]
                match (self.phases, Simd::detect()) {
                    (2, Some(simd)) => {
                        split_row(simd, src, pad, channel.split_at_mut(self.phase_len));
                        continue;
                    }
                    (1, Some(Simd::Avx512(isa))) => {
                        // SAFETY: the token proves AVX-512F.
                        unsafe { row_band_avx512::pad_row(isa, src, pad, channel) };
                        continue;
                    }
                    _ => {}
                }
                for (q, dst) in channel.chunks_exact_mut(self.phase_len).enumerate() {
                    fill_phase(src, q, self.phases, pad, dst);
                }
            }
        }
    }
}

/// Stride 2: input column `i` of `src` goes to phase `(i + pad) % 2` at `(i + pad) / 2`, the
/// rest of both phases is zero. Even and odd columns split with shuffles.
#[cfg(target_arch = "x86_64")]
fn split_row(simd: Simd, src: &[f32], pad: usize, (phase0, phase1): (&mut [f32], &mut [f32])) {
    let len = phase0.len();
    // in[2m] -> phase pad % 2 at pad / 2 + m; in[2m + 1] -> the other at (pad + 1) / 2 + m.
    let (je, jo) = (pad / 2, pad.div_ceil(2));
    let (even, odd) = if pad.is_multiple_of(2) {
        (phase0, phase1)
    } else {
        (phase1, phase0)
    };
    let ne = src.len().div_ceil(2).min(len.saturating_sub(je));
    let no = (src.len() / 2).min(len.saturating_sub(jo));
    let (je, jo) = (je.min(len), jo.min(len));
    even[..je].fill(0.0);
    even[je + ne..].fill(0.0);
    odd[..jo].fill(0.0);
    odd[jo + no..].fill(0.0);
    let pairs = ne.min(no);
    row_band_split::split_phases(
        simd,
        &src[..2 * pairs],
        &mut even[je..je + pairs],
        &mut odd[jo..jo + pairs],
    );
    for m in pairs..ne {
        even[je + m] = src[2 * m];
    }
    for m in pairs..no {
        odd[jo + m] = src[2 * m + 1];
    }
}

/// `dst[j]` = padded column `j * phases + q` of `src` (input column that minus `pad`), zero
/// outside the row.
fn fill_phase(src: &[f32], q: usize, phases: usize, pad: usize, dst: &mut [f32]) {
    // Columns j with 0 <= j * phases + q - pad < src.len().
    let lo = pad.saturating_sub(q).div_ceil(phases).min(dst.len());
    let hi = if src.len() + pad > q {
        ((src.len() + pad - q - 1) / phases + 1).clamp(lo, dst.len())
    } else {
        lo
    };
    dst[..lo].fill(0.0);
    dst[hi..].fill(0.0);
    let first = lo * phases + q - pad;
    let dst = &mut dst[lo..hi];
    if phases == 1 {
        dst.copy_from_slice(&src[first..][..dst.len()]);
    } else {
        for (j, d) in dst.iter_mut().enumerate() {
            *d = src[first + j * phases];
        }
    }
}
