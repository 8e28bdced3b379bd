//! Depthwise convolution (one input and one output channel per group, 1-D or 2-D): a direct
//! kernel per channel plane, planes spread over the threads.
//!
//! im2col + GEMM on a depthwise layer is a `1 x k*k` by `k*k x HW` product per channel — all
//! packing and no reuse. Directly, a plane is first copied once into zero-padded *phase planes*
//! (one per stride phase: padded element `(r, c)` goes to phase `(r % sr, c % sc)` at
//! `(r / sr, c / sc)`). Every tap then reads its inputs as one flat run of a phase plane: output
//! `(oy, ox)` of a virtual output `WP` columns wide (the phase planes' width, `>= OW`) takes tap
//! `(ky, kx)` from flat index `oy * WP + ox + shift(ky, kx)`. So the whole plane is one long
//! multiply-add per tap, whatever its width (7x7 planes fill vectors as well as 112x112 ones),
//! with no edge cases for padding; the `WP - OW` extra columns per row are computed and dropped.
//! Outputs are accumulated [`BLOCK`] at a time in registers over all taps.

use bytemuck::Pod;

use crate::kernels::activation::Activation;
use crate::kernels::float::Float;
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::phase_planes::{fill_phase_planes, Axis, FlatGeometry, BLOCK, MAX_TAPS};
use crate::kernels::simd::multiversion;
use crate::kernels::spatial::WindowGeometry;

use super::depthwise_blocked;

/// Planes smaller than this many multiply-adds are grouped per task, so a task is worth handing
/// to another thread.
const TASK_MIN_MULADDS: usize = 1 << 15;

/// Runs `planes(first, y)` over `out` (whole output planes of `out_len`, `y` starting at plane
/// `first`): on the calling thread when the work is small, else in contiguous runs of planes
/// per task of at least [`TASK_MIN_MULADDS`] (each core reads its own channels' input). For the
/// direct depthwise kernels that take a run of planes at a time.
pub(super) fn for_each_plane_run<T: Send>(
    out: &mut [T],
    out_len: usize,
    per_plane_muladds: usize,
    threads: usize,
    planes: impl Fn(usize, &mut [T]) + Sync,
) {
    let per_plane = per_plane_muladds.max(1);
    let count = out.len() / out_len.max(1);
    if threads <= 1 || count < 2 || per_plane.saturating_mul(count) < 2 * TASK_MIN_MULADDS {
        planes(0, out);
    } else {
        let per_task = TASK_MIN_MULADDS.div_ceil(per_plane);
        crate::parallel::for_each_chunk_mut(out, out_len * per_task, 1, |i, y| {
            planes(i * per_task, y)
        });
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
/// w.kernel_len`, `bias` `out_channels` and `residual` (added before `post`) as `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise<T: Float + Pod>(
    input: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    in_channels: usize,
    out_channels: usize,
    w: &WindowGeometry,
    post: Activation,
    residual: Option<&[T]>,
    out: &mut [T],
    threads: usize,
) {
    if w.out_len == 0 {
        return;
    }
    let (rows, cols) = match w.in_dims.len() {
        1 => (Axis::UNIT, Axis::of(w, 0)),
        _ => (Axis::of(w, 0), Axis::of(w, 1)),
    };
    let multiplier = (out_channels / in_channels.max(1)).max(1);
    let conv_plane = |(p, y): (usize, &mut [T])| {
        let (b, ch) = (p / out_channels, p % out_channels);
        let x = &input[(b * in_channels + ch / multiplier) * w.in_len..][..w.in_len];
        let k = &weight[ch * w.kernel_len..][..w.kernel_len];
        let shift = bias.map_or(T::ZERO, |b| b[ch]);
        match residual {
            // Bias and activation while the plane is copied out of the flat buffer.
            None => plane(x, k, rows, cols, (shift, post), y),
            Some(r) => {
                plane(x, k, rows, cols, (T::ZERO, Activation::None), y);
                post.add_residual_bias_and_apply(y, Some(&r[p * w.out_len..][..w.out_len]), shift);
            }
        }
    };
    for_each_plane(w, out, threads, conv_plane);
}

/// Sums of every window (1-D or 2-D, at most [`MAX_TAPS`] taps): output plane `p` of `out` is
/// the input plane `p` convolved with a kernel of ones, the padding counting as zeros. False,
/// touching nothing, for a geometry it does not handle. Lengths were checked by the caller.
/// Small planes go to the channel-blocked kernel ([`depthwise_blocked::sums_pay`]).
pub(crate) fn window_sums<T: Float + Pod>(
    input: &[T],
    w: &WindowGeometry,
    out: &mut [T],
    threads: usize,
) -> bool {
    if !supports(w) || w.kernel_len > MAX_TAPS {
        return false;
    }
    if w.out_len == 0 {
        return true;
    }
    let planes = out.len() / w.out_len;
    if depthwise_blocked::sums_pay::<T>(w, planes) {
        depthwise_blocked::window_sums(input, planes, w, out, threads);
        return true;
    }
    let (rows, cols) = match w.in_dims.len() {
        1 => (Axis::UNIT, Axis::of(w, 0)),
        _ => (Axis::of(w, 0), Axis::of(w, 1)),
    };
    let ones = [T::ONE; MAX_TAPS];
    for_each_plane(w, out, threads, |(p, y)| {
        plane(
            &input[p * w.in_len..][..w.in_len],
            &ones[..w.kernel_len],
            rows,
            cols,
            (T::ZERO, Activation::None),
            y,
        )
    });
    true
}

/// Runs `f((p, plane))` for every output plane, spread over the threads in tasks of enough work.
fn for_each_plane<T: Send>(
    w: &WindowGeometry,
    out: &mut [T],
    threads: usize,
    f: impl Fn((usize, &mut [T])) + Sync,
) {
    let per_plane = w.out_len.saturating_mul(w.kernel_len).max(1);
    let planes = out.len() / w.out_len;
    // Cancellation: planes poll the run's token; the run fails at its next check (run_control).
    let stop = crate::run_control::stop_token();
    let f = |(p, y): (usize, &mut [T])| {
        if !stop.should_stop_at(p) {
            f((p, y))
        }
    };
    if threads <= 1 || planes < 2 || per_plane.saturating_mul(planes) < 2 * TASK_MIN_MULADDS {
        out.chunks_mut(w.out_len).enumerate().for_each(f);
    } else {
        let per_task = TASK_MIN_MULADDS.div_ceil(per_plane);
        crate::parallel::for_each_chunk_mut(out, w.out_len, per_task, |i, y| f((i, y)));
    }
}

/// One plane, `y = post(conv(x, k) + shift)`, through the flat path when its buffers are small
/// enough.
fn plane<T: Float + Pod>(
    x: &[T],
    k: &[T],
    rows: Axis,
    cols: Axis,
    (shift, post): (T, Activation),
    y: &mut [T],
) {
    match FlatGeometry::of(rows, cols) {
        Some(g) => with_pack_buffers::<T, _>(g.buffer_len, g.virtual_len, |buffer, virtual_y| {
            flat_plane(x, k, rows, cols, &g, shift, post, buffer, virtual_y, y)
        }),
        None => {
            plane_conv(x, k, rows, cols, y);
            post.add_residual_bias_and_apply(y, None, shift);
        }
    }
}

multiversion! {
    /// The flat path: fill the phase planes, accumulate the virtual output, keep its first
    /// `cols.output` columns of every row, shifted and activated.
    fn flat_plane<T: Float>(
        x: &[T],
        k: &[T],
        rows: Axis,
        cols: Axis,
        g: &FlatGeometry,
        shift: T,
        post: Activation,
        buffer: &mut [T],
        virtual_y: &mut [T],
        y: &mut [T],
    ) {
        fill_phase_planes(x, rows, cols, g, T::ZERO, buffer);
        flat_taps(buffer, k, rows, cols, g, virtual_y);
        let ow = cols.output;
        for (y_row, v_row) in y.chunks_exact_mut(ow).zip(virtual_y.chunks_exact(g.wp)) {
            for (d, &v) in y_row.iter_mut().zip(&v_row[..ow]) {
                *d = v + shift;
            }
        }
        // The activation over the whole plane (still in cache): its match stays outside the
        // vectorized loop.
        post.apply_all(y);
    }
}

/// The virtual output `virtual_y[i] = sum over taps of k[tap] * buffer[tap_start + i]`,
/// [`BLOCK`] outputs at a time held in registers over every tap.
#[inline(always)]
fn flat_taps<T: Float>(
    buffer: &[T],
    k: &[T],
    rows: Axis,
    cols: Axis,
    g: &FlatGeometry,
    virtual_y: &mut [T],
) {
    let taps = rows.taps * cols.taps;
    let mut starts = [0usize; MAX_TAPS];
    for (t, start) in starts[..taps].iter_mut().enumerate() {
        *start = g.tap_start(rows, cols, t / cols.taps, t % cols.taps);
    }
    let (starts, k) = (&starts[..taps], &k[..taps]);
    for (b, out) in virtual_y.chunks_exact_mut(BLOCK).enumerate() {
        let mut acc = [T::ZERO; BLOCK];
        for (&start, &w) in starts.iter().zip(k) {
            let src = &buffer[start + b * BLOCK..][..BLOCK];
            for (a, &v) in acc.iter_mut().zip(src) {
                *a += w * v;
            }
        }
        out.copy_from_slice(&acc);
    }
}

multiversion! {
    /// One plane: `y = conv(x, k)` with `k` of `rows.taps x cols.taps`.
    fn plane_conv<T: Float>(x: &[T], k: &[T], rows: Axis, cols: Axis, y: &mut [T]) {
        let span = (cols.output - 1) * cols.stride + (cols.taps - 1) * cols.dilation + 1;
        if cols.stride > MAX_PHASES || span.div_ceil(cols.stride) > ROW_MAX {
            return plane_in_place(x, k, rows, cols, y);
        }
        // Each input row under the window is copied once per output row into zero-padded buffers,
        // split by stride phase (`phases[r][i]` = padded column `i * stride + r`), so that every
        // tap reads `output` contiguous elements: no edge ranges, whole vectors.
        let (stride, ow) = (cols.stride, cols.output);
        let mut phases = [[T::ZERO; ROW_MAX]; MAX_PHASES];
        // Per tap: phase and first element.
        let tap_at = |kx: usize| {
            let at = kx * cols.dilation;
            (at % stride, at / stride)
        };
        for (oy, y_row) in y.chunks_exact_mut(ow).enumerate() {
            y_row.fill(T::ZERO);
            for ky in 0..rows.taps {
                let iy = (oy * rows.stride) as isize + rows.offset(ky);
                if iy < 0 || iy >= rows.input as isize {
                    continue;
                }
                let x_row = &x[iy as usize * cols.input..][..cols.input];
                fill_phases(x_row, cols.pad, span, stride, &mut phases);
                let taps = &k[ky * cols.taps..][..cols.taps];
                if let [w0, w1, w2] = *taps {
                    let ((r0, s0), (r1, s1), (r2, s2)) = (tap_at(0), tap_at(1), tap_at(2));
                    let (p0, p1, p2) = (
                        &phases[r0][s0..s0 + ow],
                        &phases[r1][s1..s1 + ow],
                        &phases[r2][s2..s2 + ow],
                    );
                    for (((o, &a), &b), &c) in y_row.iter_mut().zip(p0).zip(p1).zip(p2) {
                        *o += w0 * a + w1 * b + w2 * c;
                    }
                } else {
                    for (kx, &w) in taps.iter().enumerate() {
                        let (r, start) = tap_at(kx);
                        for (o, &v) in y_row.iter_mut().zip(&phases[r][start..start + ow]) {
                            *o += w * v;
                        }
                    }
                }
            }
        }
    }
}

/// Writes padded columns `0..span` of an input row (`pad` zeros, the row, zeros) into the
/// stride phases: `phases[r][i]` = padded column `i * stride + r` (stride 1 or 2).
#[inline(always)]
fn fill_phases<T: Float>(
    x_row: &[T],
    pad: usize,
    span: usize,
    stride: usize,
    phases: &mut [[T; ROW_MAX]; MAX_PHASES],
) {
    // Padded columns lo..hi hold the row's elements 0..hi - lo.
    let lo = pad.min(span);
    let hi = (pad + x_row.len()).min(span);
    if stride == 1 {
        let row = &mut phases[0][..span];
        row[..lo].fill(T::ZERO);
        row[lo..hi].copy_from_slice(&x_row[..hi - lo]);
        row[hi..].fill(T::ZERO);
        return;
    }
    let at = |j: usize| {
        if lo <= j && j < hi {
            x_row[j - pad]
        } else {
            T::ZERO
        }
    };
    let [even, odd] = phases;
    for (i, (e, o)) in even
        .iter_mut()
        .zip(odd.iter_mut())
        .take(span.div_ceil(2))
        .enumerate()
    {
        *e = at(2 * i);
        *o = at(2 * i + 1);
    }
}

/// Longest padded input row (per stride phase) the row-buffer path takes; wider rows, or
/// strides above [`MAX_PHASES`], go through [`plane_in_place`].
const ROW_MAX: usize = 512;
/// Column strides the row-buffer path handles (one buffer per phase).
const MAX_PHASES: usize = 2;

/// One plane straight from the input: per output row and tap, the range of outputs whose tap
/// lies inside the input row (any stride and width).
#[inline(always)]
fn plane_in_place<T: Float>(x: &[T], k: &[T], rows: Axis, cols: Axis, y: &mut [T]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    fn axis(rng: &mut Rng, unit: bool) -> Axis {
        if unit {
            return Axis::UNIT;
        }
        let (taps, stride, dilation) = (rng.range(1, 6), rng.range(1, 4), rng.range(1, 3));
        let pad = rng.below(taps * dilation);
        let input = rng.range(1, 40);
        let span = (taps - 1) * dilation + 1;
        let padded = input + pad + rng.below(taps * dilation);
        let output = if padded >= span {
            (padded - span) / stride + 1
        } else {
            0
        };
        Axis {
            input,
            output,
            taps,
            stride,
            pad,
            dilation,
        }
    }

    #[test]
    fn flat_phase_planes_equal_the_direct_walk() {
        let mut rng = Rng::new(7);
        let mut checked = 0;
        while checked < 400 {
            let unit = rng.below(5) == 0;
            let rows = axis(&mut rng, unit);
            let cols = axis(&mut rng, false);
            if rows.output == 0 || cols.output == 0 {
                continue;
            }
            let x = rng.vec(rows.input * cols.input);
            let k = rng.vec(rows.taps * cols.taps);
            // Stale values in the reused buffers must not reach kept outputs.
            with_pack_buffers::<f32, _>(1 << 12, 1 << 12, |a, b| {
                a.fill(f32::NAN);
                b.fill(f32::NAN);
            });
            let mut flat = vec![0.0f32; rows.output * cols.output];
            plane(&x, &k, rows, cols, (0.0, Activation::None), &mut flat);
            let mut direct = vec![0.0f32; flat.len()];
            plane_in_place(&x, &k, rows, cols, &mut direct);
            for (i, (a, b)) in flat.iter().zip(&direct).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{rows:?} {cols:?} at {i}: {a} vs {b}"
                );
            }
            checked += 1;
        }
    }
}
