//! MaxPool over 2-D planes without dilation or argmax indices — the pooling layers of CNNs — as
//! two separable passes, planes spread over the threads.
//!
//! The maximum (with NaN winning, as everywhere in MaxPool) does not depend on the order the
//! taps are taken in, so a `kh x kw` window is the maximum over `kw` columns of the maximum over
//! `kh` rows: per output row, the input rows under the window are first folded into one row
//! (contiguous, vectorized), then each output takes `kw` elements of it — `kh + kw` steps per
//! output instead of `kh * kw`.
//!
//! f32 planes take SIMD kernels first: on AVX-512, `kh x 2` and `kh x 3` windows at column
//! stride 1 or 2 (CNNs' pools) take `max_pool_direct` (column maxima in registers,
//! straight from the input rows; its docs hold the measured numbers), other windows at column
//! stride 1 or 2 `max_pool_folded` (AVX-512 or AVX2, folded rows in a buffer). The
//! rest, and other element types, take the portable row and phase-plane paths here.
//!
//! On several threads the planes are split into equal tasks, a multiple of the threads (up to
//! four each, of at least `TASK_MIN_OUTPUTS` outputs): tasks of a fixed size left 256 planes
//! of 13 x 13 in 5 tasks, 3 of them on one thread.

use std::any::TypeId;

use bytemuck::Pod;

use crate::kernels::error::KernelResult;
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::phase_planes::{fill_phase_planes, Axis, FlatGeometry, BLOCK, MAX_TAPS};
use crate::kernels::simd::multiversion;
use crate::kernels::spatial::{check_len, WindowGeometry};
use crate::ops::pooling::pool_kernel::{
    geometry, max_pool, max_step, MaxPoolElement, PoolParams, StorageOrder,
};

/// Widest input row the row buffer (on the stack) holds.
const ROW_MAX: usize = 2048;
/// Planes per task are grouped to at least this many output elements.
const TASK_MIN_OUTPUTS: usize = 1 << 13;

/// MaxPool without indices on up to `threads` threads: 2-D windows without dilation take the
/// separable kernels ([`max_pool_2d`](max_pool_2d): on AVX-512 the direct kernel for f32
/// `kh x 2`/`kh x 3` windows, see the module docs), the rest [`max_pool`].
pub fn max_pool_threaded<T: MaxPoolElement>(
    input: &[T],
    input_dims: &[usize],
    p: &PoolParams,
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    const OP: &str = "MaxPool";
    let (planes, g) = geometry(OP, input_dims, p)?;
    if !supports(&g) {
        return max_pool(input, input_dims, p, out, None, StorageOrder::RowMajor);
    }
    check_len(OP, "input", input.len(), planes * g.in_len)?;
    check_len(OP, "output", out.len(), planes * g.out_len)?;
    max_pool_2d(&g, planes, input, out, threads);
    Ok(())
}

/// Whether [`max_pool_2d`] handles this geometry: 2 spatial dims, dilation 1, rows that fit the
/// buffer.
pub(crate) fn supports(g: &WindowGeometry) -> bool {
    g.in_dims.len() == 2 && g.dilations.iter().all(|&d| d == 1) && g.in_dims[1] <= ROW_MAX
}

/// MaxPool of `planes` planes of `g`'s geometry; lengths were checked by the caller. A window
/// lying wholly in the padding gives `T::LOWEST`.
pub(crate) fn max_pool_2d<T: MaxPoolElement>(
    g: &WindowGeometry,
    planes: usize,
    input: &[T],
    out: &mut [T],
    threads: usize,
) {
    if g.out_len == 0 || planes == 0 {
        return;
    }
    // Planes `first..` into `y`.
    let run = |first: usize, y: &mut [T]| {
        let count = y.len() / g.out_len;
        planes_max(g, &input[first * g.in_len..][..count * g.in_len], y);
    };
    let outputs = planes * g.out_len;
    if threads <= 1 || planes < 2 || outputs < 2 * TASK_MIN_OUTPUTS {
        run(0, out);
    } else {
        // Equal tasks, a multiple of the threads (up to 4 each, of at least TASK_MIN_OUTPUTS
        // outputs): 256 planes of 13 x 13 made 5 tasks of 49 planes, 3 on one thread.
        let most = (outputs / TASK_MIN_OUTPUTS).min(planes).min(4 * threads);
        let tasks = (most / threads * threads).max(threads.min(planes));
        let per_task = planes.div_ceil(tasks);
        crate::parallel::for_each_chunk_mut(out, g.out_len * per_task, 1, |i, y| {
            run(i * per_task, y)
        });
    }
}

/// The in-bounds input range `lo..hi` of output `o`'s window along an axis.
#[inline(always)]
fn window(o: usize, stride: usize, pad: usize, kernel: usize, input: usize) -> (usize, usize) {
    let start = (o * stride) as isize - pad as isize;
    let lo = start.max(0) as usize;
    let hi = ((start + kernel as isize).max(0) as usize).min(input);
    (lo.min(hi), hi)
}

/// Consecutive planes: `x` holds whole input planes, `y` the matching output planes.
fn planes_max<T: MaxPoolElement>(g: &WindowGeometry, x: &[T], y: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(x), Some(y)) = (as_f32(x), as_f32_mut(y)) {
        if super::max_pool_direct::planes_max(g, x, y) {
            lowest_where_no_input(g, y);
            return;
        }
        if super::max_pool_folded::supports(g) {
            // One call for the whole run: its buffers and checks are set up once.
            super::max_pool_folded::planes_max(g, x, y);
            lowest_where_no_input(g, y);
            return;
        }
    }
    for (x, y) in x.chunks_exact(g.in_len).zip(y.chunks_exact_mut(g.out_len)) {
        plane_max(g, x, y);
    }
}

fn plane_max<T: MaxPoolElement>(g: &WindowGeometry, x: &[T], y: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(flip) = byte_flip::<T>() {
        if super::max_pool_int_avx512::supports(g) {
            let x = bytemuck::cast_slice::<T, u8>(x);
            super::max_pool_int_avx512::plane_max(g, x, bytemuck::cast_slice_mut(y), flip);
            return;
        }
    }
    let (rows, cols) = (Axis::of(g, 0), Axis::of(g, 1));
    if let Some(flat) = FlatGeometry::of(rows, cols) {
        with_pack_buffers::<T, _>(flat.buffer_len, flat.virtual_len, |buffer, virtual_y| {
            flat_max(x, rows, cols, &flat, buffer, virtual_y, y)
        });
        lowest_where_no_input(g, y);
        return;
    }
    let iw = g.in_dims[1];
    // Per-thread buffers: clearing arrays on the stack for every plane cost more than the pooling.
    with_pack_buffers::<T, _>(iw, 2 * ROW_MAX, |row, phases| {
        let (even, odd) = phases.split_at_mut(ROW_MAX);
        plane_max_rows(g, x, y, row, [even, odd]);
    });
}

fn plane_max_rows<T: MaxPoolElement>(
    g: &WindowGeometry,
    x: &[T],
    y: &mut [T],
    row: &mut [T],
    mut phases: [&mut [T]; 2],
) {
    let (ih, iw) = (g.in_dims[0], g.in_dims[1]);
    let (oh, ow) = (g.out_dims[0], g.out_dims[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (ph, pw) = (g.pads_begin[0], g.pads_begin[1]);
    for (oy, y_row) in y.chunks_exact_mut(ow).enumerate().take(oh) {
        let (r0, r1) = window(oy, sh, ph, kh, ih);
        if r0 == r1 {
            y_row.fill(T::LOWEST);
            continue;
        }
        row.copy_from_slice(&x[r0 * iw..][..iw]);
        for r in r0 + 1..r1 {
            fold_rows(row, &x[r * iw..][..iw]);
        }
        if !fold_columns(row, pw, sw, kw, y_row, &mut phases) {
            for (ox, out) in y_row.iter_mut().enumerate() {
                let (c0, c1) = window(ox, sw, pw, kw, iw);
                *out = if c0 == c1 {
                    T::LOWEST
                } else {
                    row[c0 + 1..c1]
                        .iter()
                        .fold(row[c0], |best, &v| max_step(best, v))
                };
            }
            continue;
        }
        // Windows wholly in the padding (only possible at the ends) hold no input.
        for ox in
            (0..ow).take_while(|&ox| window(ox, sw, pw, kw, iw).0 == window(ox, sw, pw, kw, iw).1)
        {
            y_row[ox] = T::LOWEST;
        }
        for ox in (0..ow)
            .rev()
            .take_while(|&ox| window(ox, sw, pw, kw, iw).0 == window(ox, sw, pw, kw, iw).1)
        {
            y_row[ox] = T::LOWEST;
        }
    }
}

multiversion! {
    /// The whole plane on phase planes padded with `BOTTOM` (which no maximum takes): each output
    /// folds its window's taps, [`BLOCK`] outputs at a time in registers, over flat runs.
    fn flat_max<T: MaxPoolElement>(
        x: &[T],
        rows: Axis,
        cols: Axis,
        g: &FlatGeometry,
        buffer: &mut [T],
        virtual_y: &mut [T],
        y: &mut [T],
    ) {
        fill_phase_planes(x, rows, cols, g, T::BOTTOM, buffer);
        let taps = rows.taps * cols.taps;
        let mut starts = [0usize; MAX_TAPS];
        for (t, start) in starts[..taps].iter_mut().enumerate() {
            *start = g.tap_start(rows, cols, t / cols.taps, t % cols.taps);
        }
        for (b, out) in virtual_y.chunks_exact_mut(BLOCK).enumerate() {
            let mut acc = [T::BOTTOM; BLOCK];
            for &start in &starts[..taps] {
                let src = &buffer[start + b * BLOCK..][..BLOCK];
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a = max_step(*a, v);
                }
            }
            out.copy_from_slice(&acc);
        }
        let ow = cols.output;
        for (y_row, v_row) in y.chunks_exact_mut(ow).zip(virtual_y.chunks_exact(g.wp)) {
            for (d, &v) in y_row.iter_mut().zip(&v_row[..ow]) {
                *d = v;
            }
        }
    }
}

/// For a byte type, what maps it to u8 order (0 for u8, the sign bit for i8).
#[cfg(target_arch = "x86_64")]
fn byte_flip<T: Pod>() -> Option<u8> {
    let t = TypeId::of::<T>();
    if t == TypeId::of::<u8>() {
        Some(0)
    } else if t == TypeId::of::<i8>() {
        Some(0x80)
    } else {
        None
    }
}

fn as_f32<T: Pod>(s: &[T]) -> Option<&[f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice(s))
}

fn as_f32_mut<T: Pod>(s: &mut [T]) -> Option<&mut [f32]> {
    (TypeId::of::<T>() == TypeId::of::<f32>()).then(|| bytemuck::cast_slice_mut(s))
}

/// Outputs whose window lies wholly in the padding (rows or columns at the ends) hold no input:
/// they are `T::LOWEST`, not the `BOTTOM` the flat fold leaves. `y` holds whole output planes.
fn lowest_where_no_input<T: MaxPoolElement>(g: &WindowGeometry, y: &mut [T]) {
    let (ih, iw) = (g.in_dims[0], g.in_dims[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (ph, pw) = (g.pads_begin[0], g.pads_begin[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let ow = g.out_dims[1];
    let empty_column = |ox: usize| {
        let (c0, c1) = window(ox, sw, pw, kw, iw);
        c0 == c1
    };
    let oh = g.out_dims[0];
    let empty_row = |oy: usize| {
        let (r0, r1) = window(oy, sh, ph, kh, ih);
        r0 == r1
    };
    // Windows only empty out at the ends of an axis: most geometries have none at all.
    if oh == 0
        || ow == 0
        || !(empty_row(0) || empty_row(oh - 1) || empty_column(0) || empty_column(ow - 1))
    {
        return;
    }
    let rows = y
        .chunks_exact_mut(oh * ow)
        .flat_map(|plane| plane.chunks_exact_mut(ow));
    for (oy, y_row) in rows.enumerate().map(|(i, row)| (i % oh, row)) {
        if empty_row(oy) {
            y_row.fill(T::LOWEST);
            continue;
        }
        for ox in (0..ow).take_while(|&ox| empty_column(ox)) {
            y_row[ox] = T::LOWEST;
        }
        for ox in (0..ow).rev().take_while(|&ox| empty_column(ox)) {
            y_row[ox] = T::LOWEST;
        }
    }
}

/// The column pass for strides 1 and 2: the folded row, padded with `BOTTOM` (which no maximum
/// takes), is split by stride phase (`phases[r][i]` = padded column `i * stride + r`), so that
/// each tap is a contiguous, vectorized fold over the whole output row. False (nothing written)
/// for other strides or rows too wide for the buffers.
fn fold_columns<T: MaxPoolElement>(
    row: &[T],
    pad: usize,
    stride: usize,
    kernel: usize,
    y_row: &mut [T],
    phases: &mut [&mut [T]; 2],
) -> bool {
    let ow = y_row.len();
    let span = (ow - 1) * stride + kernel;
    if !(1..=2).contains(&stride) || span.div_ceil(stride) + 1 > ROW_MAX {
        return false;
    }
    let at = |c: usize| {
        if c >= pad && c - pad < row.len() {
            row[c - pad]
        } else {
            T::BOTTOM
        }
    };
    if stride == 1 {
        for (c, slot) in phases[0][..span].iter_mut().enumerate() {
            *slot = at(c);
        }
    } else {
        let [even, odd] = phases;
        for i in 0..span.div_ceil(2) {
            even[i] = at(2 * i);
            odd[i] = at(2 * i + 1);
        }
    }
    y_row.copy_from_slice(&phases[0][..ow]);
    for t in 1..kernel {
        let (r, first) = (t % stride, t / stride);
        fold_rows(y_row, &phases[r][first..first + ow]);
    }
    true
}

multiversion! {
    /// `acc = max(acc, row)` element-wise, NaN winning.
    fn fold_rows<T: MaxPoolElement>(acc: &mut [T], row: &[T]) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a = max_step(*a, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    /// `max_pool_threaded` gives the same bits as the reference walk of `max_pool` (any NaN
    /// matching any NaN).
    fn same_as_reference<T: MaxPoolElement + Into<f64>>(
        input: &[T],
        dims: &[usize],
        p: &PoolParams,
        threads: usize,
        what: &str,
    ) {
        let out_len: usize = crate::ops::pooling::pool_kernel::pool_output_dims(dims, p)
            .unwrap()
            .iter()
            .product();
        let mut expected = vec![T::LOWEST; out_len];
        max_pool(input, dims, p, &mut expected, None, StorageOrder::RowMajor).unwrap();
        let mut got = vec![T::BOTTOM; out_len];
        max_pool_threaded(input, dims, p, &mut got, threads).unwrap();
        let same = got.iter().zip(&expected).all(|(&a, &b)| {
            let (a, b): (f64, f64) = (a.into(), b.into());
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        });
        assert!(same, "{what}: {dims:?} {p:?} {threads}t");
    }

    /// The separable kernels against the per-row reference walk of `max_pool`, on random 2-D
    /// geometries (pads, strides, ceil_mode, windows in the padding), with NaNs, on 1 and 2
    /// threads: the same bits. f32 takes the AVX-512 kernel where the CPU has it (strides 1
    /// and 2), f64 the phase-plane and row paths.
    #[test]
    fn separable_max_pool_matches_the_reference_walk() {
        let mut rng = Rng::new(0x9a01);
        for case in 0..300 {
            let kernel = vec![rng.range(1, 4), rng.range(1, 4)];
            let p = PoolParams {
                strides: vec![rng.range(1, 4), rng.range(1, 4)],
                pads_begin: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                pads_end: vec![rng.below(kernel[0]), rng.below(kernel[1])],
                ceil_mode: rng.below(2) == 0,
                kernel,
                ..PoolParams::default()
            };
            let dims = [
                rng.range(1, 2),
                rng.range(1, 40),
                rng.range(p.kernel[0], 20),
                rng.range(p.kernel[1], 70),
            ];
            let mut input = rng.vec(dims.iter().product());
            if case % 5 == 0 {
                let at = rng.below(input.len());
                input[at] = f32::NAN;
            }
            for threads in [1, 2] {
                same_as_reference(&input, &dims, &p, threads, &format!("case {case}"));
            }
            let input: Vec<f64> = input.iter().map(|&v| v as f64).collect();
            same_as_reference(&input, &dims, &p, 1, &format!("case {case} (f64)"));
        }
    }

    /// The windows compiled on their own (3x3 at strides 2 and 1, 2x2 at stride 2: CNNs'
    /// pools) match the reference walk: any padding, ceil mode, NaNs, planes up to 60 wide.
    #[test]
    fn compiled_windows_match_the_reference_walk() {
        let mut rng = Rng::new(0x9a02);
        for case in 0..120 {
            let (k, s) = [(3, 2), (3, 1), (2, 2)][case % 3];
            let p = PoolParams {
                strides: vec![s, s],
                pads_begin: vec![rng.below(k), rng.below(k)],
                pads_end: vec![rng.below(k), rng.below(k)],
                ceil_mode: rng.below(2) == 0,
                kernel: vec![k, k],
                ..PoolParams::default()
            };
            let dims = [1, rng.range(1, 20), rng.range(k, 30), rng.range(k, 60)];
            let mut input = rng.vec(dims.iter().product());
            if case % 4 == 0 {
                let at = rng.below(input.len());
                input[at] = f32::NAN;
            }
            for threads in [1, 2] {
                same_as_reference(&input, &dims, &p, threads, &format!("case {case}"));
            }
        }
    }

    /// The portable row and phase-plane paths (what f32 takes without AVX2 or AVX-512) on the
    /// common windows: the reference walk's bits.
    #[test]
    fn portable_f32_path_matches_the_reference_walk() {
        let mut rng = Rng::new(0x9a05);
        for case in 0..150 {
            let (k, s) = [(3, 2), (3, 1), (2, 2), (2, 1)][case % 4];
            let kh = rng.range(1, 3);
            let p = PoolParams {
                strides: vec![rng.range(1, 2), s],
                pads_begin: vec![rng.below(kh), rng.below(k)],
                pads_end: vec![rng.below(kh), rng.below(k)],
                ceil_mode: rng.below(2) == 0,
                kernel: vec![kh, k],
                ..PoolParams::default()
            };
            let dims = [1, rng.range(1, 3), rng.range(3, 20), rng.range(k, 50)];
            let (planes, g) = geometry("MaxPool", &dims, &p).unwrap();
            let mut input = rng.vec(dims.iter().product());
            if case % 4 == 1 {
                let at = rng.below(input.len());
                input[at] = f32::NAN;
            }
            let mut expected = vec![0.0; planes * g.out_len];
            max_pool(
                &input,
                &dims,
                &p,
                &mut expected,
                None,
                StorageOrder::RowMajor,
            )
            .unwrap();
            let mut got = vec![0.0; planes * g.out_len];
            for (x, y) in input
                .chunks_exact(g.in_len)
                .zip(got.chunks_exact_mut(g.out_len))
            {
                plane_max(&g, x, y);
            }
            let same = got
                .iter()
                .zip(&expected)
                .all(|(&a, &b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            assert!(same, "case {case}: {dims:?} {p:?}");
        }
    }

    #[test]
    fn only_plain_2d_windows_take_the_separable_kernel() {
        let p = PoolParams {
            kernel: vec![3, 3],
            strides: vec![2, 2],
            ..PoolParams::default()
        };
        let (_, g) = geometry("MaxPool", &[1, 4, 9, 9], &p).unwrap();
        assert!(supports(&g));
        let dilated = PoolParams {
            dilations: vec![2, 1],
            ..p.clone()
        };
        let (_, g) = geometry("MaxPool", &[1, 4, 9, 9], &dilated).unwrap();
        assert!(!supports(&g));
        let (_, g) = geometry(
            "MaxPool",
            &[1, 4, 9],
            &PoolParams {
                kernel: vec![3],
                ..PoolParams::default()
            },
        )
        .unwrap();
        assert!(!supports(&g));
        // Wrong buffer lengths are errors on the fast path too.
        let err = max_pool_threaded(&[0.0f32; 10], &[1, 4, 9, 9], &p, &mut [0.0; 64], 1);
        assert!(err.is_err());
    }
}
