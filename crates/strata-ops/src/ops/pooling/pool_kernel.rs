//! ONNX MaxPool (with optional argmax indices), AveragePool and LpPool over N-d windows with
//! strides, asymmetric pads, dilations and ceil_mode. Each output walks only the in-bounds taps
//! of its window: padding never enters a max and counts for an average only when asked to.
//! MaxPool computes in f32, f64, i8 and u8 (opset 12+); the averages in floats.
//!
//! Values are computed a row of outputs at a time ([`pool_rows`]): the window spans of the outer
//! axes are the same for a whole output row, so each in-bounds input row under them is folded
//! into every output of the row in one tight loop. Each output still sees its taps in row-major
//! order, so results are exactly those of a per-window walk. MaxPool's argmax indices take the
//! per-window walk ([`slide`]).

use bytemuck::Pod;
use smallvec::SmallVec;

use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::float::Float;
use crate::kernels::spatial::{check_len, Dims, WindowAttrs, WindowGeometry};
use crate::ops::convolution::depthwise::window_sums;
use crate::ops::pooling::global_pool::{for_each_plane, plane_sum};
use crate::support::strided::advance_index;

/// An element MaxPool can compute in: ordered, with a lowest value (what a window lying wholly in
/// the padding yields) and, for floats, NaN (which wins any comparison, as in the ONNX reference).
pub trait MaxPoolElement: Copy + PartialOrd + Send + Sync + Pod + 'static {
    /// What a window without any in-bounds tap yields (the lowest finite value).
    const LOWEST: Self;
    /// Where a running maximum starts: no value compares below it (-inf for floats).
    const BOTTOM: Self;
    fn is_nan(self) -> bool;
}

macro_rules! max_pool_float {
    ($($t:ty),*) => {$(
        impl MaxPoolElement for $t {
            const LOWEST: Self = <$t>::MIN;
            const BOTTOM: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    )*};
}

macro_rules! max_pool_integer {
    ($($t:ty),*) => {$(
        impl MaxPoolElement for $t {
            const LOWEST: Self = <$t>::MIN;
            const BOTTOM: Self = <$t>::MIN;
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
        }
    )*};
}

max_pool_float!(f32, f64);
max_pool_integer!(i8, u8);

/// `x` replaces the running maximum `best` when larger, or when it is the first NaN. Written
/// without short-circuits so that it compiles to a select, not a data-dependent branch (which
/// mispredicts half the time on real data), and vectorizes.
#[inline(always)]
pub(crate) fn max_step<T: MaxPoolElement>(best: T, x: T) -> T {
    let take = (x > best) | (x.is_nan() & !best.is_nan());
    if take {
        x
    } else {
        best
    }
}

/// Pool attributes. `kernel` is required; empty strides/dilations mean 1, empty pads 0.
/// `auto_pad` is resolved beforehand with [`resolve_auto_pad`](super::resolve_auto_pad).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolParams {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    pub dilations: Vec<usize>,
    pub ceil_mode: bool,
}

/// How MaxPool's argmax indices flatten the spatial position (ONNX `storage_order`). Batch and
/// channel always flatten row-major in front of it, as in onnxruntime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageOrder {
    #[default]
    RowMajor,
    /// First spatial axis fastest.
    ColumnMajor,
}

/// Output dims `[N, C, out spatial...]` of MaxPool/AveragePool/LpPool. With `ceil_mode` the size
/// rounds up, but a last window starting in the right padding is dropped.
pub fn pool_output_dims(input_dims: &[usize], p: &PoolParams) -> KernelResult<Vec<usize>> {
    let (_, g) = geometry("Pool", input_dims, p)?;
    let mut dims = input_dims[..2].to_vec();
    dims.extend_from_slice(&g.out_dims);
    Ok(dims)
}

/// MaxPool in `f32`. See [`max_pool`].
pub fn max_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    p: &PoolParams,
    out: &mut [f32],
    indices: Option<&mut [i64]>,
    storage_order: StorageOrder,
) -> KernelResult<()> {
    max_pool(input, input_dims, p, out, indices, storage_order)
}

/// MaxPool; `out` (and `indices`, when given) have [`pool_output_dims`]. An index is the flat
/// position of the maximum in the unpadded input, in `0..N*C*D1*...*Dn`. NaN propagates (as in
/// the ONNX reference); the first maximum wins ties. A window lying wholly in the padding gives
/// the type's lowest value and index -1.
pub fn max_pool<T: MaxPoolElement>(
    input: &[T],
    input_dims: &[usize],
    p: &PoolParams,
    out: &mut [T],
    indices: Option<&mut [i64]>,
    storage_order: StorageOrder,
) -> KernelResult<()> {
    const OP: &str = "MaxPool";
    let (planes, g) = geometry(OP, input_dims, p)?;
    check_len(OP, "input", input.len(), planes * g.in_len)?;
    check_len(OP, "output", out.len(), planes * g.out_len)?;
    let Some(indices) = indices else {
        pool_rows(
            &g,
            planes,
            input,
            out,
            T::BOTTOM,
            max_step,
            |best, inside, _| {
                if inside == 0 {
                    T::LOWEST
                } else {
                    best
                }
            },
        );
        return Ok(());
    };
    check_len(OP, "indices", indices.len(), planes * g.out_len)?;
    slide(&g, planes, input, out, |plane_index, plane, spans, at| {
        let mut best: Option<(T, usize)> = None;
        for_each_tap(&g, spans, |offset| {
            let x = plane[offset];
            let better = match best {
                None => true,
                Some((b, _)) => x > b || (x.is_nan() && !b.is_nan()),
            };
            if better {
                best = Some((x, offset));
            }
        });
        indices[plane_index * g.out_len + at] = match best {
            Some((_, offset)) => {
                (plane_index * g.in_len + spatial_index(&g, offset, storage_order)) as i64
            }
            None => -1,
        };
        best.map_or(T::LOWEST, |(x, _)| x)
    });
    Ok(())
}

/// AveragePool in `f32`. See [`average_pool`].
pub fn average_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    p: &PoolParams,
    count_include_pad: bool,
    out: &mut [f32],
) -> KernelResult<()> {
    average_pool(input, input_dims, p, count_include_pad, out, 1)
}

/// Widest output row AveragePool divides by per-column counts kept on the stack.
const MAX_COUNTED_COLUMNS: usize = 1024;

/// AveragePool. The divisor counts the window's taps inside the input, or with
/// `count_include_pad` also those in the explicit pads (never the extra positions ceil_mode
/// adds past the end pad), as in the ONNX reference. A window with no counted tap gives NaN.
pub fn average_pool<T: Float + Pod>(
    input: &[T],
    input_dims: &[usize],
    p: &PoolParams,
    count_include_pad: bool,
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    const OP: &str = "AveragePool";
    let (planes, g) = geometry(OP, input_dims, p)?;
    check_len(OP, "input", input.len(), planes * g.in_len)?;
    check_len(OP, "output", out.len(), planes * g.out_len)?;
    if g.out_len == 0 {
        return Ok(());
    }
    // One window covering each whole plane, unpadded (Caffe-style ResNets end with a 7x7
    // AveragePool over 7x7): the plane's mean in one straight pass. The windowed kernels below
    // pay their per-plane setup for a single output.
    if g.out_len == 1
        && g.kernel == g.in_dims
        && g.pads_begin.iter().chain(&g.pads_end).all(|&p| p == 0)
    {
        let count = T::from_usize(g.in_len);
        for_each_plane(input, g.in_len, out, threads, |plane| {
            plane_sum(plane, |x| x) / count
        });
        return Ok(());
    }
    // 1-D and 2-D windows: sums on the depthwise convolution's kernel (unit taps), then each
    // output divided by its window's count, a product of per-axis counts.
    let last = g.in_dims.len().saturating_sub(1);
    if g.out_dims
        .get(last)
        .is_some_and(|&ow| ow <= MAX_COUNTED_COLUMNS)
        && window_sums(input, &g, out, threads)
    {
        let count = |axis: usize, o: usize| {
            let span = axis_span(&g, axis, o);
            if count_include_pad {
                span.padded
            } else {
                span.hi - span.lo
            }
        };
        let ow = g.out_dims[last];
        let mut columns = [0usize; MAX_COUNTED_COLUMNS];
        for (ox, c) in columns[..ow].iter_mut().enumerate() {
            *c = count(last, ox);
        }
        for plane in out.chunks_exact_mut(g.out_len) {
            for (oy, row) in plane.chunks_exact_mut(ow).enumerate() {
                let rows = if last == 0 { 1 } else { count(0, oy) };
                for (y, &c) in row.iter_mut().zip(&columns[..ow]) {
                    *y = *y / T::from_usize(rows * c);
                }
            }
        }
        return Ok(());
    }
    pool_rows(
        &g,
        planes,
        input,
        out,
        T::ZERO,
        |sum, x| sum + x,
        |sum, inside, padded| {
            let count = if count_include_pad { padded } else { inside };
            sum / T::from_usize(count)
        },
    );
    Ok(())
}

/// LpPool in `f32`. See [`lp_pool`].
pub fn lp_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    p: &PoolParams,
    norm: u32,
    out: &mut [f32],
) -> KernelResult<()> {
    lp_pool(input, input_dims, p, norm, out)
}

/// LpPool: `(sum |x|^norm)^(1/norm)` over each window (padding contributes 0). ONNX's `p`
/// attribute is `norm`; it must be at least 1.
pub fn lp_pool<T: Float>(
    input: &[T],
    input_dims: &[usize],
    p: &PoolParams,
    norm: u32,
    out: &mut [T],
) -> KernelResult<()> {
    const OP: &str = "LpPool";
    let (planes, g) = geometry(OP, input_dims, p)?;
    check_len(OP, "input", input.len(), planes * g.in_len)?;
    check_len(OP, "output", out.len(), planes * g.out_len)?;
    let power = lp_power(OP, norm)?;
    pool_rows(
        &g,
        planes,
        input,
        out,
        T::ZERO,
        |sum, x| sum + power.raise(x),
        |sum, _, _| power.root(sum),
    );
    Ok(())
}

/// The `|x|^p` / `s^(1/p)` pair of an Lp norm, with the common p = 1 and 2 special-cased.
#[derive(Clone, Copy)]
pub(crate) struct LpPower(u32);

pub(crate) fn lp_power(op: &'static str, norm: u32) -> KernelResult<LpPower> {
    match norm {
        0 => Err(KernelError::InvalidParam {
            op,
            param: "p",
            reason: "must be at least 1".into(),
        }),
        _ if norm > i32::MAX as u32 => Err(KernelError::InvalidParam {
            op,
            param: "p",
            reason: format!("{norm} is too large"),
        }),
        _ => Ok(LpPower(norm)),
    }
}

impl LpPower {
    #[inline(always)]
    pub(crate) fn raise<T: Float>(self, x: T) -> T {
        match self.0 {
            1 => x.abs(),
            2 => x * x,
            p => x.abs().powi(p as i32),
        }
    }

    #[inline(always)]
    pub(crate) fn root<T: Float>(self, sum: T) -> T {
        match self.0 {
            1 => sum,
            2 => sum.sqrt(),
            p => sum.powf(T::ONE / T::from_usize(p as usize)),
        }
    }
}

/// Validated pool dims: the number of (batch, channel) planes and the window geometry.
pub(crate) fn geometry(
    op: &'static str,
    input_dims: &[usize],
    p: &PoolParams,
) -> KernelResult<(usize, WindowGeometry)> {
    if input_dims.len() < 3 {
        return Err(KernelError::Rank {
            op,
            operand: "input",
            rank: input_dims.len(),
            expected: "must be at least 3 (N, C, spatial...)".into(),
        });
    }
    let attrs = WindowAttrs {
        kernel: &p.kernel,
        strides: &p.strides,
        pads_begin: &p.pads_begin,
        pads_end: &p.pads_end,
        dilations: &p.dilations,
        ceil_mode: p.ceil_mode,
    };
    let g = WindowGeometry::new(op, &input_dims[2..], &attrs)?;
    let planes = input_dims[0]
        .checked_mul(input_dims[1])
        .ok_or(KernelError::SizeOverflow { op, what: "N * C" })?;
    planes
        .checked_mul(g.in_len)
        .ok_or(KernelError::SizeOverflow {
            op,
            what: "input size",
        })?;
    planes
        .checked_mul(g.out_len)
        .ok_or(KernelError::SizeOverflow {
            op,
            what: "output size",
        })?;
    Ok((planes, g))
}

/// One window along one axis: taps `lo..hi` fall inside the input, taps `0..padded` inside the
/// input or its explicit pads.
#[derive(Clone, Copy, Default)]
struct AxisSpan {
    /// Input coordinate of tap 0 (negative inside the begin padding).
    start: isize,
    lo: usize,
    hi: usize,
    padded: usize,
}

fn axis_span(g: &WindowGeometry, axis: usize, o: usize) -> AxisSpan {
    let start = g.window_start(axis, o);
    let (kernel, dilation) = (g.kernel[axis], g.dilations[axis]);
    // Number of taps whose coordinate `start + t * dilation` is below `end`.
    let taps_below = |end: isize| {
        if end <= start {
            0
        } else {
            ((end - start) as usize).div_ceil(dilation).min(kernel)
        }
    };
    let lo = taps_below(0);
    let hi = taps_below(g.in_dims[axis] as isize).max(lo);
    let padded = taps_below((g.in_dims[axis] + g.pads_end[axis]) as isize);
    AxisSpan {
        start,
        lo,
        hi,
        padded,
    }
}

/// Values-only pooling: every output starts at `init`, folds in its window's in-bounds taps in
/// row-major order with `fold(acc, x)`, then becomes `finish(acc, inside, padded)`, where
/// `inside` counts those taps and `padded` the taps inside the input or its explicit pads.
/// Works an output row (all axes but the last fixed) at a time: the outer axes' spans are
/// computed once per row, and each in-bounds input row under them is folded into the whole
/// output row, with windows clear of the edges taking a loop without span arithmetic. Callers
/// have checked the slice lengths.
#[allow(clippy::too_many_arguments)]
fn pool_rows<T: Copy>(
    g: &WindowGeometry,
    planes: usize,
    input: &[T],
    out: &mut [T],
    init: T,
    fold: impl Fn(T, T) -> T,
    finish: impl Fn(T, usize, usize) -> T,
) {
    if g.out_len == 0 {
        return;
    }
    let last = g.in_dims.len() - 1;
    let (ow, iw) = (g.out_dims[last], g.in_dims[last]);
    let (kernel, stride, dilation) = (g.kernel[last], g.strides[last], g.dilations[last]);
    let pad = g.pads_begin[last];
    // Outputs `interior` along the last axis have their whole window inside the input row:
    // ox * stride >= pad and ox * stride - pad + (kernel - 1) * dilation < iw.
    let reach = (kernel - 1) * dilation;
    let interior_end = (iw + pad)
        .checked_sub(reach)
        .map_or(0, |n| n.div_ceil(stride));
    let interior_start = pad.div_ceil(stride).min(ow);
    let interior = interior_start..interior_end.clamp(interior_start, ow);
    let full = AxisSpan {
        start: 0,
        lo: 0,
        hi: kernel,
        padded: kernel,
    };
    let last_span = |ox: usize| {
        if interior.contains(&ox) {
            full
        } else {
            axis_span(g, last, ox)
        }
    };
    let outer_dims = &g.out_dims[..last];
    let mut spans: SmallVec<[AxisSpan; 6]> = SmallVec::from_elem(AxisSpan::default(), last);
    let mut o = Dims::from_elem(0, last);
    let mut k = Dims::from_elem(0, last);
    for plane_index in 0..planes {
        let plane = &input[plane_index * g.in_len..][..g.in_len];
        let out_plane = &mut out[plane_index * g.out_len..][..g.out_len];
        o.iter_mut().for_each(|v| *v = 0);
        for out_row in out_plane.chunks_exact_mut(ow) {
            for (axis, span) in spans.iter_mut().enumerate() {
                *span = axis_span(g, axis, o[axis]);
            }
            let outer_inside: usize = spans.iter().map(|s| s.hi - s.lo).product();
            let outer_padded: usize = spans.iter().map(|s| s.padded).product();
            out_row.fill(init);
            if outer_inside > 0 {
                for (tap, span) in k.iter_mut().zip(&spans) {
                    *tap = span.lo;
                }
                loop {
                    // The input row under outer taps `k` (in bounds: each k is in lo..hi).
                    let mut row = 0usize;
                    for axis in 0..last {
                        let i = spans[axis].start + (k[axis] * g.dilations[axis]) as isize;
                        row = row * g.in_dims[axis] + i as usize;
                    }
                    let in_row = &plane[row * iw..][..iw];
                    // Windows clear of the edges: tap by tap over all of them, so the inner
                    // loop runs along the output row (and vectorizes); each output still
                    // takes its taps in order.
                    if !interior.is_empty() {
                        let inner = &mut out_row[interior.clone()];
                        // Input of output `interior.start + j` at tap t is
                        // `base + j * stride + t * dilation`, in the row by construction.
                        let base = interior.start * stride - pad;
                        match kernel {
                            2 => fold_windows::<T, 2>(inner, in_row, base, stride, dilation, &fold),
                            3 => fold_windows::<T, 3>(inner, in_row, base, stride, dilation, &fold),
                            _ => fold_taps(inner, in_row, base, kernel, stride, dilation, &fold),
                        }
                    }
                    for ox in (0..interior.start).chain(interior.end..ow) {
                        let span = axis_span(g, last, ox);
                        if span.hi <= span.lo {
                            // All padding (pads wider than the kernel): no tap, and no first
                            // input index (it would lie before the row).
                            continue;
                        }
                        // Taps lo..hi of this window are inside the row by construction.
                        let first = ox * stride + span.lo * dilation - pad;
                        let mut value = out_row[ox];
                        for t in 0..span.hi - span.lo {
                            value = fold(value, in_row[first + t * dilation]);
                        }
                        out_row[ox] = value;
                    }
                    if !advance_taps(&mut k, &spans) {
                        break;
                    }
                }
            }
            for (ox, acc) in out_row.iter_mut().enumerate() {
                let span = last_span(ox);
                *acc = finish(
                    *acc,
                    outer_inside * (span.hi - span.lo),
                    outer_padded * span.padded,
                );
            }
            advance_index(&mut o, outer_dims);
        }
    }
}

/// Folds `K` taps per window into each of `acc`, window `j` starting at `base + j * stride`
/// (the common small kernels: the taps unroll and the running value stays in a register).
#[inline(always)]
fn fold_windows<T: Copy, const K: usize>(
    acc: &mut [T],
    row: &[T],
    base: usize,
    stride: usize,
    dilation: usize,
    fold: &impl Fn(T, T) -> T,
) {
    for (j, acc) in acc.iter_mut().enumerate() {
        let first = base + j * stride;
        let mut value = *acc;
        for t in 0..K {
            value = fold(value, row[first + t * dilation]);
        }
        *acc = value;
    }
}

/// [`fold_windows`] for any kernel size: tap by tap over all the windows, so the inner loop
/// runs along the output row (and vectorizes at stride 1); each window still takes its taps
/// in order.
#[inline(always)]
fn fold_taps<T: Copy>(
    acc: &mut [T],
    row: &[T],
    base: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    fold: &impl Fn(T, T) -> T,
) {
    for t in 0..kernel {
        let taps = &row[base + t * dilation..];
        if stride == 1 {
            for (acc, &x) in acc.iter_mut().zip(taps) {
                *acc = fold(*acc, x);
            }
        } else {
            for (acc, &x) in acc.iter_mut().zip(taps.iter().step_by(stride)) {
                *acc = fold(*acc, x);
            }
        }
    }
}

/// Steps the outer taps `k` to the next in-bounds combination in row-major order; false after
/// the last one.
fn advance_taps(k: &mut [usize], spans: &[AxisSpan]) -> bool {
    for axis in (0..k.len()).rev() {
        k[axis] += 1;
        if k[axis] < spans[axis].hi {
            return true;
        }
        k[axis] = spans[axis].lo;
    }
    false
}

/// Calls `window(plane_index, plane, spans, flat_output_index)` for every output position of
/// every plane and stores what it returns. Callers have checked the slice lengths.
fn slide<T: Copy>(
    g: &WindowGeometry,
    planes: usize,
    input: &[T],
    out: &mut [T],
    mut window: impl FnMut(usize, &[T], &[AxisSpan], usize) -> T,
) {
    if g.out_len == 0 {
        return;
    }
    let rank = g.in_dims.len();
    let mut spans: SmallVec<[AxisSpan; 6]> = SmallVec::from_elem(AxisSpan::default(), rank);
    for plane_index in 0..planes {
        let plane = &input[plane_index * g.in_len..][..g.in_len];
        let out_plane = &mut out[plane_index * g.out_len..][..g.out_len];
        let mut o = Dims::from_elem(0, rank);
        for (at, y) in out_plane.iter_mut().enumerate() {
            for (axis, span) in spans.iter_mut().enumerate() {
                *span = axis_span(g, axis, o[axis]);
            }
            *y = window(plane_index, plane, &spans, at);
            advance_index(&mut o, &g.out_dims);
        }
    }
}

/// Calls `f(offset)` for every in-bounds tap of a window, in row-major tap order; the last axis
/// is a tight strided loop.
#[inline(always)]
fn for_each_tap(g: &WindowGeometry, spans: &[AxisSpan], mut f: impl FnMut(usize)) {
    if spans.iter().any(|s| s.lo >= s.hi) {
        return;
    }
    let last = spans.len() - 1;
    let inner = spans[last];
    let step = g.dilations[last];
    // Coordinates are non-negative for taps in lo..hi, by construction of the spans.
    let first = (inner.start + (inner.lo * step) as isize) as usize;
    let mut k: Dims = spans[..last].iter().map(|s| s.lo).collect();
    loop {
        let mut row = 0usize;
        for axis in 0..last {
            let i = spans[axis].start + (k[axis] * g.dilations[axis]) as isize;
            row = row * g.in_dims[axis] + i as usize;
        }
        let base = row * g.in_dims[last] + first;
        for t in 0..inner.hi - inner.lo {
            f(base + t * step);
        }
        let mut axis = last;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            k[axis] += 1;
            if k[axis] < spans[axis].hi {
                break;
            }
            k[axis] = spans[axis].lo;
        }
    }
}

/// Flat spatial index of a row-major plane offset in the requested storage order.
fn spatial_index(g: &WindowGeometry, offset: usize, order: StorageOrder) -> usize {
    match order {
        StorageOrder::RowMajor => offset,
        StorageOrder::ColumnMajor => {
            let mut coords = Dims::from_elem(0, g.in_dims.len());
            let mut rem = offset;
            for axis in (0..g.in_dims.len()).rev() {
                coords[axis] = rem % g.in_dims[axis];
                rem /= g.in_dims[axis];
            }
            let mut index = 0;
            for axis in (0..g.in_dims.len()).rev() {
                index = index * g.in_dims[axis] + coords[axis];
            }
            index
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Max,
        Avg { include_pad: bool },
        Lp(u32),
    }

    /// Reference pooling by enumerating every tap of every window (f64 accumulation).
    fn naive(
        input: &[f32],
        dims: &[usize],
        p: &PoolParams,
        kind: Kind,
        out_dims: &[usize],
    ) -> (Vec<f32>, Vec<i64>) {
        let rank = dims.len() - 2;
        let attr = |v: &Vec<usize>, d: usize| {
            if v.is_empty() {
                vec![d; rank]
            } else {
                v.clone()
            }
        };
        let (strides, dil) = (attr(&p.strides, 1), attr(&p.dilations, 1));
        let (pb, pe) = (attr(&p.pads_begin, 0), attr(&p.pads_end, 0));
        let in_sp = &dims[2..];
        let out_sp = &out_dims[2..];
        let count = |d: &[usize]| d.iter().product::<usize>();
        let unravel = |mut i: usize, d: &[usize]| {
            let mut v = vec![0; d.len()];
            for a in (0..d.len()).rev() {
                v[a] = i % d[a];
                i /= d[a];
            }
            v
        };
        let (mut out, mut idx) = (Vec::new(), Vec::new());
        for plane in 0..dims[0] * dims[1] {
            for o in 0..count(out_sp) {
                let oi = unravel(o, out_sp);
                let (mut vals, mut padded) = (Vec::new(), 0usize);
                for t in 0..count(&p.kernel) {
                    let ki = unravel(t, &p.kernel);
                    let coord: Vec<isize> = (0..rank)
                        .map(|a| (oi[a] * strides[a] + ki[a] * dil[a]) as isize - pb[a] as isize)
                        .collect();
                    if (0..rank).all(|a| coord[a] >= 0 && (coord[a] as usize) < in_sp[a]) {
                        let off = (0..rank).fold(0, |acc, a| acc * in_sp[a] + coord[a] as usize);
                        vals.push((
                            input[plane * count(in_sp) + off],
                            plane * count(in_sp) + off,
                        ));
                    } else if (0..rank).all(|a| coord[a] < (in_sp[a] + pe[a]) as isize) {
                        padded += 1;
                    }
                }
                let (y, i) = match kind {
                    Kind::Max => vals.iter().fold((f32::MIN, -1i64), |(b, bi), &(x, xi)| {
                        if bi < 0 || x > b {
                            (x, xi as i64)
                        } else {
                            (b, bi)
                        }
                    }),
                    Kind::Avg { include_pad } => {
                        let n = vals.len() + if include_pad { padded } else { 0 };
                        (
                            (vals.iter().map(|v| v.0 as f64).sum::<f64>() / n as f64) as f32,
                            0,
                        )
                    }
                    Kind::Lp(q) => {
                        let s: f64 = vals.iter().map(|v| (v.0 as f64).abs().powi(q as i32)).sum();
                        (s.powf(1.0 / q as f64) as f32, 0)
                    }
                };
                out.push(y);
                idx.push(i);
            }
        }
        (out, idx)
    }

    fn random_params(rng: &mut Rng) -> (Vec<usize>, PoolParams) {
        let rank = rng.range(1, 3);
        let kernel: Vec<usize> = (0..rank).map(|_| rng.range(1, 3)).collect();
        let dilations: Vec<usize> = (0..rank).map(|_| rng.range(1, 2)).collect();
        let p = PoolParams {
            strides: (0..rank).map(|_| rng.range(1, 3)).collect(),
            pads_begin: kernel.iter().map(|&k| rng.below(k)).collect(),
            pads_end: kernel.iter().map(|&k| rng.below(k)).collect(),
            ceil_mode: rng.below(2) == 0,
            kernel: kernel.clone(),
            dilations,
        };
        let side = if rank == 3 { 6 } else { 9 };
        let spatial: Vec<usize> = kernel
            .iter()
            .zip(&p.dilations)
            .map(|(&k, &d)| rng.range((k - 1) * d + 1, side.max((k - 1) * d + 1)))
            .collect();
        (
            [vec![rng.range(1, 2), rng.range(1, 3)], spatial].concat(),
            p,
        )
    }

    #[test]
    fn random_pools_match_reference() {
        let mut rng = Rng::new(0x9001);
        for case in 0..600 {
            let (dims, p) = random_params(&mut rng);
            let input = rng.vec(dims.iter().product());
            let out_dims = pool_output_dims(&dims, &p).unwrap();
            let len = out_dims.iter().product();
            let what = |k: Kind| format!("case {case}: {k:?} {dims:?} {p:?}");

            let (expected, expected_idx) = naive(&input, &dims, &p, Kind::Max, &out_dims);
            let (mut out, mut idx) = (vec![0.0; len], vec![0i64; len]);
            max_pool_f32(
                &input,
                &dims,
                &p,
                &mut out,
                Some(&mut idx),
                StorageOrder::RowMajor,
            )
            .unwrap();
            assert_close_within(&out, &expected, 1e-4, &what(Kind::Max));
            assert_eq!(idx, expected_idx, "{}", what(Kind::Max));
            // Without indices the row-wise walk runs: the very same values.
            let mut values_only = vec![f32::NAN; len];
            max_pool_f32(
                &input,
                &dims,
                &p,
                &mut values_only,
                None,
                StorageOrder::RowMajor,
            )
            .unwrap();
            assert_eq!(values_only, out, "{}", what(Kind::Max));

            for kind in [
                Kind::Avg { include_pad: false },
                Kind::Avg { include_pad: true },
                Kind::Lp(1),
                Kind::Lp(2),
                Kind::Lp(3),
            ] {
                let (expected, _) = naive(&input, &dims, &p, kind, &out_dims);
                let mut out = vec![0.0; len];
                match kind {
                    Kind::Avg { include_pad } => {
                        average_pool_f32(&input, &dims, &p, include_pad, &mut out).unwrap()
                    }
                    Kind::Lp(q) => lp_pool_f32(&input, &dims, &p, q, &mut out).unwrap(),
                    Kind::Max => unreachable!(),
                }
                assert_close_within(&out, &expected, 1e-4, &what(kind));
            }
        }
    }

    /// AveragePool over many small planes (their window sums on the channel-blocked depthwise
    /// kernel where it runs) matches the reference: 2-D windows 1 to 5 wide, strides 1 to 3,
    /// dilation, pads, ceil_mode, with and without count_include_pad, 8 to 40 planes (a partial
    /// last block), batch 1 and 2, at 1 and 2 threads.
    #[test]
    fn small_planes_with_many_channels_match_reference() {
        use crate::ops::convolution::depthwise_blocked::sums_pay;
        let mut rng = Rng::new(0x5a11);
        let mut blocked = 0;
        for case in 0..120 {
            let kernel: Vec<usize> = (0..2).map(|_| rng.range(1, 5)).collect();
            let dilations: Vec<usize> = (0..2).map(|_| rng.range(1, 2)).collect();
            let p = PoolParams {
                strides: (0..2).map(|_| rng.range(1, 3)).collect(),
                pads_begin: kernel.iter().map(|&k| rng.below(k)).collect(),
                pads_end: kernel.iter().map(|&k| rng.below(k)).collect(),
                ceil_mode: rng.below(2) == 0,
                kernel: kernel.clone(),
                dilations,
            };
            let spatial: Vec<usize> = kernel
                .iter()
                .zip(&p.dilations)
                .map(|(&k, &d)| rng.range((k - 1) * d + 1, 16.max((k - 1) * d + 1)))
                .collect();
            let (batch, channels) = (rng.range(1, 2), rng.range(8, 20));
            let dims = [vec![batch, channels], spatial.clone()].concat();
            let (planes, w) = geometry("AveragePool", &dims, &p).unwrap();
            blocked += usize::from(sums_pay::<f32>(&w, planes));
            let input = rng.vec(dims.iter().product());
            let out_dims = pool_output_dims(&dims, &p).unwrap();
            for include_pad in [false, true] {
                let kind = Kind::Avg { include_pad };
                let (expected, _) = naive(&input, &dims, &p, kind, &out_dims);
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut out = vec![f32::NAN; expected.len()];
                    crate::parallel::install(&pool, || {
                        average_pool(&input, &dims, &p, include_pad, &mut out, threads)
                    })
                    .unwrap();
                    let what = format!("case {case}: {dims:?} {p:?} {kind:?} threads {threads}");
                    assert_close_within(&out, &expected, 1e-4, &what);
                }
            }
        }
        if crate::ops::convolution::simd::Simd::detect().is_some() {
            assert!(blocked >= 60, "only {blocked} cases on the blocked kernel");
        }
    }

    /// A window over each whole unpadded plane takes the straight mean; a pad, or a window one
    /// short of the plane, keeps the windowed path. Both agree with the reference.
    #[test]
    fn whole_plane_windows_match_reference() {
        let mut rng = Rng::new(0x7007);
        for (spatial, pad) in [
            (vec![7, 7], 0),
            (vec![13], 0),
            (vec![3, 4, 5], 0),
            (vec![7, 7], 1),
            (vec![1, 1], 0),
        ] {
            for shrink in [0, 1] {
                let kernel: Vec<usize> = spatial.iter().map(|&d| (d - shrink).max(1)).collect();
                let dims = [vec![2, 5], spatial.clone()].concat();
                let p = PoolParams {
                    kernel,
                    pads_begin: vec![pad; spatial.len()],
                    pads_end: vec![pad; spatial.len()],
                    ..PoolParams::default()
                };
                let input = rng.vec(dims.iter().product());
                let out_dims = pool_output_dims(&dims, &p).unwrap();
                for include_pad in [false, true] {
                    let kind = Kind::Avg { include_pad };
                    let (expected, _) = naive(&input, &dims, &p, kind, &out_dims);
                    let mut out = vec![f32::NAN; expected.len()];
                    average_pool_f32(&input, &dims, &p, include_pad, &mut out).unwrap();
                    let what = format!("{dims:?} {p:?} include_pad {include_pad}");
                    assert_close_within(&out, &expected, 1e-5, &what);
                }
            }
        }
    }

    fn iota(n: usize) -> Vec<f32> {
        (1..=n).map(|v| v as f32).collect()
    }

    #[test]
    fn onnx_ceil_mode_examples() {
        // maxpool_2d_ceil / averagepool_2d_ceil: 4x4 input 1..16, kernel 3, stride 2.
        let p = PoolParams {
            kernel: vec![3, 3],
            strides: vec![2, 2],
            ceil_mode: true,
            ..PoolParams::default()
        };
        assert_eq!(pool_output_dims(&[1, 1, 4, 4], &p).unwrap(), [1, 1, 2, 2]);
        let mut out = [0.0; 4];
        max_pool_f32(
            &iota(16),
            &[1, 1, 4, 4],
            &p,
            &mut out,
            None,
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(out, [11.0, 12.0, 15.0, 16.0]);
        average_pool_f32(&iota(16), &[1, 1, 4, 4], &p, false, &mut out).unwrap();
        assert_eq!(out, [6.0, 7.5, 12.0, 13.5]);
    }

    #[test]
    fn onnx_argmax_examples() {
        // maxpool_with_argmax_2d_precomputed_pads: 5x5, kernel 5, pads 2.
        let p = PoolParams {
            kernel: vec![5, 5],
            pads_begin: vec![2, 2],
            pads_end: vec![2, 2],
            ..PoolParams::default()
        };
        let (mut y, mut z) = ([0.0; 25], [0i64; 25]);
        max_pool_f32(
            &iota(25),
            &[1, 1, 5, 5],
            &p,
            &mut y,
            Some(&mut z),
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(&y[..5], &[13.0, 14.0, 15.0, 15.0, 15.0]);
        assert_eq!(&y[20..], &[23.0, 24.0, 25.0, 25.0, 25.0]);
        assert_eq!(&z[..5], &[12, 13, 14, 14, 14]);
        assert_eq!(&z[20..], &[22, 23, 24, 24, 24]);
        // maxpool_with_argmax_2d_precomputed_strides: kernel 2, stride 2, storage_order 1.
        let p = PoolParams {
            kernel: vec![2, 2],
            strides: vec![2, 2],
            ..PoolParams::default()
        };
        let (mut y, mut z) = ([0.0; 4], [0i64; 4]);
        max_pool_f32(
            &iota(25),
            &[1, 1, 5, 5],
            &p,
            &mut y,
            Some(&mut z),
            StorageOrder::ColumnMajor,
        )
        .unwrap();
        assert_eq!(y, [7.0, 9.0, 17.0, 19.0]);
        assert_eq!(z, [6, 16, 8, 18]);
        // Indices count batch and channel planes in front.
        let (mut y, mut z) = ([0.0; 8], [0i64; 8]);
        max_pool_f32(
            &iota(50),
            &[2, 1, 5, 5],
            &p,
            &mut y,
            Some(&mut z),
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(&z[4..], &[31, 33, 41, 43]);
    }

    #[test]
    fn onnx_count_include_pad_example() {
        // averagepool_2d_precomputed_pads_count_include_pad: 5x5 1..25, kernel 5, pads 2.
        let p = PoolParams {
            kernel: vec![5, 5],
            pads_begin: vec![2, 2],
            pads_end: vec![2, 2],
            ..PoolParams::default()
        };
        let mut y = [0.0; 25];
        average_pool_f32(&iota(25), &[1, 1, 5, 5], &p, true, &mut y).unwrap();
        assert_close_within(&y[..5], &[2.52, 3.6, 4.8, 4.08, 3.24], 1e-4, "include pad");
        average_pool_f32(&iota(25), &[1, 1, 5, 5], &p, false, &mut y).unwrap();
        assert_close_within(&y[..3], &[7.0, 7.5, 8.0], 1e-4, "exclude pad");
    }

    /// Pads wider than the kernel along the last axis leave windows with no tap inside the row
    /// (a fuzz finding: the first input index of such a window underflowed). Such windows are
    /// all padding, as the reference says.
    #[test]
    fn windows_entirely_in_the_padding_match_reference() {
        let dims = [1, 2, 3, 7, 5];
        let p = PoolParams {
            kernel: vec![2, 2, 2],
            strides: vec![2, 2, 2],
            pads_begin: vec![1, 1, 4],
            pads_end: vec![1, 1, 1],
            ..PoolParams::default()
        };
        let input: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|v| v as f32)
            .collect();
        let out_dims = pool_output_dims(&dims, &p).unwrap();
        let len = out_dims.iter().product();
        let (expected, _) = naive(&input, &dims, &p, Kind::Max, &out_dims);
        let mut out = vec![0.0; len];
        max_pool_f32(&input, &dims, &p, &mut out, None, StorageOrder::RowMajor).unwrap();
        assert_close_within(&out, &expected, 0.0, "max");
        let (expected, _) = naive(
            &input,
            &dims,
            &p,
            Kind::Avg { include_pad: true },
            &out_dims,
        );
        average_pool_f32(&input, &dims, &p, true, &mut out).unwrap();
        assert_close_within(&out, &expected, 1e-6, "average");
    }

    #[test]
    fn nan_propagates_through_max() {
        let p = PoolParams {
            kernel: vec![2],
            ..PoolParams::default()
        };
        let mut y = [0.0; 2];
        max_pool_f32(
            &[1.0, f32::NAN, 3.0],
            &[1, 1, 3],
            &p,
            &mut y,
            None,
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert!(y[0].is_nan() && y[1].is_nan());
        max_pool_f32(
            &[f32::NEG_INFINITY; 3],
            &[1, 1, 3],
            &p,
            &mut y,
            None,
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(y, [f32::NEG_INFINITY; 2]);
    }

    #[test]
    fn integer_max_pool_matches_the_onnx_uint8_example() {
        // maxpool_2d_uint8: 5x5 input 1..25, kernel 5, pads 2.
        let p = PoolParams {
            kernel: vec![5, 5],
            pads_begin: vec![2, 2],
            pads_end: vec![2, 2],
            ..PoolParams::default()
        };
        let input: Vec<u8> = (1..=25).collect();
        let mut y = [0u8; 25];
        max_pool(
            &input,
            &[1, 1, 5, 5],
            &p,
            &mut y,
            None,
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(
            y,
            [
                13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25, 23,
                24, 25, 25, 25
            ]
        );
        // i8: negative values, and a window wholly in the padding gives the lowest value.
        let p = PoolParams {
            kernel: vec![2],
            strides: vec![3],
            pads_begin: vec![3],
            ..PoolParams::default()
        };
        let (mut y, mut z) = ([0i8; 2], [0i64; 2]);
        max_pool(
            &[-5i8, -7, 3],
            &[1, 1, 3],
            &p,
            &mut y,
            Some(&mut z),
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!((y, z), ([i8::MIN, -5], [-1, 0]));
        let err = max_pool(
            &[0u8; 3],
            &[1, 1, 3],
            &p,
            &mut [0u8; 3],
            None,
            StorageOrder::RowMajor,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "MaxPool: output has 3 elements but 2 are required"
        );
    }

    #[test]
    fn errors_and_empty_inputs() {
        let p = PoolParams {
            kernel: vec![3, 3],
            ..PoolParams::default()
        };
        let err = pool_output_dims(&[1, 1, 4], &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pool: invalid kernel_shape: has 2 entries but the input has 1 spatial dims"
        );
        let err = pool_output_dims(&[4, 4], &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pool: input has rank 2 but must be at least 3 (N, C, spatial...)"
        );
        let mut out = [0.0; 4];
        let err = average_pool_f32(&[0.0; 15], &[1, 1, 4, 4], &p, false, &mut out).unwrap_err();
        assert_eq!(
            err.to_string(),
            "AveragePool: input has 15 elements but 16 are required"
        );
        let err = max_pool_f32(
            &[0.0; 16],
            &[1, 1, 4, 4],
            &p,
            &mut out,
            Some(&mut [0; 3]),
            StorageOrder::RowMajor,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "MaxPool: indices has 3 elements but 4 are required"
        );
        let err = lp_pool_f32(&[0.0; 16], &[1, 1, 4, 4], &p, 0, &mut out).unwrap_err();
        assert_eq!(err.to_string(), "LpPool: invalid p: must be at least 1");
        // Empty batch and empty spatial axis.
        assert_eq!(pool_output_dims(&[0, 3, 4, 4], &p).unwrap(), [0, 3, 2, 2]);
        max_pool_f32(
            &[],
            &[0, 3, 4, 4],
            &p,
            &mut [],
            None,
            StorageOrder::RowMajor,
        )
        .unwrap();
        assert_eq!(pool_output_dims(&[1, 3, 0, 4], &p).unwrap(), [1, 3, 0, 2]);
        average_pool_f32(&[], &[1, 3, 0, 4], &p, true, &mut []).unwrap();
    }
}
