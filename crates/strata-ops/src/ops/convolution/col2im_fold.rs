//! col2im: the adjoint of im2col. Folds a column matrix (row `(c, tap)` holds, for every input
//! position, what kernel tap `tap` of channel `c` contributes there) back into output planes by
//! scatter-adding each value at `input position * stride + tap * dilation - pad`. This is the
//! second half of a transposed convolution (`col = W^T X`, then fold).

use crate::kernels::Float;
use crate::support::strided::advance_index;

/// Below this many output elements the fold runs on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// Resolved per-axis geometry of a fold. Every vector has one entry per spatial axis; pads may
/// be negative (an explicit `output_shape` larger than the natural one adds room at the edge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoldGeometry {
    /// Spatial dims of one input plane (the GEMM's column count is their product).
    pub in_dims: Vec<usize>,
    /// Spatial dims of one output plane.
    pub out_dims: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads_begin: Vec<isize>,
    pub in_len: usize,
    pub out_len: usize,
    pub kernel_len: usize,
}

/// Adds the fold of `col` (`channels * kernel_len` rows of `in_len`) into `out` (`channels`
/// planes of `out_len`, already holding the bias or zeros). Callers guarantee the slice lengths
/// (checked by the ConvTranspose kernel). Planes are independent, so they are threaded.
pub(crate) fn col2im_add<T: Float>(
    col: &[T],
    channels: usize,
    g: &FoldGeometry,
    out: &mut [T],
    threads: usize,
) {
    if channels == 0 || g.out_len == 0 || g.in_len == 0 {
        return;
    }
    let rows = g.kernel_len * g.in_len;
    let out = &mut out[..channels * g.out_len];
    let fold = |(c, plane): (usize, &mut [T])| {
        for tap in 0..g.kernel_len {
            let start = c * rows + tap * g.in_len;
            fold_row(&col[start..start + g.in_len], g, tap, plane);
        }
    };
    if threads > 1 && out.len() >= PARALLEL_MIN_ELEMENTS {
        let per_task = channels.div_ceil(threads);
        crate::parallel::for_each_chunk_mut(out, g.out_len, per_task, |i, plane| fold((i, plane)));
    } else {
        out.chunks_mut(g.out_len).enumerate().for_each(fold);
    }
}

/// Scatter-adds one column row (kernel tap `tap` over every input position) into `plane`.
/// Input positions are walked as runs along the last axis, where the positions that land
/// inside the output form one range.
fn fold_row<T: Float>(row: &[T], g: &FoldGeometry, tap: usize, plane: &mut [T]) {
    let rank = g.in_dims.len();
    let last = rank - 1;
    // Output coordinate of input coordinate 0 under this tap, per axis.
    let mut offset = vec![0isize; rank];
    let mut rem = tap;
    for axis in (0..rank).rev() {
        let k = rem % g.kernel[axis];
        rem /= g.kernel[axis];
        offset[axis] = (k * g.dilations[axis]) as isize - g.pads_begin[axis];
    }
    // Along the last axis, input i lands on i * s + off: valid i form [lo, hi).
    let (iw, ow, s, off) = (
        g.in_dims[last],
        g.out_dims[last] as isize,
        g.strides[last],
        offset[last],
    );
    let lo = if off >= 0 {
        0
    } else {
        off.unsigned_abs().div_ceil(s)
    }
    .min(iw);
    let hi = if ow <= off {
        0
    } else {
        ((ow - off) as usize).div_ceil(s)
    }
    .clamp(lo, iw);
    if lo == hi {
        return;
    }

    let runs = g.in_len / iw;
    let mut outer = vec![0usize; last];
    for run in 0..runs {
        // Output row (plane offset / ow) of this run, unless it falls outside the output.
        let (mut out_row, mut stride, mut inside) = (0usize, 1usize, true);
        for axis in (0..last).rev() {
            let o = (outer[axis] * g.strides[axis]) as isize + offset[axis];
            if o < 0 || o >= g.out_dims[axis] as isize {
                inside = false;
                break;
            }
            out_row += o as usize * stride;
            stride *= g.out_dims[axis];
        }
        if inside {
            let src = &row[run * iw..][lo..hi];
            // Output index of input i = lo; non-negative because lo >= -off / s.
            let first = ((out_row * ow as usize + lo * s) as isize + off) as usize;
            if s == 1 {
                for (d, &v) in plane[first..first + src.len()].iter_mut().zip(src) {
                    *d += v;
                }
            } else {
                for (j, &v) in src.iter().enumerate() {
                    plane[first + j * s] += v;
                }
            }
        }
        advance_index(&mut outer[..last], &g.in_dims[..last]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(
        in_dims: &[usize],
        out_dims: &[usize],
        kernel: &[usize],
        strides: &[usize],
        dilations: &[usize],
        pads_begin: &[isize],
    ) -> FoldGeometry {
        FoldGeometry {
            in_dims: in_dims.to_vec(),
            out_dims: out_dims.to_vec(),
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            dilations: dilations.to_vec(),
            pads_begin: pads_begin.to_vec(),
            in_len: in_dims.iter().product(),
            out_len: out_dims.iter().product(),
            kernel_len: kernel.iter().product(),
        }
    }

    #[test]
    fn folds_a_strided_1d_row() {
        // Input width 3, kernel 2, stride 2, no pad -> width 6; tap t of input i lands on 2i+t.
        let g = geometry(&[3], &[6], &[2], &[2], &[1], &[0]);
        let col = [1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0];
        let mut out = [0.5f32; 6];
        col2im_add(&col, 1, &g, &mut out, 1);
        assert_eq!(out, [1.5, 10.5, 2.5, 20.5, 3.5, 30.5]);
    }

    #[test]
    fn overlapping_taps_add_and_pads_crop() {
        // 2-D: 2x2 input, 2x2 kernel, stride 1, pad 1 at the start -> 2x2 output (the natural
        // 3x3 minus the first row and column). Output (oy, ox) gathers input (oy + 1 - ky,
        // ox + 1 - kx) of tap (ky, kx).
        let g = geometry(&[2, 2], &[2, 2], &[2, 2], &[1, 1], &[1, 1], &[1, 1]);
        // Every tap row is the input [1, 2, 3, 4] scaled by (tap + 1).
        let col: Vec<f32> = (0..4)
            .flat_map(|t| [1.0, 2.0, 3.0, 4.0].map(|v| v * (t + 1) as f32))
            .collect();
        let mut out = [0.0f32; 4];
        col2im_add(&col, 1, &g, &mut out, 1);
        // (0,0): 4*1 + 3*2 + 2*3 + 1*4 = 20; (0,1): 4*2 + 2*4 = 16; (1,0): 4*3 + 3*4 = 24;
        // (1,1): 4*4 = 16.
        assert_eq!(out, [20.0, 16.0, 24.0, 16.0]);
    }

    #[test]
    fn negative_pads_leave_room_and_empty_ranges_are_skipped() {
        // Pad -2: every value lands 2 to the right; the first two outputs receive nothing.
        let g = geometry(&[2], &[5], &[1], &[1], &[1], &[-2]);
        let mut out = [0.0f32; 5];
        col2im_add(&[7.0, 8.0], 1, &g, &mut out, 1);
        assert_eq!(out, [0.0, 0.0, 7.0, 8.0, 0.0]);
        // A pad larger than the whole output: nothing lands anywhere, nothing panics.
        let g = geometry(&[2], &[1], &[3], &[1], &[1], &[5]);
        let mut out = [1.0f32; 1];
        col2im_add(&[1.0; 6], 1, &g, &mut out, 1);
        assert_eq!(out, [1.0]);
    }
}
