//! im2col: unfolds the sliding windows of an N-d input into a matrix so that convolution becomes
//! one GEMM. Row `(c, tap)` of the result holds, for every output position, the input element
//! that kernel tap `tap` of channel `c` sees there (0 in the padding).

use std::ops::Range;

use bytemuck::Pod;
use smallvec::SmallVec;

#[cfg(target_arch = "x86_64")]
use std::any::TypeId;

#[cfg(target_arch = "x86_64")]
use super::im2col_2d::{self, Window2d};
#[cfg(target_arch = "x86_64")]
use super::simd::Simd;
use crate::kernels::float::Float;
use crate::kernels::gemm::BBlock;
use crate::kernels::simd::multiversion;
use crate::kernels::spatial::{Dims, WindowGeometry};
use crate::support::strided::advance_index;

/// Below this many elements the unfold runs on the calling thread: spawning costs more.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 16;

/// Fills `col` (`channels * kernel_len` rows of `positions.len()`) with the columns
/// `positions` (flat output positions) of the unfolded `input` (`channels` planes of `in_len`).
/// Unfolding a range of columns at a time lets the caller keep the matrix in cache. Callers
/// guarantee the slice lengths (the conv kernel checks them before calling).
pub(crate) fn im2col<T: Float + Pod>(
    input: &[T],
    channels: usize,
    g: &WindowGeometry,
    positions: Range<usize>,
    col: &mut [T],
    threads: usize,
) {
    let (rows, width) = (channels * g.kernel_len, positions.len());
    if rows == 0 || width == 0 {
        return;
    }
    let col = &mut col[..rows * width];
    #[cfg(target_arch = "x86_64")]
    let fast = fast_2d::<T>(g);
    let unfold = |(row, dst): (usize, &mut [T])| {
        let (c, tap) = (row / g.kernel_len, row % g.kernel_len);
        let plane = &input[c * g.in_len..(c + 1) * g.in_len];
        #[cfg(target_arch = "x86_64")]
        if let Some((simd, w)) = fast {
            let (plane, dst) = as_f32(plane, dst);
            im2col_2d::unfold_row(simd, plane, &w, tap, positions.start, dst);
            return;
        }
        unfold_row(plane, g, tap, positions.start, dst);
    };
    if threads > 1 && col.len() >= PARALLEL_MIN_ELEMENTS {
        if threads >= crate::parallel::threads() {
            // Thread t unfolds the t-th contiguous part of the rows on every call, so a product
            // that cuts its depth where the parts meet ([`unfolded_depth_cut`]) reads only
            // what its own core wrote.
            crate::parallel::for_each_chunk_mut_pinned(col, width, |i, dst| unfold((i, dst)));
        } else {
            let per_task = rows.div_ceil(threads);
            crate::parallel::for_each_chunk_mut(col, width, per_task, |i, dst| unfold((i, dst)));
        }
    } else {
        col.chunks_mut(width).enumerate().for_each(unfold);
    }
}

/// Where the first half of the current pool's threads stop unfolding the `rows x width` matrix
/// [`im2col`] fills on `threads` threads, when they share it out: the depth cut at which each
/// half of a product's threads reads only rows its own cores unfolded.
pub(crate) fn unfolded_depth_cut(rows: usize, width: usize, threads: usize) -> Option<usize> {
    let pool = crate::parallel::threads();
    if threads <= 1 || pool <= 1 || threads < pool || rows * width < PARALLEL_MIN_ELEMENTS {
        return None;
    }
    let parts = pool.min(rows);
    let at = rows.div_ceil(parts) * (parts / 2);
    (at > 0 && at < rows).then_some(at)
}

/// Positions of one row unfolded at a time by [`unfold_packed`] (a stack buffer).
const PACKED_CHUNK: usize = 512;

/// Writes `block` of the unfolded matrix of `input` (rows `(c, tap)` from `block.p0`, columns =
/// output positions from `block.j0`) in the GEMM's packed-B layout: slivers of `block.nr`
/// positions (sliver `s` at `s * kc * nr`, row `p` of it at `p * nr`), zero past the last
/// position. This is the [`ProduceB`](crate::kernels::gemm::ProduceB) of a convolution: the
/// microkernel reads the unfolded input where it is written, without an unfolded matrix in
/// between that would then be packed. `dst` holds at least `block.elements()`.
pub(crate) fn unfold_packed<T: Float + Pod>(
    input: &[T],
    g: &WindowGeometry,
    block: BBlock,
    dst: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some((simd, w)) = fast_2d::<T>(g) {
        let (input, dst) = as_f32(input, dst);
        if im2col_2d::unfold_packed(simd, input, g.in_len, &w, g.kernel_len, block, dst) {
            return;
        }
    }
    let (nr, kc) = (block.nr, block.kc);
    let chunk = PACKED_CHUNK / nr * nr;
    if nr == 0 || kc == 0 || g.kernel_len == 0 {
        return;
    }
    let plane = |row: usize| {
        let c = row / g.kernel_len;
        (&input[c * g.in_len..(c + 1) * g.in_len], row % g.kernel_len)
    };
    if chunk == 0 {
        // Slivers wider than the buffer: one call per sliver row.
        for (s, sliver) in dst[..block.elements()].chunks_mut(kc * nr).enumerate() {
            let first = s * nr;
            let width = nr.min(block.cols - first);
            for (p, out) in sliver.chunks_mut(nr).enumerate() {
                let (plane, tap) = plane(block.p0 + p);
                unfold_row(plane, g, tap, block.j0 + first, &mut out[..width]);
                out[width..].fill(T::ZERO);
            }
        }
        return;
    }
    let mut row = [T::ZERO; PACKED_CHUNK];
    for start in (0..block.cols).step_by(chunk) {
        let width = chunk.min(block.cols - start);
        for p in 0..kc {
            let (plane, tap) = plane(block.p0 + p);
            unfold_row(plane, g, tap, block.j0 + start, &mut row[..width]);
            for (s, part) in row[..width].chunks(nr).enumerate() {
                let out = &mut dst[((start / nr + s) * kc + p) * nr..][..nr];
                out[..part.len()].copy_from_slice(part);
                out[part.len()..].fill(T::ZERO);
            }
        }
    }
}

/// The vectorized 2-D unfold ([`im2col_2d`]) and its ISA, where it applies: f32 on a CPU with
/// AVX2 or AVX-512 and a 2-D window, unless the window takes [`unfold_row_same_width`] (stride
/// 1, output rows as wide as the input's: one copy per unfolded row rather than per output row).
#[cfg(target_arch = "x86_64")]
fn fast_2d<T: 'static>(g: &WindowGeometry) -> Option<(Simd, Window2d)> {
    if TypeId::of::<T>() != TypeId::of::<f32>() {
        return None;
    }
    let w = Window2d::of(g)?;
    if g.strides.iter().all(|&s| s == 1) && g.out_dims[1] == g.in_dims[1] {
        return None;
    }
    Some((Simd::detect()?, w))
}

/// `src` and `dst` as the f32 slices they are: only called once `T` is known to be `f32`.
#[cfg(target_arch = "x86_64")]
fn as_f32<'a, 'b, T: Pod>(src: &'a [T], dst: &'b mut [T]) -> (&'a [f32], &'b mut [f32]) {
    debug_assert_eq!(TypeId::of::<T>(), TypeId::of::<f32>());
    (bytemuck::cast_slice(src), bytemuck::cast_slice_mut(dst))
}

multiversion! {
    /// One im2col row: what kernel tap `tap` sees at output positions `first..first + dst.len()`
    /// of one input plane. Positions are walked as segments of runs along the last axis, where
    /// the in-bounds part is a strided (usually contiguous) copy and the rest is padding.
    fn unfold_row<T: Float>(
        plane: &[T],
        g: &WindowGeometry,
        tap: usize,
        first: usize,
        dst: &mut [T],
    ) {
        let rank = g.in_dims.len();
        let last = rank - 1;
        // Input coordinate of this tap minus the window's output coordinate times stride, per axis.
        let mut offset: SmallVec<[isize; 6]> = SmallVec::from_elem(0, rank);
        let mut rem = tap;
        for axis in (0..rank).rev() {
            let k = rem % g.kernel[axis];
            rem /= g.kernel[axis];
            offset[axis] = (k * g.dilations[axis]) as isize - g.pads_begin[axis] as isize;
        }

        // Along the last axis, output x reads input x * s + off; valid x form one range [lo, hi).
        let (ow, iw, s, off) = (
            g.out_dims[last],
            g.in_dims[last] as isize,
            g.strides[last],
            offset[last],
        );
        let lo = if off >= 0 {
            0
        } else {
            off.unsigned_abs().div_ceil(s)
        }
        .min(ow);
        let hi = if iw <= off {
            0
        } else {
            ((iw - off) as usize).div_ceil(s)
        }
        .clamp(lo, ow);

        if rank <= 2 && g.strides.iter().all(|&s| s == 1) && ow == iw as usize {
            let (in_rows, out_rows, dy) = if rank == 2 {
                (g.in_dims[0], g.out_dims[0], offset[0])
            } else {
                (1, 1, 0)
            };
            unfold_row_same_width(plane, ow, in_rows, out_rows, dy, off, lo..hi, first, dst);
            return;
        }

        // Plain slices: indexing a SmallVec re-checks inline vs heap on every access.
        let (in_dims, out_dims, strides) =
            (&g.in_dims[..last], &g.out_dims[..last], &g.strides[..last]);
        let offset = &offset[..last];

        // Walk runs with an odometer over the outer output axes: no division per run.
        let mut x0 = first % ow;
        let mut outer_dims: Dims = Dims::from_elem(0, last);
        let outer = &mut outer_dims[..];
        let mut run = first / ow;
        for axis in (0..last).rev() {
            outer[axis] = run % out_dims[axis];
            run /= out_dims[axis];
        }

        let mut done = 0;
        while done < dst.len() {
            let len = (ow - x0).min(dst.len() - done);
            let segment = &mut dst[done..done + len];
            // Input row (plane offset / iw) under the outer coordinates, unless it is padding.
            let (mut row, mut stride, mut inside) = (0usize, 1usize, true);
            for axis in (0..last).rev() {
                let i = (outer[axis] * strides[axis]) as isize + offset[axis];
                if i < 0 || i >= in_dims[axis] as isize {
                    inside = false;
                    break;
                }
                row += i as usize * stride;
                stride *= in_dims[axis];
            }
            if inside {
                // Valid x within this segment: [a, b).
                let (a, b) = (lo.clamp(x0, x0 + len), hi.clamp(x0, x0 + len));
                // The pad parts are a few elements at most: skip the calls when empty.
                if a > x0 {
                    segment[..a - x0].fill(T::ZERO);
                }
                if b < x0 + len {
                    segment[b - x0..].fill(T::ZERO);
                }
                // An empty valid range (padding wider than the input: lo is clamped down to the
                // output width, below the first valid x) leaves the segment all padding, and
                // `start` would be negative.
                if a < b {
                    // Input index of output x = a; non-negative because a >= lo here.
                    let start = ((row * iw as usize + a * s) as isize + off) as usize;
                    let valid = &mut segment[a - x0..b - x0];
                    if s == 1 {
                        valid.copy_from_slice(&plane[start..start + valid.len()]);
                    } else {
                        // One bounds check for the run, then a gather the compiler vectorizes
                        // (stride 2, the common case, as a deinterleave of pairs).
                        let src = &plane[start..start + (valid.len() - 1) * s + 1];
                        if s == 2 {
                            for (v, pair) in valid.iter_mut().zip(src.chunks(2)) {
                                *v = pair[0];
                            }
                        } else {
                            for (v, &x) in valid.iter_mut().zip(src.iter().step_by(s)) {
                                *v = x;
                            }
                        }
                    }
                }
            } else {
                segment.fill(T::ZERO);
            }
            done += len;
            x0 = 0;
            advance_index(outer, out_dims);
        }
    }
}

/// [`unfold_row`] for 1-D and 2-D windows with stride 1 whose output rows are as wide (`width`)
/// as the input rows (the usual "same" padding): output position `p` (row `y = p / width`,
/// column `x = p % width`) reads `plane[p + dy * width + dx]` whenever it is inside, so the
/// inside rows are one contiguous copy, after which the few columns outside `columns` (which
/// picked up a neighbouring row's elements) are zeroed. One `memcpy` per row of the unfolded
/// matrix instead of one per output row.
#[allow(clippy::too_many_arguments)]
fn unfold_row_same_width<T: Float>(
    plane: &[T],
    width: usize,
    in_rows: usize,
    out_rows: usize,
    dy: isize,
    dx: isize,
    columns: Range<usize>,
    first: usize,
    dst: &mut [T],
) {
    let end = first + dst.len();
    // Output rows whose input row y + dy exists.
    let row_lo = dy.min(0).unsigned_abs().min(out_rows);
    let row_hi = (in_rows as isize - dy).clamp(row_lo as isize, out_rows as isize) as usize;
    let (copy_lo, copy_hi) = (first.max(row_lo * width), end.min(row_hi * width));
    if copy_lo >= copy_hi {
        dst.fill(T::ZERO);
        return;
    }
    dst[..copy_lo - first].fill(T::ZERO);
    dst[copy_hi - first..].fill(T::ZERO);
    // Source index of position p is p + delta. Positions whose source falls outside the plane
    // are columns outside `columns` (an inside row and column is always in the plane), zeroed
    // below with the rest of them.
    let delta = dy * width as isize + dx;
    let src_lo = ((copy_lo as isize).max(-delta) as usize).min(copy_hi);
    let src_hi = (copy_hi as isize)
        .min(plane.len() as isize - delta)
        .max(src_lo as isize) as usize;
    if src_lo < src_hi {
        // Non-negative: src_lo >= -delta here.
        let start = (src_lo as isize + delta) as usize;
        dst[src_lo - first..src_hi - first]
            .copy_from_slice(&plane[start..start + (src_hi - src_lo)]);
    }
    // One element per row and outside column: a strided walk, no per-row range arithmetic.
    for x in (0..columns.start).chain(columns.end..width) {
        let mut p = copy_lo - copy_lo % width + x;
        if p < copy_lo {
            p += width;
        }
        while p < copy_hi {
            dst[p - first] = T::ZERO;
            p += width;
        }
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
        im2col(&input, 1, &g, 0..4, &mut col, 1);
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 5.0, // tap (0, 0)
            0.0, 0.0, 4.0, 6.0, // tap (0, 1)
            0.0, 2.0, 0.0, 8.0, // tap (1, 0)
            1.0, 3.0, 7.0, 9.0, // tap (1, 1)
        ];
        assert_eq!(col, expected);
        // Any column range gives the matching columns.
        for start in 0..4 {
            for end in start..=4 {
                let width = end - start;
                let mut part = vec![f32::NAN; 4 * width];
                im2col(&input, 1, &g, start..end, &mut part, 1);
                for row in 0..4 {
                    assert_eq!(
                        part[row * width..(row + 1) * width],
                        expected[row * 4 + start..row * 4 + end]
                    );
                }
            }
        }
    }

    /// im2col straight from the definition: row (c, tap), column p.
    fn naive(input: &[f32], channels: usize, g: &WindowGeometry) -> Vec<f32> {
        let rank = g.in_dims.len();
        let mut col = Vec::new();
        for c in 0..channels {
            for tap in 0..g.kernel_len {
                for p in 0..g.out_len {
                    let (mut t, mut q, mut at, mut inside) = (tap, p, 0usize, true);
                    let mut coords = vec![0isize; rank];
                    for axis in (0..rank).rev() {
                        let (k, o) = (t % g.kernel[axis], q % g.out_dims[axis]);
                        t /= g.kernel[axis];
                        q /= g.out_dims[axis];
                        coords[axis] = (o * g.strides[axis] + k * g.dilations[axis]) as isize
                            - g.pads_begin[axis] as isize;
                    }
                    for (&i, &extent) in coords.iter().zip(&g.in_dims) {
                        inside &= i >= 0 && (i as usize) < extent;
                        at = at * extent + i.max(0) as usize;
                    }
                    col.push(if inside {
                        input[c * g.in_len + at]
                    } else {
                        0.0
                    });
                }
            }
        }
        col
    }

    #[test]
    fn same_width_fast_path_matches_the_definition() {
        // Stride 1 with output rows as wide as input rows, 1-D and 2-D, odd and even kernels,
        // dilations, asymmetric pads, and every column range of a few widths.
        // (input dims, kernel, pads begin, pads end, dilations)
        type Case = (
            &'static [usize],
            &'static [usize],
            &'static [usize],
            &'static [usize],
            &'static [usize],
        );
        let cases: [Case; 6] = [
            (&[5, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]),
            (&[4, 6], &[3, 3], &[0, 1], &[0, 1], &[1, 1]),
            (&[6, 5], &[2, 4], &[1, 2], &[0, 1], &[1, 1]),
            (&[5, 7], &[3, 3], &[2, 2], &[2, 2], &[2, 2]),
            (&[3, 2], &[5, 5], &[2, 2], &[2, 2], &[1, 1]),
            (&[9], &[3], &[1], &[1], &[1]),
        ];
        for (in_dims, kernel, pads_begin, pads_end, dilations) in cases {
            let attrs = WindowAttrs {
                kernel,
                strides: &[],
                pads_begin,
                pads_end,
                dilations,
                ceil_mode: false,
            };
            let g = WindowGeometry::new("test", in_dims, &attrs).unwrap();
            assert_eq!(
                g.out_dims.last(),
                g.in_dims.last(),
                "{in_dims:?} {kernel:?}"
            );
            let channels = 2;
            let input: Vec<f32> = (0..channels * g.in_len).map(|v| v as f32 + 1.0).collect();
            let expected = naive(&input, channels, &g);
            let rows = channels * g.kernel_len;
            for start in 0..g.out_len {
                for end in [start + 1, (start + 5).min(g.out_len), g.out_len] {
                    let width = end - start;
                    let mut col = vec![f32::NAN; rows * width];
                    im2col(&input, channels, &g, start..end, &mut col, 1);
                    for row in 0..rows {
                        assert_eq!(
                            col[row * width..(row + 1) * width],
                            expected[row * g.out_len + start..row * g.out_len + end],
                            "{in_dims:?} kernel {kernel:?} pads {pads_begin:?}/{pads_end:?} \
                             row {row} columns {start}..{end}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn padding_wider_than_the_input_is_all_zero_not_a_panic() {
        // pytorch Conv1d_pad2size1: width 1, kernel 5, pad 2 on both sides -> width 1; only
        // the middle tap sees the input. Tap 0 has no valid position at all (lo > hi before
        // clamping), which used to form a negative start index.
        let attrs = WindowAttrs {
            kernel: &[5],
            strides: &[1],
            pads_begin: &[2],
            pads_end: &[2],
            dilations: &[],
            ceil_mode: false,
        };
        let g = WindowGeometry::new("test", &[1], &attrs).unwrap();
        assert_eq!(g.out_dims.as_slice(), &[1]);
        let mut col = vec![f32::NAN; 2 * 5];
        im2col(&[7.0, -3.0], 2, &g, 0..1, &mut col, 1);
        assert_eq!(col, [0.0, 0.0, 7.0, 0.0, 0.0, 0.0, 0.0, -3.0, 0.0, 0.0]);
        // 2-D with a stride: 1x2 input, 3x3 kernel, pads 2, stride 2 -> 2x2 output.
        let attrs = WindowAttrs {
            kernel: &[3, 3],
            strides: &[2, 2],
            pads_begin: &[2, 2],
            pads_end: &[2, 2],
            dilations: &[],
            ceil_mode: false,
        };
        let g = WindowGeometry::new("test", &[1, 2], &attrs).unwrap();
        assert_eq!(g.out_dims.as_slice(), &[2, 2]);
        let mut col = vec![f32::NAN; 9 * 4];
        im2col(&[1.0, 2.0], 1, &g, 0..4, &mut col, 1);
        // Output (oh, ow) reads input (2 * oh + kh - 2, 2 * ow + kw - 2): only kh = 0 at
        // oh = 1 and kh = 2 at oh = 0 reach input row 0; the middle kernel row never does.
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 1.0, // tap (0, 0)
            0.0, 0.0, 0.0, 2.0, // tap (0, 1)
            0.0, 0.0, 1.0, 0.0, // tap (0, 2)
            0.0, 0.0, 0.0, 0.0, // tap (1, 0)
            0.0, 0.0, 0.0, 0.0, // tap (1, 1)
            0.0, 0.0, 0.0, 0.0, // tap (1, 2)
            0.0, 1.0, 0.0, 0.0, // tap (2, 0)
            0.0, 2.0, 0.0, 0.0, // tap (2, 1)
            1.0, 0.0, 0.0, 0.0, // tap (2, 2)
        ];
        assert_eq!(col, expected);
    }

    /// Every block the GEMM can ask for, unfolded straight into slivers, holds what the plain
    /// unfold puts at the same rows and columns (zero past the last column): 1-D, 2-D and 3-D
    /// windows with strides, pads and dilations, sliver widths from 1 to wider than the row
    /// buffer, blocks that start mid-depth and mid-row.
    #[test]
    fn packed_blocks_equal_the_unfolded_matrix() {
        let mut rng = crate::support::rng::Rng::new(0x1b2c);
        for case in 0..200 {
            let rank = 1 + rng.below(3);
            let in_dims: Vec<usize> = (0..rank).map(|_| 1 + rng.below(12)).collect();
            let kernel: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
            let strides: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
            let pads: Vec<usize> = (0..rank).map(|_| rng.below(2)).collect();
            let dilations: Vec<usize> = (0..rank).map(|_| 1 + rng.below(2)).collect();
            let attrs = WindowAttrs {
                kernel: &kernel,
                strides: &strides,
                pads_begin: &pads,
                pads_end: &pads,
                dilations: &dilations,
                ceil_mode: false,
            };
            let Ok(g) = WindowGeometry::new("test", &in_dims, &attrs) else {
                continue;
            };
            let channels = 1 + rng.below(3);
            let (rows, cols) = (channels * g.kernel_len, g.out_len);
            if cols == 0 {
                continue;
            }
            let input = rng.vec(channels * g.in_len);
            let mut full = vec![f32::NAN; rows * cols];
            im2col(&input, channels, &g, 0..cols, &mut full, 1);
            let nr = [1, 3, 8, 16, 32, 600][rng.below(6)];
            let p0 = rng.below(rows);
            let kc = 1 + rng.below(rows - p0);
            let j0 = rng.below(cols);
            let block = BBlock {
                p0,
                kc,
                j0,
                cols: 1 + rng.below(cols - j0),
                nr,
            };
            let mut dst = vec![f32::NAN; block.elements()];
            unfold_packed(&input, &g, block, &mut dst);
            for (s, sliver) in dst.chunks(kc * nr).enumerate() {
                for p in 0..kc {
                    for j in 0..nr {
                        let column = s * nr + j;
                        let expected = if column < block.cols {
                            full[(p0 + p) * cols + j0 + column]
                        } else {
                            0.0
                        };
                        assert_eq!(
                            sliver[p * nr + j],
                            expected,
                            "case {case}: {block:?} sliver {s} row {p} column {j}"
                        );
                    }
                }
            }
        }
    }
}
