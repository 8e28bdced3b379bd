//! Direct convolution for layers with few input channels, such as a CNN's first layer (3 colour
//! channels, 3x3, stride 2).
//!
//! im2col + GEMM gives such a layer a depth of only `channels x taps` (27), so unfolding and
//! the short products cost more than the multiply-adds. Here the output stays in NCHW:
//! consecutive output columns of one row sit in a vector, each tap's weight is broadcast, and a
//! register block of [`OC_BLOCK`] output channels x up to 5 (AVX-512) or 2 (AVX2) column
//! vectors shares every input load (`few_channels_block`). A band of input rows is first copied
//! into zero-padded column phases (one per column stride phase), so every tap of a strided or
//! padded convolution reads contiguous columns with no edge cases. Bands of output rows are
//! spread over the threads.
//!
//! f32 on AVX-512 or AVX2 + FMA (elsewhere the GEMM path stays); the weights are reordered once
//! at plan time ([`FewChannelWeights`], Persistent memory).

use strata_core::Tensor;

use super::band_output::OutPtr;
use super::conv_params::ConvParams;
use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::spatial::{check_len, WindowAttrs, WindowGeometry};

#[cfg(target_arch = "x86_64")]
use super::few_channels_block::{self as kernel, Row};
use super::interleaved_weights::interleave_weight_rows;
use super::row_band::{Band, Clamp, ClampKind, MAX_DEPTH};
#[cfg(target_arch = "x86_64")]
use super::simd::Simd;

const OP: &str = "Conv";
/// Output channels of a register block (one broadcast weight each per tap).
pub(super) const OC_BLOCK: usize = 4;
/// Output channels computed together through a band's rows (a multiple of [`OC_BLOCK`]).
/// SqueezeNet's 3x3/2 RGB layer alone, one thread: all 64 channels a row at a time 388 us, groups
/// of 4 376 us, of 8 361 us, of 16 340 us.
const CHANNEL_GROUP: usize = 4 * OC_BLOCK;

/// Whether the direct kernel takes this convolution: f32 on AVX-512 or AVX2, 2-D, one group, at most 4
/// input channels and [`MAX_DEPTH`] taps over them, at least [`OC_BLOCK`] output channels and
/// output rows at least 8 wide (narrower rows waste most of each vector).
pub(crate) fn pays(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> bool {
    if !runs() || input_dims.len() != 4 || weight_dims.len() != 4 || p.groups != 1 {
        return false;
    }
    let (cin, cout) = (input_dims[1], weight_dims[0]);
    let depth = cin * weight_dims[2] * weight_dims[3];
    let Ok(w) = window(input_dims, weight_dims, p) else {
        return false;
    };
    weight_dims[1] == cin
        && (1..=4).contains(&cin)
        && depth <= MAX_DEPTH
        && cout >= OC_BLOCK
        && w.out_dims[1] >= 8
}

/// Whether the kernel runs on this CPU (AVX-512 or AVX2 + FMA).
fn runs() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        Simd::detect().is_some()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The 2-D window of a Conv with these dims.
pub(super) fn window(
    input_dims: &[usize],
    weight_dims: &[usize],
    p: &ConvParams,
) -> KernelResult<WindowGeometry> {
    let attrs = WindowAttrs {
        kernel: &weight_dims[2..],
        strides: &p.strides,
        pads_begin: &p.pads_begin,
        pads_end: &p.pads_end,
        dilations: &p.dilations,
        ceil_mode: false,
    };
    WindowGeometry::new(OP, &input_dims[2..], &attrs)
}

/// A weight `[out, in, kh, kw]` reordered for the kernel: per block of [`OC_BLOCK`] output
/// channels, per tap `(c, ky, kx)`, the block's [`OC_BLOCK`] weights (zero past the last
/// channel). Held by the plan in Persistent memory; the original is freed.
#[derive(Debug)]
pub struct FewChannelWeights {
    data: Tensor,
    /// `[out, in, kh, kw]`.
    dims: [usize; 4],
}

impl FewChannelWeights {
    pub fn new(weight: &[f32], weight_dims: &[usize]) -> KernelResult<Self> {
        let invalid = |reason: String| KernelError::InvalidParam {
            op: OP,
            param: "weight",
            reason,
        };
        let &[cout, cin, kh, kw] = weight_dims else {
            return Err(invalid(format!("{weight_dims:?} is not a 2-D kernel")));
        };
        let depth = cin * kh * kw;
        if depth == 0 || depth > MAX_DEPTH || cout.checked_mul(depth) != Some(weight.len()) {
            return Err(invalid(format!(
                "{} values do not make a {weight_dims:?} kernel of at most {MAX_DEPTH} taps",
                weight.len()
            )));
        }
        let data = interleave_weight_rows(weight, depth, OC_BLOCK).map_err(invalid)?;
        Ok(FewChannelWeights {
            data,
            dims: [cout, cin, kh, kw],
        })
    }
}

/// `out = post(conv(input, weight) + bias + residual)` for an NCHW `input` of `input_dims` and
/// the weight in `weights`; `out` (and `residual`) hold `[N, out, OH, OW]`. Lengths are checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    input: &[f32],
    input_dims: &[usize],
    weights: &FewChannelWeights,
    p: &ConvParams,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    let [cout, cin, _, _] = weights.dims;
    if input_dims.len() != 4 || input_dims[1] != cin || p.groups != 1 {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "input",
            reason: format!("{input_dims:?} does not fit the {:?} kernel", weights.dims),
        });
    }
    let w = window(input_dims, &weights.dims, p)?;
    let batch = input_dims[0];
    let out_len = cout * w.out_len;
    check_len(OP, "input", input.len(), batch * cin * w.in_len)?;
    check_len(OP, "output", out.len(), batch * out_len)?;
    if let Some(r) = residual {
        check_len(OP, "residual", r.len(), out.len())?;
    }
    if let Some(b) = bias {
        check_len(OP, "bias", b.len(), cout)?;
    }
    if out.is_empty() {
        return Ok(());
    }
    let read = weights
        .data
        .read::<f32>()
        .map_err(|e| KernelError::InvalidParam {
            op: OP,
            param: "weight",
            reason: e.to_string(),
        })?;
    let packed = read.as_slice().ok_or_else(|| KernelError::InvalidParam {
        op: OP,
        param: "weight",
        reason: "packed weight is not contiguous".into(),
    })?;
    let band = Band::new(&w, cin);
    let oh = w.out_dims[0];
    let bands = oh.div_ceil(band.rows);
    let stop = crate::run_control::stop_token();
    let shared = OutPtr(out.as_mut_ptr());
    let clamp = Clamp::of(p.post, residual.is_some());
    let task = |i: usize| {
        if stop.should_stop_at(i) {
            return;
        }
        let (b, k) = (i / bands, i % bands);
        let oy0 = k * band.rows;
        let rows = band.rows.min(oh - oy0);
        let x = &input[b * cin * w.in_len..][..cin * w.in_len];
        let base = b * out_len;
        with_pack_buffers::<f32, _>(band.len, 0, |buf, _| {
            band.fill(x, oy0, rows, &mut buf[..band.len]);
            let job = Job {
                band: &band,
                buf: &buf[..band.len],
                packed,
                bias,
                clamp: clamp.unwrap_or(Clamp {
                    lo: 0.0,
                    hi: 0.0,
                    kind: ClampKind::None,
                }),
                channels: cout,
                out_plane: w.out_len,
                ow: w.out_dims[1],
            };
            // A group of channels at a time through all the band's rows: each channel's rows
            // are written one after the other (a few long runs), where a row of every channel
            // at a time wrote as many short runs as there are channels.
            for oc0 in (0..cout).step_by(CHANNEL_GROUP) {
                let group = oc0..(oc0 + CHANNEL_GROUP).min(cout);
                for r in 0..rows {
                    let oy = oy0 + r;
                    // SAFETY: row `oy` of every plane of batch item `b` belongs to this band's
                    // task alone; the output outlives the parallel loop.
                    unsafe { job.row(r, shared, base + oy * w.out_dims[1], group.clone()) };
                    if residual.is_none() && clamp.is_some() {
                        continue;
                    }
                    for c in group.clone() {
                        let at = base + c * w.out_len + oy * w.out_dims[1];
                        // SAFETY: as above, the same row of plane `c`.
                        let y = unsafe { shared.slice(at, w.out_dims[1]) };
                        match residual {
                            Some(res) => p.post.add_residual_bias_and_apply(
                                y,
                                Some(&res[at..][..y.len()]),
                                0.0,
                            ),
                            None => p.post.apply_all(y),
                        }
                    }
                }
            }
        });
    };
    let tasks = batch * bands;
    let muladds = out.len().saturating_mul(w.kernel_len * cin);
    if threads <= 1 || tasks < 2 || muladds < 1 << 16 {
        (0..tasks).for_each(task);
    } else {
        crate::parallel::for_each_index(tasks, task);
    }
    Ok(())
}

/// What every row of a band's task shares.
struct Job<'a> {
    band: &'a Band,
    buf: &'a [f32],
    packed: &'a [f32],
    bias: Option<&'a [f32]>,
    clamp: Clamp,
    channels: usize,
    out_plane: usize,
    ow: usize,
}

impl Job<'_> {
    /// Output row `r` of the band for the channels in `group` (starting on a multiple of
    /// [`OC_BLOCK`]): channel `c`'s row starts at `at + c * out_plane` of the output. The clamp
    /// is applied as the outputs are stored.
    ///
    /// # Safety
    /// Those rows of the output behind `out` are written by no other task meanwhile.
    unsafe fn row(&self, r: usize, out: OutPtr, at: usize, group: std::ops::Range<usize>) {
        let band = self.band;
        let src = &self.buf[r * band.rows_axis.stride * band.row_len..];
        #[cfg(target_arch = "x86_64")]
        {
            let row = Row {
                src,
                taps: band.taps(),
                reach: band.reach(),
                weights: self.packed,
                bias: self.bias,
                clamp: self.clamp,
                out: out.at(0),
                at,
                plane: self.out_plane,
                channels: self.channels,
                ow: self.ow,
            };
            // SAFETY: the token was detected; the rows hold `ow` elements written by this task
            // alone (the caller's contract).
            unsafe {
                match Simd::detect() {
                    Some(Simd::Avx512(isa)) => kernel::row_avx512(isa, &row, group),
                    Some(Simd::Avx2(isa)) => kernel::row_avx2(isa, &row, group),
                    None => unreachable!("the few-channel kernel runs without SIMD"),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (src, out, at, group);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kernels::activation::Activation;
    use crate::support::rng::Rng;

    /// Direct 2-D convolution from the ONNX definition, in f64, with the epilogue.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::ops::convolution) fn reference(
        x: &[f32],
        x_dims: &[usize],
        wt: &[f32],
        w_dims: &[usize],
        p: &ConvParams,
        bias: &[f32],
        residual: Option<&[f32]>,
        out_dims: [usize; 2],
    ) -> Vec<f32> {
        let [n, c, h, wd] = [x_dims[0], x_dims[1], x_dims[2], x_dims[3]];
        let [m, _, kh, kw] = [w_dims[0], w_dims[1], w_dims[2], w_dims[3]];
        let [oh, ow] = out_dims;
        let mut out = vec![0.0f32; n * m * oh * ow];
        for b in 0..n {
            for o in 0..m {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = f64::from(bias[o]);
                        for ci in 0..c {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * p.strides[0] + ky * p.dilations[0]) as isize
                                        - p.pads_begin[0] as isize;
                                    let ix = (ox * p.strides[1] + kx * p.dilations[1]) as isize
                                        - p.pads_begin[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                        continue;
                                    }
                                    let xv = x[((b * c + ci) * h + iy as usize) * wd + ix as usize];
                                    let wv = wt[((o * c + ci) * kh + ky) * kw + kx];
                                    acc += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                        let at = ((b * m + o) * oh + oy) * ow + ox;
                        if let Some(r) = residual {
                            acc += f64::from(r[at]);
                        }
                        out[at] = p.post.apply(acc as f32);
                    }
                }
            }
        }
        out
    }

    /// Random shapes (batch, channels 1-4, odd sizes, kernels 1-7, strides 1-3, dilation,
    /// asymmetric padding, channel counts off the block) with every epilogue, at 1 and 2
    /// threads, against the reference.
    #[test]
    fn equals_the_reference_convolution() {
        if !runs() {
            eprintln!("skipped: the few-channel kernel needs AVX-512 or AVX2");
            return;
        }
        let mut rng = Rng::new(7);
        let posts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -0.5,
                max: 0.75,
            },
            Activation::Sigmoid,
        ];
        for case in 0..60 {
            let (n, c) = (rng.range(1, 2), rng.range(1, 4));
            let (kh, kw) = (rng.range(1, 5), rng.range(1, 7));
            let (sy, sx) = (rng.range(1, 3), rng.range(1, 3));
            let (dy, dx) = if rng.below(4) == 0 {
                (2, rng.range(1, 2))
            } else {
                (1, 1)
            };
            let (h, wd) = (
                rng.range(kh * dy, 40),
                rng.range((kw - 1) * dx + 8 * sx, 90),
            );
            let p = ConvParams {
                kernel: vec![kh, kw],
                strides: vec![sy, sx],
                pads_begin: vec![rng.below(kh), rng.below(kw)],
                pads_end: vec![rng.below(kh), rng.below(kw)],
                dilations: vec![dy, dx],
                groups: 1,
                post: posts[case % posts.len()],
            };
            let m = rng.range(4, 37);
            let x_dims = [n, c, h, wd];
            let w_dims = [m, c, kh, kw];
            let geometry = window(&x_dims, &w_dims, &p).unwrap();
            let [oh, ow] = [geometry.out_dims[0], geometry.out_dims[1]];
            let x = rng.vec(n * c * h * wd);
            let wt = rng.vec(m * c * kh * kw);
            let bias = rng.vec(m);
            let len = n * m * oh * ow;
            let residual = (case % 3 == 1).then(|| rng.vec(len));
            let want = reference(
                &x,
                &x_dims,
                &wt,
                &w_dims,
                &p,
                &bias,
                residual.as_deref(),
                [oh, ow],
            );
            let weights = FewChannelWeights::new(&wt, &w_dims).unwrap();
            for threads in [1, 2] {
                let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                let mut got = vec![f32::NAN; len];
                crate::parallel::install(&pool, || {
                    conv(
                        &x,
                        &x_dims,
                        &weights,
                        &p,
                        Some(&bias),
                        residual.as_deref(),
                        &mut got,
                        threads,
                    )
                })
                .unwrap();
                for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "case {case} {x_dims:?} {w_dims:?} {p:?} threads {threads}: element {j}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn takes_small_input_channel_counts_only() {
        let p = |s: usize, groups: usize| ConvParams {
            kernel: vec![3, 3],
            strides: vec![s, s],
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            dilations: vec![1, 1],
            groups,
            post: Activation::None,
        };
        if runs() {
            assert!(pays(&[1, 3, 224, 224], &[32, 3, 3, 3], &p(2, 1)));
        }
        assert!(
            !pays(&[1, 16, 56, 56], &[32, 16, 3, 3], &p(1, 1)),
            "16 channels"
        );
        assert!(!pays(&[1, 4, 56, 56], &[4, 1, 3, 3], &p(1, 4)), "grouped");
        assert!(!pays(&[1, 3, 9, 9], &[32, 3, 3, 3], &p(2, 1)), "5 columns");
        assert!(!pays(&[1, 3, 64], &[32, 3, 3], &p(1, 1)), "1-D");
    }

    #[test]
    fn bad_lengths_are_errors() {
        let wt = vec![0.5f32; 8 * 3 * 9];
        assert!(FewChannelWeights::new(&wt[1..], &[8, 3, 3, 3]).is_err());
        let weights = FewChannelWeights::new(&wt, &[8, 3, 3, 3]).unwrap();
        let p = ConvParams {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            dilations: vec![1, 1],
            groups: 1,
            post: Activation::None,
        };
        let x = vec![1.0f32; 3 * 16 * 16];
        let mut out = vec![0.0f32; 8 * 16 * 16];
        assert!(conv(
            &x,
            &[1, 3, 16, 16],
            &weights,
            &p,
            None,
            None,
            &mut out[1..],
            1
        )
        .is_err());
        assert!(conv(&x, &[1, 4, 16, 12], &weights, &p, None, None, &mut out, 1).is_err());
        assert!(conv(
            &x,
            &[1, 3, 16, 16],
            &weights,
            &p,
            Some(&[0.0; 7]),
            None,
            &mut out,
            1
        )
        .is_err());
    }
}
