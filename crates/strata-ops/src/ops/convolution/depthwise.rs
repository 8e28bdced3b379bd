//! Depthwise convolution (one input and one output channel per group, 1-D or 2-D): a direct
//! kernel per channel plane, planes spread over the threads.
//!
//! im2col + GEMM on a depthwise layer is a `1 x k*k` by `k*k x HW` product per channel — all
//! packing and no reuse. Directly, each output row is accumulated in place from `k*k` shifted
//! input rows (`out[ox] += w * in[ox * stride + offset]` over the range of `ox` whose tap lies
//! inside the input, so padding costs no branch): with stride 1 that is a contiguous multiply-add
//! the compiler vectorizes, and the row stays in L1 for all taps.

use rayon::prelude::*;

use crate::kernels::activation::Activation;
use crate::kernels::float::Float;
use crate::kernels::spatial::WindowGeometry;

/// Planes smaller than this many multiply-adds are grouped per task, so a task is worth handing
/// to another thread.
const TASK_MIN_MULADDS: usize = 1 << 15;

/// One spatial axis of a plane: input and output extents, kernel taps, stride, leading pad and
/// dilation.
#[derive(Clone, Copy, Debug)]
struct Axis {
    input: usize,
    output: usize,
    taps: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
}

impl Axis {
    fn of(w: &WindowGeometry, axis: usize) -> Self {
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
    const UNIT: Axis = Axis {
        input: 1,
        output: 1,
        taps: 1,
        stride: 1,
        pad: 0,
        dilation: 1,
    };

    /// Input offset of tap `t` relative to `o * stride`.
    fn offset(&self, t: usize) -> isize {
        (t * self.dilation) as isize - self.pad as isize
    }

    /// The outputs `o` whose tap at `offset` reads inside the input: `0 <= o * stride + offset
    /// < input`.
    fn valid(&self, offset: isize) -> std::ops::Range<usize> {
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

/// Whether [`depthwise`] handles this geometry: 1 or 2 spatial dims.
pub(crate) fn supports(w: &WindowGeometry) -> bool {
    matches!(w.in_dims.len(), 1 | 2)
}

/// Depthwise convolution (groups = input channels, each group `out_channels / in_channels`
/// outputs): output plane `(b, m)` of `out` is `post(conv(input plane (b, m / multiplier),
/// weight plane m) + bias[m])`. Lengths were checked by the caller: `input` holds `batch *
/// in_channels * w.in_len`, `out` `batch * out_channels * w.out_len`, `weight` `out_channels *
/// w.kernel_len` and `bias` `out_channels`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise<T: Float>(
    input: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    in_channels: usize,
    out_channels: usize,
    w: &WindowGeometry,
    post: Activation,
    out: &mut [T],
    threads: usize,
) {
    let (rows, cols) = match w.in_dims.len() {
        1 => (Axis::UNIT, Axis::of(w, 0)),
        _ => (Axis::of(w, 0), Axis::of(w, 1)),
    };
    let multiplier = (out_channels / in_channels.max(1)).max(1);
    let plane = |(p, y): (usize, &mut [T])| {
        let (b, ch) = (p / out_channels, p % out_channels);
        let x = &input[(b * in_channels + ch / multiplier) * w.in_len..][..w.in_len];
        let k = &weight[ch * w.kernel_len..][..w.kernel_len];
        plane_conv(x, k, rows, cols, y);
        let shift = bias.map_or(T::ZERO, |b| b[ch]);
        if shift != T::ZERO || post != Activation::None {
            post.add_bias_and_apply(y, shift);
        }
    };
    let per_plane = w.out_len.saturating_mul(w.kernel_len).max(1);
    let planes = out.len() / w.out_len.max(1);
    if threads <= 1 || planes < 2 || per_plane.saturating_mul(planes) < 2 * TASK_MIN_MULADDS {
        out.chunks_mut(w.out_len.max(1)).enumerate().for_each(plane);
    } else {
        out.par_chunks_mut(w.out_len.max(1))
            .enumerate()
            .with_min_len(TASK_MIN_MULADDS.div_ceil(per_plane))
            .for_each(plane);
    }
}

/// One plane: `y = conv(x, k)` with `k` of `rows.taps x cols.taps`.
fn plane_conv<T: Float>(x: &[T], k: &[T], rows: Axis, cols: Axis, y: &mut [T]) {
    y.fill(T::ZERO);
    for (oy, y_row) in y.chunks_exact_mut(cols.output).enumerate() {
        for ky in 0..rows.taps {
            let iy = (oy * rows.stride) as isize + rows.offset(ky);
            if iy < 0 || iy >= rows.input as isize {
                continue;
            }
            let x_row = &x[iy as usize * cols.input..][..cols.input];
            for kx in 0..cols.taps {
                let tap = k[ky * cols.taps + kx];
                let offset = cols.offset(kx);
                let valid = cols.valid(offset);
                if valid.is_empty() {
                    continue;
                }
                let first = (valid.start * cols.stride) as isize + offset;
                let x_from = &x_row[first as usize..];
                let y_part = &mut y_row[valid];
                if cols.stride == 1 {
                    for (o, &v) in y_part.iter_mut().zip(x_from) {
                        *o += tap * v;
                    }
                } else {
                    for (o, &v) in y_part.iter_mut().zip(x_from.iter().step_by(cols.stride)) {
                        *o += tap * v;
                    }
                }
            }
        }
    }
}
