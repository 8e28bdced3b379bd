//! im2col: unfolds the sliding windows of an N-d input into a matrix so that convolution becomes
//! one GEMM. Row `(c, tap)` of the result holds, for every output position, the input element
//! that kernel tap `tap` of channel `c` sees there (0 in the padding).

use rayon::prelude::*;

use super::float::Float;
use super::spatial::{advance, Dims, WindowGeometry};

/// Below this many elements the unfold runs on the calling thread: spawning costs more.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 16;

/// Fills `col` (`channels * kernel_len` rows of `out_len`) from `input` (`channels` planes of
/// `in_len`). Callers guarantee those lengths (the conv kernel checks them before calling).
pub(crate) fn im2col<T: Float>(
    input: &[T],
    channels: usize,
    g: &WindowGeometry,
    col: &mut [T],
    threads: usize,
) {
    let rows = channels * g.kernel_len;
    if rows == 0 || g.out_len == 0 {
        return;
    }
    let col = &mut col[..rows * g.out_len];
    let unfold = |(row, dst): (usize, &mut [T])| {
        let (c, tap) = (row / g.kernel_len, row % g.kernel_len);
        unfold_row(&input[c * g.in_len..(c + 1) * g.in_len], g, tap, dst);
    };
    if threads > 1 && col.len() >= PARALLEL_MIN_ELEMENTS {
        col.par_chunks_mut(g.out_len)
            .enumerate()
            .with_min_len(rows.div_ceil(threads))
            .for_each(unfold);
    } else {
        col.chunks_mut(g.out_len).enumerate().for_each(unfold);
    }
}

/// One im2col row: what kernel tap `tap` sees at every output position of one input plane.
/// Output positions are walked as runs along the last axis, where the in-bounds part is a
/// strided (usually contiguous) copy and the rest is padding.
fn unfold_row<T: Float>(plane: &[T], g: &WindowGeometry, tap: usize, dst: &mut [T]) {
    let rank = g.in_dims.len();
    let last = rank - 1;
    // Input offset of this tap relative to each window start, per axis.
    let mut shift: Dims = Dims::from_elem(0, rank);
    let mut rem = tap;
    for axis in (0..rank).rev() {
        let k = rem % g.kernel[axis];
        rem /= g.kernel[axis];
        shift[axis] = k * g.dilations[axis];
    }
    let offset = |axis: usize| shift[axis] as isize - g.pads_begin[axis] as isize;

    // Along the last axis, output x reads input x * s + off; valid x form one range [lo, hi).
    let (ow, iw, s, off) = (
        g.out_dims[last],
        g.in_dims[last] as isize,
        g.strides[last],
        offset(last),
    );
    let lo = if off >= 0 {
        0
    } else {
        (off.unsigned_abs()).div_ceil(s)
    }
    .min(ow);
    let hi = if iw <= off {
        0
    } else {
        ((iw - off) as usize).div_ceil(s)
    }
    .clamp(lo, ow);

    let mut outer = Dims::from_elem(0, last);
    for run in dst.chunks_exact_mut(ow) {
        // Row-major input offset of the outer coordinates, unless one lies in the padding.
        let mut base = Some(0usize);
        for axis in 0..last {
            let i = (outer[axis] * g.strides[axis]) as isize + offset(axis);
            base = match base {
                Some(b) if i >= 0 && i < g.in_dims[axis] as isize => {
                    Some(b * g.in_dims[axis] + i as usize)
                }
                _ => None,
            };
        }
        match base {
            None => run.fill(T::ZERO),
            Some(base) => {
                run[..lo].fill(T::ZERO);
                run[hi..].fill(T::ZERO);
                // Input index of output x = lo; non-negative by the choice of lo.
                let start = (base * g.in_dims[last]) as isize + (lo * s) as isize + off;
                let start = start as usize;
                let valid = &mut run[lo..hi];
                if s == 1 {
                    valid.copy_from_slice(&plane[start..start + valid.len()]);
                } else {
                    for (j, v) in valid.iter_mut().enumerate() {
                        *v = plane[start + j * s];
                    }
                }
            }
        }
        advance(&mut outer, &g.out_dims[..last]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::spatial::WindowAttrs;

    #[test]
    fn unfolds_a_padded_strided_2d_window() {
        // 1 channel, 3x3 input, 2x2 kernel, stride 2, pad 1 on every side -> 2x2 output.
        let input: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let attrs = WindowAttrs {
            kernel: &[2, 2],
            strides: &[2, 2],
            pads_begin: &[1, 1],
            pads_end: &[1, 1],
            dilations: &[],
            ceil_mode: false,
        };
        let g = WindowGeometry::new("test", &[3, 3], &attrs).unwrap();
        assert_eq!(g.out_dims.as_slice(), &[2, 2]);
        let mut col = vec![f32::NAN; 4 * 4];
        im2col(&input, 1, &g, &mut col, 1);
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 5.0, // tap (0, 0)
            0.0, 0.0, 4.0, 6.0, // tap (0, 1)
            0.0, 2.0, 0.0, 8.0, // tap (1, 0)
            1.0, 3.0, 7.0, 9.0, // tap (1, 1)
        ];
        assert_eq!(col, expected);
    }
}
