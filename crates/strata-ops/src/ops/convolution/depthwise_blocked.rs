//! Depthwise 2-D convolution on blocks of [`LANES`] channels.
//!
//! The plane kernel in [`super::depthwise`] vectorizes along one channel's rows. On the small
//! planes of a MobileNet's later stages (7x7, 14x14) that wastes most of every vector and pays a
//! per-plane setup on each of hundreds of channels. Here [`LANES`] channels are interleaved
//! instead: a band of input rows is copied, zero-padded, into a buffer whose element `(r, c)` is
//! the vector of the block's channels at padded position `(r, c)`, so every output position is
//! one vector multiply-add per tap whatever the plane's width, stride or padding. The band's
//! outputs go back to the NCHW planes with the residual and activation (the bias is the
//! accumulators' start). Blocks of channels are spread over the threads; bands keep a block's
//! buffers in L1.

use std::any::TypeId;

use bytemuck::Pod;

use crate::kernels::activation::Activation;
use crate::kernels::float::Float;
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::interleave::{deinterleave, interleave_rows, LANES};
use crate::kernels::phase_planes::{Axis, MAX_TAPS};
use crate::kernels::simd::multiversion;
use crate::kernels::spatial::{check_len, WindowGeometry};

use super::conv_params::ConvParams;
use super::depthwise_band::BandShape;
#[cfg(target_arch = "x86_64")]
use super::depthwise_blocked_band;
use super::depthwise_direct;
use super::depthwise_rows;
use super::few_channels::window;
use super::interleaved_weights::interleave_weight_rows;
use super::simd::Simd;
use crate::kernels::error::{KernelError, KernelResult};
use strata_core::Tensor;

/// An element the blocked kernel computes in.
trait FloatPod: Float + Pod {}
impl<T: Float + Pod> FloatPod for T {}
/// Output positions per band: the band's interleaved outputs (`LANES` each) stay in L1.
const BAND_OUTPUTS: usize = 256;
/// Blocks whose work is below this many multiply-adds (all of them together) run on the calling
/// thread.
const PARALLEL_MIN_MULADDS: usize = 1 << 16;

/// Whether the blocked kernel takes this depthwise convolution: 2-D, one output channel per
/// input channel, enough channels to fill most of a block, at most [`MAX_TAPS`] taps. Any plane
/// size: it measured faster than the plane kernel on every MobileNetV2 layer, 7x7 (5.7x) to
/// 112x112 (1.3x).
///
/// On 7x7 outputs most of its time is the layout change (Sapphire Rapids, 1 thread, `perf`:
/// the 16x16 transposes in and out took 47 % of 960 channels at 7x7 and 62 % of 576 channels
/// at 14x14 stride 2, the multiply-adds 20 % and 12 %), yet the transpose-free alternatives
/// tried there lost (single-layer models, alternating, medians of 5 rounds of 300 runs; branch
/// `dw`, commit 8fb23db): sixteen consecutive outputs of the NCHW output per vector *across*
/// plane boundaries (masked shifted loads straight from the NCHW input, the input split into
/// its four phase planes at stride 2, one or two weights per vector) ran 1.24x (960 @ 7x7)
/// and 1.32x (576 @ 14x14 stride 2) this kernel's time with unaligned loads, which split a
/// cache line 15 times in 16, and 2.3x and 2.0x with aligned loads and two-source permutes;
/// the per-plane kernels at 7 wide 1.04x (flat, stride 1) and 1.16x (direct, stride 2).
pub(crate) fn pays(w: &WindowGeometry, in_channels: usize, out_channels: usize) -> bool {
    w.in_dims.len() == 2
        && in_channels == out_channels
        && in_channels >= LANES / 2
        && w.kernel_len <= MAX_TAPS
}

/// Depthwise convolution with one output channel per input channel: output plane `(b, c)` is
/// `post(conv(input plane (b, c), weight plane c) + bias[c] + residual plane (b, c))`. Lengths
/// were checked by the caller: `input` holds `batch * channels * w.in_len`, `out` (and
/// `residual`) `batch * channels * w.out_len`, `weight` `channels * w.kernel_len`, `bias`
/// `channels`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise_blocked<T: Float + Pod>(
    input: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    channels: usize,
    w: &WindowGeometry,
    post: Activation,
    residual: Option<&[T]>,
    out: &mut [T],
    threads: usize,
) {
    if w.out_len == 0 || channels == 0 {
        return;
    }
    fn cast<T: Pod>(v: &[T]) -> &[f32] {
        bytemuck::cast_slice(v)
    }
    // f32 3x3 at stride 2 (or 1, wide rows) reads the NCHW rows directly: no transposes.
    if TypeId::of::<T>() == TypeId::of::<f32>() && depthwise_direct::pays(w, channels, channels) {
        depthwise_direct::depthwise_direct(
            cast(input),
            cast(weight),
            bias.map(cast),
            channels,
            w,
            post,
            residual.map(cast),
            bytemuck::cast_slice_mut(out),
            threads,
        );
        return;
    }
    // Wide f32 planes go row by row on the NCHW data instead (no transposes).
    if TypeId::of::<T>() == TypeId::of::<f32>() && depthwise_rows::pays(w, channels, channels) {
        depthwise_rows::depthwise_rows(
            cast(input),
            cast(weight),
            bias.map(cast),
            channels,
            w,
            post,
            residual.map(cast),
            bytemuck::cast_slice_mut(out),
            threads,
        );
        return;
    }
    blocked(
        input,
        Weights::Plain(weight),
        bias,
        channels,
        w,
        post,
        residual,
        out,
        threads,
    );
}

/// The largest output plane whose window sums (AveragePool) take the blocked kernel. Zen 3
/// (1 thread, 3x3 windows, medians of 5 rounds): 7x7 outputs ran 2-3x faster than the plane
/// kernel (272 channels at stride 2: 0.14 against 0.24 ms), 14x14 1.2-1.3x; at 28x28 they tied
/// or lost (64 channels at stride 1: 0.23 against 0.22 ms), at 56x56 stride 1 lost (0.89
/// against 0.72 ms): the plane kernel's flat rows fill its vectors there.
const SUMS_MAX_OUT_LEN: usize = 256;

/// Whether [`window_sums`] takes the window sums of `planes` planes of `w` (instead of the plane
/// kernel in [`super::depthwise`]): f32 on AVX-512 or AVX2, 2-D, enough planes to fill most of
/// a block, small output planes.
pub(crate) fn sums_pay<T: 'static>(w: &WindowGeometry, planes: usize) -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
        && Simd::detect().is_some()
        && w.in_dims.len() == 2
        && planes >= LANES / 2
        && w.kernel_len <= MAX_TAPS
        && w.out_len <= SUMS_MAX_OUT_LEN
}

/// Sums of every window of the `planes` planes of `input` (a kernel of ones, the padding
/// zeros) on the blocked kernel, for a geometry [`sums_pay`] accepted: the planes are
/// channels of one batch item. Lengths were checked by the caller.
pub(crate) fn window_sums<T: Float + Pod>(
    input: &[T],
    planes: usize,
    w: &WindowGeometry,
    out: &mut [T],
    threads: usize,
) {
    let ones = [[T::ONE; LANES]; MAX_TAPS];
    let wt = Weights::Shared(&ones[..w.kernel_len]);
    blocked(
        input,
        wt,
        None,
        planes,
        w,
        Activation::None,
        None,
        out,
        threads,
    );
}

/// A depthwise weight as the blocked kernel reads it.
#[derive(Clone, Copy)]
enum Weights<'a, T> {
    /// `[channels, taps]`, interleaved per block on every run.
    Plain(&'a [T]),
    /// Interleaved once ([`BlockedWeights`]): block `b`'s taps at `[b * taps..][..taps]`.
    Interleaved(&'a [[T; LANES]]),
    /// The same taps for every block (window sums: ones).
    Shared(&'a [[T; LANES]]),
}

/// [`depthwise_blocked`] on the blocked kernel, whatever the plane width.
#[allow(clippy::too_many_arguments)]
fn blocked<T: Float + Pod>(
    input: &[T],
    weight: Weights<'_, T>,
    bias: Option<&[T]>,
    channels: usize,
    w: &WindowGeometry,
    post: Activation,
    residual: Option<&[T]>,
    out: &mut [T],
    threads: usize,
) {
    if w.out_len == 0 || channels == 0 {
        return;
    }
    let (rows, cols) = (Axis::of(w, 0), Axis::of(w, 1));
    let bands = Bands::of(rows, cols);
    let batch_in = channels * w.in_len;
    let batch_out = channels * w.out_len;
    let block_out = LANES * w.out_len;
    let blocks = channels.div_ceil(LANES);
    // Cancellation: blocks poll the run's token; the run fails at its next check (run_control).
    let stop = crate::run_control::stop_token();
    for (b, y) in out.chunks_exact_mut(batch_out).enumerate() {
        let x = &input[b * batch_in..][..batch_in];
        let r = residual.map(|r| &r[b * batch_out..][..batch_out]);
        let task = |blk: usize, y: &mut [T]| {
            if stop.should_stop_at(blk) {
                return;
            }
            let c0 = blk * LANES;
            let lanes = (channels - c0).min(LANES);
            let taps = w.kernel_len;
            let mut local = [[T::ZERO; LANES]; MAX_TAPS];
            let wt = match weight {
                Weights::Interleaved(all) => &all[blk * taps..][..taps],
                Weights::Shared(wt) => &wt[..taps],
                Weights::Plain(weight) => {
                    // Interleaved now; lanes past the block's channels stay zero.
                    let k = &weight[c0 * taps..][..lanes * taps];
                    for (l, kl) in k.chunks_exact(taps).enumerate() {
                        for (t, &v) in kl.iter().enumerate() {
                            local[t][l] = v;
                        }
                    }
                    &local[..taps]
                }
            };
            with_pack_buffers::<T, _>(bands.in_len, bands.out_len, |band_in, band_out| {
                block(
                    &x[c0 * w.in_len..][..lanes * w.in_len],
                    wt,
                    bias.map(|b| &b[c0..c0 + lanes]),
                    &bands,
                    post,
                    r.map(|r| &r[c0 * w.out_len..][..lanes * w.out_len]),
                    y,
                    band_in,
                    band_out,
                )
            });
        };
        let work = batch_out.saturating_mul(w.kernel_len);
        if threads <= 1 || blocks < 2 || work < PARALLEL_MIN_MULADDS {
            y.chunks_mut(block_out)
                .enumerate()
                .for_each(|(i, y)| task(i, y));
        } else if let Weights::Shared(_) = weight {
            // Window sums keep nothing per channel between runs: a block goes to whichever
            // thread is free (pinned halves waited on a busy core: 3x slower at 2 threads on
            // a loaded machine).
            crate::parallel::for_each_chunk_mut(y, block_out, 1, task);
        } else {
            // Each thread keeps the same channels on every run (their planes stay in its cache).
            crate::parallel::for_each_chunk_mut_pinned(y, block_out, task);
        }
    }
}

/// A constant f32 depthwise weight `[channels, 1, kh, kw]` interleaved once, at plan time, for
/// the blocked kernel: per block of [`LANES`] channels, one vector per tap (zero past the last
/// channel). Held by the plan in Persistent memory; the original is freed.
#[derive(Debug)]
pub struct BlockedWeights {
    data: Tensor,
    /// `[channels, 1, kh, kw]`.
    dims: [usize; 4],
}

impl BlockedWeights {
    pub fn new(weight: &[f32], weight_dims: &[usize]) -> KernelResult<Self> {
        let invalid = |reason: String| KernelError::InvalidParam {
            op: "Conv",
            param: "weight",
            reason,
        };
        let &[channels, 1, kh, kw] = weight_dims else {
            return Err(invalid(format!(
                "{weight_dims:?} is not a 2-D depthwise kernel"
            )));
        };
        let taps = kh * kw;
        if taps == 0 || taps > MAX_TAPS || channels.checked_mul(taps) != Some(weight.len()) {
            return Err(invalid(format!(
                "{} values do not make a {weight_dims:?} kernel of at most {MAX_TAPS} taps",
                weight.len()
            )));
        }
        let data = interleave_weight_rows(weight, taps, LANES).map_err(invalid)?;
        Ok(BlockedWeights {
            data,
            dims: [channels, 1, kh, kw],
        })
    }
}

/// Whether a constant depthwise weight of a Conv with these planned dims is worth interleaving
/// at plan time: the layer takes the blocked kernel (not the row kernel, which reads the
/// original weight as it is).
pub(crate) fn prepack_pays(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> bool {
    let (Some(&c), [m, 1, _, _]) = (input_dims.get(1), weight_dims) else {
        return false;
    };
    input_dims.len() == 4
        && p.groups == c
        && *m == c
        && window(input_dims, weight_dims, p).is_ok_and(|w| {
            pays(&w, c, c) && !depthwise_rows::pays(&w, c, c) && !depthwise_direct::pays(&w, c, c)
        })
}

/// The depthwise Conv `out = post(conv(input, weight) + bias + residual)` with the weight in
/// `weights`, for an NCHW `input` of `input_dims`. Lengths are checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise_prepacked(
    input: &[f32],
    input_dims: &[usize],
    weights: &BlockedWeights,
    p: &ConvParams,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    let channels = weights.dims[0];
    if input_dims.len() != 4 || input_dims[1] != channels || p.groups != channels {
        return Err(KernelError::InvalidParam {
            op: "Conv",
            param: "input",
            reason: format!("{input_dims:?} does not fit the {:?} kernel", weights.dims),
        });
    }
    let w = window(input_dims, &weights.dims, p)?;
    let planes = input_dims[0] * channels;
    check_len("Conv", "input", input.len(), planes * w.in_len)?;
    check_len("Conv", "output", out.len(), planes * w.out_len)?;
    if let Some(r) = residual {
        check_len("Conv", "residual", r.len(), out.len())?;
    }
    if let Some(b) = bias {
        check_len("Conv", "bias", b.len(), channels)?;
    }
    let read = weights
        .data
        .read::<f32>()
        .map_err(|e| KernelError::InvalidParam {
            op: "Conv",
            param: "weight",
            reason: e.to_string(),
        })?;
    let packed = read.as_slice().ok_or_else(|| KernelError::InvalidParam {
        op: "Conv",
        param: "weight",
        reason: "packed weight is not contiguous".into(),
    })?;
    let vectors: &[[f32; LANES]] = bytemuck::cast_slice(packed);
    blocked(
        input,
        Weights::Interleaved(vectors),
        bias,
        channels,
        &w,
        p.post,
        residual,
        out,
        threads,
    );
    Ok(())
}

/// How a plane is cut into bands of output rows, and the buffers one band needs.
#[derive(Clone, Copy, Debug)]
struct Bands {
    rows: Axis,
    cols: Axis,
    /// Output rows per band.
    band_rows: usize,
    /// Padded input columns a row of outputs reads (the buffer's row length, in positions).
    span: usize,
    /// Elements of the interleaved input buffer (the tallest band's rows x `span` x `LANES`).
    in_len: usize,
    /// Elements of the interleaved output buffer.
    out_len: usize,
}

impl Bands {
    fn of(rows: Axis, cols: Axis) -> Self {
        let band_rows = (BAND_OUTPUTS / cols.output.max(1)).clamp(1, rows.output.max(1));
        let span = (cols.output - 1) * cols.stride + (cols.taps - 1) * cols.dilation + 1;
        Bands {
            rows,
            cols,
            band_rows,
            span,
            in_len: Self::input_rows(rows, band_rows) * span * LANES,
            out_len: band_rows * cols.output * LANES,
        }
    }

    /// Input rows a band of `band_rows` output rows reads.
    fn input_rows(rows: Axis, band_rows: usize) -> usize {
        (band_rows - 1) * rows.stride + (rows.taps - 1) * rows.dilation + 1
    }
}

multiversion! {
    /// One block of `lanes <= LANES` channels: `x` holds its input planes, `wt` its weights
    /// interleaved (one vector per tap, zero past the block's channels), `y` (and `residual`)
    /// its output planes.
    fn block<T: FloatPod>(
        x: &[T],
        wt: &[[T; LANES]],
        bias: Option<&[T]>,
        bands: &Bands,
        post: Activation,
        residual: Option<&[T]>,
        y: &mut [T],
        band_in: &mut [T],
        band_out: &mut [T],
    ) {
        let Bands { rows, cols, span, .. } = *bands;
        let (taps, lanes) = (rows.taps * cols.taps, y.len() / (rows.output * cols.output));
        let (in_len, out_len) = (rows.input * cols.input, rows.output * cols.output);
        let mut start = [T::ZERO; LANES];
        if let Some(bias) = bias {
            start[..lanes].copy_from_slice(bias);
        }
        // Where each tap reads, in positions from the window's top-left corner.
        let mut tap_at = [0usize; MAX_TAPS];
        for (t, at) in tap_at[..taps].iter_mut().enumerate() {
            *at = (t / cols.taps) * rows.dilation * span + (t % cols.taps) * cols.dilation;
        }
        let tap_at = &tap_at[..taps];
        let ow = cols.output;
        let mut oy0 = 0;
        while oy0 < rows.output {
            let band_rows = bands.band_rows.min(rows.output - oy0);
            let in_rows = Bands::input_rows(rows, band_rows);
            let buf = &mut band_in[..in_rows * span * LANES];
            fill_band(x, in_len, rows, cols, span, oy0, lanes, buf);
            let positions = band_rows * ow;
            let acc_out = &mut band_out[..positions * LANES];
            let shape = BandShape {
                rows: band_rows,
                cols: ow,
                row_step: rows.stride * span,
                col_step: cols.stride,
            };
            band_outputs(buf, &shape, wt, tap_at, &start, acc_out);
            let first = oy0 * ow;
            match residual {
                None => {
                    post.apply_all(acc_out);
                    deinterleave(acc_out, out_len, lanes, positions, &mut y[first..]);
                }
                Some(r) => {
                    deinterleave(acc_out, out_len, lanes, positions, &mut y[first..]);
                    for l in 0..lanes {
                        let at = l * out_len + first;
                        let r_l = Some(&r[at..][..positions]);
                        post.add_residual_bias_and_apply(&mut y[at..][..positions], r_l, T::ZERO);
                    }
                }
            }
            oy0 += band_rows;
        }
    }
}

/// Output positions computed together: enough independent multiply-add chains to hide their
/// latency, few enough to stay in registers with a weight and a source vector.
const GROUP: usize = 8;

/// The outputs of one band: `out[(oy * cols + ox) * LANES..][..LANES]` is `start` plus the
/// weighted taps of window `(oy, ox)`, whose top-left corner is buffer position
/// `oy * row_step + ox * col_step`. f32 on AVX-512 or AVX2 runs the vector kernel
/// ([`super::depthwise_blocked_band`]); everything else the portable loop, [`GROUP`] positions
/// at a time.
fn band_outputs<T: Float + Pod>(
    buf: &[T],
    shape: &BandShape,
    wt: &[[T; LANES]],
    tap_at: &[usize],
    start: &[T; LANES],
    out: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(simd)) = (TypeId::of::<T>() == TypeId::of::<f32>(), Simd::detect()) {
        let (buf, wt, out): (&[f32], &[[f32; LANES]], &mut [f32]) = (
            bytemuck::cast_slice(buf),
            bytemuck::cast_slice(wt),
            bytemuck::cast_slice_mut(out),
        );
        let start: &[f32; LANES] = bytemuck::cast_ref(start);
        depthwise_blocked_band::band_outputs(simd, buf, shape, wt, tap_at, start, out);
        return;
    }
    match wt.len() {
        // 3x3, the common case: the tap loop unrolls.
        9 => portable_band::<T, 9>(buf, shape, wt, tap_at, *start, out),
        _ => portable_band::<T, 0>(buf, shape, wt, tap_at, *start, out),
    }
}

/// [`band_outputs`] in plain Rust. `TAPS` is the tap count when it is known at compile time,
/// else 0.
fn portable_band<T: Float, const TAPS: usize>(
    buf: &[T],
    shape: &BandShape,
    wt: &[[T; LANES]],
    tap_at: &[usize],
    start: [T; LANES],
    out: &mut [T],
) {
    let step = shape.col_step;
    for (oy, out_row) in out.chunks_exact_mut(shape.cols * LANES).enumerate() {
        let mut groups = out_row.chunks_exact_mut(GROUP * LANES);
        let mut corner = oy * shape.row_step;
        for group in &mut groups {
            window_group::<T, GROUP, TAPS>(buf, corner, step, wt, tap_at, start, group);
            corner += GROUP * step;
        }
        for single in groups.into_remainder().chunks_exact_mut(LANES) {
            window_group::<T, 1, TAPS>(buf, corner, step, wt, tap_at, start, single);
            corner += step;
        }
    }
}

/// `G` consecutive output positions of a row: position `q` has its window's top-left corner at
/// buffer position `corner + q * step`; `out` gets `G` interleaved vectors, each `start` plus
/// the weighted taps. Independent accumulator chains share each weight vector.
#[inline(always)]
fn window_group<T: Float, const G: usize, const TAPS: usize>(
    buf: &[T],
    corner: usize,
    step: usize,
    wt: &[[T; LANES]],
    tap_at: &[usize],
    start: [T; LANES],
    out: &mut [T],
) {
    let taps = if TAPS > 0 { TAPS } else { wt.len() };
    let (wt, tap_at) = (&wt[..taps], &tap_at[..taps]);
    let last = (G - 1) * step * LANES;
    let mut acc = [start; G];
    for (w, &at) in wt.iter().zip(tap_at) {
        let first = (corner + at) * LANES;
        let window = &buf[first..first + last + LANES];
        for (q, a) in acc.iter_mut().enumerate() {
            let src = &window[q * step * LANES..][..LANES];
            for ((a, &wl), &s) in a.iter_mut().zip(w).zip(src) {
                *a += wl * s;
            }
        }
    }
    for (o, a) in out.chunks_exact_mut(LANES).zip(&acc) {
        o.copy_from_slice(a);
    }
}

/// Copies the input rows under output rows `oy0..` into `buf`, interleaved and zero-padded:
/// position `(r, c)` (`LANES` elements at `(r * span + c) * LANES`) holds padded input
/// `(oy0 * stride + r, c)` of the block's `lanes` channels.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fill_band<T: Float + Pod>(
    x: &[T],
    in_len: usize,
    rows: Axis,
    cols: Axis,
    span: usize,
    oy0: usize,
    lanes: usize,
    buf: &mut [T],
) {
    // Padded columns lo..hi hold input columns 0..hi - lo.
    let lo = cols.pad.min(span);
    let hi = (cols.pad + cols.input).min(span);
    let row_len = span * LANES;
    // Band rows r0..r1 read input rows (inside the plane); the rest are padding.
    let first = (oy0 * rows.stride) as isize - rows.pad as isize;
    let r0 = (-first).clamp(0, (buf.len() / row_len) as isize) as usize;
    let r1 =
        (rows.input as isize - first).clamp(r0 as isize, (buf.len() / row_len) as isize) as usize;
    buf[..r0 * row_len].fill(T::ZERO);
    buf[r1 * row_len..].fill(T::ZERO);
    if r0 == r1 {
        return;
    }
    for row in buf[r0 * row_len..r1 * row_len].chunks_exact_mut(row_len) {
        zero_positions(&mut row[..lo * LANES]);
        zero_positions(&mut row[hi * LANES..]);
    }
    let iy0 = (first + r0 as isize) as usize;
    let x = &x[iy0 * cols.input..];
    let dst = &mut buf[(r0 * span + lo) * LANES..];
    if hi - lo == cols.input {
        // Whole input rows: one pass over the band's rows, contiguous in every plane.
        interleave_rows(x, in_len, lanes, (cols.input, r1 - r0), span, dst);
    } else {
        // The window never reaches the last input columns: row by row.
        for r in 0..r1 - r0 {
            let d = &mut dst[r * span * LANES..];
            interleave_rows(&x[r * cols.input..], in_len, lanes, (hi - lo, 1), span, d);
        }
    }
}

/// Zeroes whole positions (`LANES` elements each) of a band row: the one or two padding
/// positions at a row's ends as in-line vector stores, not a call to `memset` each (which took
/// 8 % of a 7x7 layer's time: 960 channels, two calls per band row).
#[inline(always)]
fn zero_positions<T: Float>(dst: &mut [T]) {
    const ZEROS: usize = LANES;
    match dst.len() / LANES {
        0 => {}
        1 => dst[..LANES].copy_from_slice(&[T::ZERO; ZEROS]),
        2 => {
            dst[..LANES].copy_from_slice(&[T::ZERO; ZEROS]);
            dst[LANES..2 * LANES].copy_from_slice(&[T::ZERO; ZEROS]);
        }
        _ => dst.fill(T::ZERO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::spatial::WindowAttrs;
    use crate::ops::convolution::depthwise::depthwise;

    fn geometry(
        hw: [usize; 2],
        k: usize,
        stride: usize,
        pad: [usize; 2],
        dil: usize,
    ) -> WindowGeometry {
        let kernel = [k, k];
        let attrs = WindowAttrs {
            kernel: &kernel,
            strides: &[stride, stride],
            pads_begin: &[pad[0], pad[0]],
            pads_end: &[pad[1], pad[1]],
            dilations: &[dil, dil],
            ceil_mode: false,
        };
        WindowGeometry::new("test", &hw, &attrs).unwrap()
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// The blocked kernel, both as `depthwise_blocked` (which prefers the direct and row
    /// kernels where they pay) and itself, equals the plane kernel for channel counts around a
    /// block, odd planes, strides 1 and 2, 3x3 and 5x5, padding and dilation, with bias,
    /// residual and activation, at 1 and 2 threads.
    #[test]
    fn blocked_equals_the_plane_kernel() {
        let cases = [
            // (channels, hw, k, stride, pads, dilation, batch)
            (16, [7, 7], 3, 1, [1, 1], 1, 1),
            (20, [14, 13], 3, 2, [1, 1], 1, 2),
            (8, [9, 11], 5, 1, [2, 2], 1, 1),
            (33, [12, 12], 3, 2, [0, 1], 1, 1),
            (17, [10, 40], 3, 1, [2, 2], 2, 1),
            (32, [3, 3], 3, 1, [0, 0], 1, 1),
            (24, [30, 30], 3, 1, [1, 1], 1, 1),
            (24, [13, 17], 3, 2, [1, 1], 1, 1),
            (33, [15, 15], 3, 1, [1, 1], 1, 2),
            (20, [23, 21], 5, 2, [2, 1], 1, 1),
            (40, [28, 28], 3, 2, [0, 1], 1, 1),
            (32, [57, 57], 3, 1, [1, 1], 1, 1),
        ];
        for (i, &(c, hw, k, s, pad, dil, batch)) in cases.iter().enumerate() {
            let w = geometry(hw, k, s, pad, dil);
            let x = values(batch * c * w.in_len, i as u32);
            let kw = values(c * w.kernel_len, 100 + i as u32);
            let bias = values(c, 200 + i as u32);
            let res = values(batch * c * w.out_len, 300 + i as u32);
            for (post, residual) in [
                (Activation::None, None),
                (Activation::Clip { min: 0.0, max: 6.0 }, None),
                (Activation::Relu, Some(&res[..])),
            ] {
                let mut want = vec![0.0f32; batch * c * w.out_len];
                depthwise(&x, &kw, Some(&bias), c, c, &w, post, residual, &mut want, 1);
                for (threads, itself) in [(1, false), (2, false), (1, true), (2, true)] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    let b = Some(&bias[..]);
                    crate::parallel::install(&pool, || {
                        if itself {
                            let wt = Weights::Plain(&kw[..]);
                            blocked(&x, wt, b, c, &w, post, residual, &mut got, threads)
                        } else {
                            depthwise_blocked(&x, &kw, b, c, &w, post, residual, &mut got, threads)
                        }
                    });
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                            "case {i} {post:?} threads {threads} blocked itself {itself}: \
                             element {j}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// The blocked kernel on weights interleaved at plan time equals the plane kernel, wide
    /// planes included (the Conv only prepacks narrow ones, but the kernel takes any), with
    /// bias, residual and activation, at 1 and 2 threads; bad lengths are errors.
    #[test]
    fn prepacked_equals_the_plane_kernel() {
        let cases = [
            // (channels, hw, k, stride, pads, batch)
            (960, [7, 7], 3, 1, [1, 1], 1),
            (40, [14, 14], 3, 2, [1, 1], 2),
            (17, [9, 11], 5, 1, [2, 2], 1),
            (33, [12, 12], 3, 2, [0, 1], 1),
            (24, [30, 30], 3, 1, [1, 1], 1),
        ];
        for (i, &(c, hw, k, s, pad, batch)) in cases.iter().enumerate() {
            let w = geometry(hw, k, s, pad, 1);
            let x = values(batch * c * w.in_len, i as u32);
            let kw = values(c * w.kernel_len, 100 + i as u32);
            let bias = values(c, 200 + i as u32);
            let res = values(batch * c * w.out_len, 300 + i as u32);
            let packed = BlockedWeights::new(&kw, &[c, 1, k, k]).unwrap();
            for (post, residual) in [
                (Activation::None, None),
                (Activation::Clip { min: 0.0, max: 6.0 }, None),
                (Activation::HardSwish, Some(&res[..])),
            ] {
                let p = ConvParams {
                    kernel: vec![k, k],
                    strides: vec![s, s],
                    pads_begin: vec![pad[0], pad[0]],
                    pads_end: vec![pad[1], pad[1]],
                    dilations: vec![1, 1],
                    groups: c,
                    post,
                };
                let dims = [batch, c, hw[0], hw[1]];
                let mut want = vec![0.0f32; batch * c * w.out_len];
                depthwise(&x, &kw, Some(&bias), c, c, &w, post, residual, &mut want, 1);
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    crate::parallel::install(&pool, || {
                        let b = Some(&bias[..]);
                        depthwise_prepacked(&x, &dims, &packed, &p, b, residual, &mut got, threads)
                    })
                    .unwrap();
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                            "case {i} {post:?} threads {threads}: element {j}: {a} vs {b}"
                        );
                    }
                }
                let mut short = vec![0.0f32; want.len() - 1];
                let b = Some(&bias[..]);
                assert!(
                    depthwise_prepacked(&x, &dims, &packed, &p, b, None, &mut short, 1).is_err()
                );
            }
        }
        assert!(BlockedWeights::new(&[1.0; 8], &[3, 1, 3, 3]).is_err());
    }

    /// The vector band kernel on this CPU's ISA equals the portable loop: rows of 1 to 21
    /// positions (every remainder after the AVX-512 and AVX2 groups), strides 1 to 3, 1 to 25
    /// taps with dilation.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn band_kernel_equals_the_portable_loop() {
        let Some(simd) = Simd::detect() else {
            eprintln!("skipped: the band kernel needs AVX-512 or AVX2");
            return;
        };
        let mut case = 0u32;
        for k in [1, 3, 5] {
            for (rows, cols) in (1..=21).map(|c| (1 + c % 3, c)) {
                for step in 1..=3 {
                    case += 1;
                    let dil = 1 + (case as usize % 2);
                    let span = (cols - 1) * step + (k - 1) * dil + 1;
                    let shape = BandShape {
                        rows,
                        cols,
                        row_step: step * span,
                        col_step: step,
                    };
                    let tap_at: Vec<usize> = (0..k * k)
                        .map(|t| (t / k) * dil * span + (t % k) * dil)
                        .collect();
                    let in_rows = (rows - 1) * step + (k - 1) * dil + 1;
                    let buf = values(in_rows * span * LANES, case);
                    let wt: Vec<[f32; LANES]> = values(k * k * LANES, 500 + case)
                        .chunks_exact(LANES)
                        .map(|c| c.try_into().unwrap())
                        .collect();
                    let start: [f32; LANES] = values(LANES, 900 + case).try_into().unwrap();
                    let mut want = vec![0.0f32; rows * cols * LANES];
                    portable_band::<f32, 0>(&buf, &shape, &wt, &tap_at, start, &mut want);
                    let mut got = vec![f32::NAN; want.len()];
                    depthwise_blocked_band::band_outputs(
                        simd, &buf, &shape, &wt, &tap_at, &start, &mut got,
                    );
                    for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                            "k {k} {rows}x{cols} step {step} dil {dil}: element {j}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn takes_two_dimensional_single_multiplier_windows_only() {
        let w = geometry([7, 7], 3, 1, [1, 1], 1);
        assert!(pays(&w, 96, 96));
        assert!(!pays(&w, 96, 192), "channel multiplier 2");
        assert!(!pays(&w, 4, 4), "too few channels to fill a block");
        let kernel = [3];
        let attrs = WindowAttrs {
            kernel: &kernel,
            strides: &[1],
            pads_begin: &[1],
            pads_end: &[1],
            dilations: &[1],
            ceil_mode: false,
        };
        let w1 = WindowGeometry::new("test", &[20], &attrs).unwrap();
        assert!(!pays(&w1, 96, 96), "1-D");
    }
}
