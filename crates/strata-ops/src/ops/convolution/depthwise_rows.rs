//! Depthwise 2-D convolution row by row on the NCHW planes, for f32 on AVX-512 or AVX2, stride 1
//! and planes at least [`MIN_WIDTH`] wide.
//!
//! The blocked kernel ([`super::depthwise_blocked`]) interleaves 16 channels into vectors and
//! back, two transposes that cost more than its multiply-adds on the large planes of a
//! MobileNet's first stages (and four times the output for a stride-2 layer's input). Here
//! sixteen output columns of one row sit in a vector instead: a band of the plane's input rows
//! is copied zero-padded into column phases (the stride-2 split is two permutes per 32
//! columns), and every tap is one load and one multiply-add with the channel's broadcast weight
//! per vector, up to eight vectors of a row in registers. Bias and a Relu/Clip are applied as
//! the row is stored. Rows 7 wide fill less than half a vector, so those planes stay blocked.

use crate::kernels::activation::Activation;
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::phase_planes::MAX_TAPS;
use crate::kernels::spatial::WindowGeometry;

#[cfg(target_arch = "x86_64")]
use super::depthwise_rows_band;
use super::row_band::{Band, Clamp, ClampKind};
use super::simd::Simd;

/// The narrowest output rows this kernel takes. Measured on MobileNetV2 (1 thread): 112 and 56
/// wide it beat the blocked kernel (217 vs 250 us, 238 vs 261 us), 28 wide it tied, 14 wide it
/// lost (73 vs 44 us: a narrow row's fill costs more than its multiply-adds). Strided layers
/// lost at every width (the column phase split), so they stay blocked too. AVX2 uses the same
/// width: on Zen 3 (1 thread) 5x5 layers of 112x112 x 32 and 56x56 x 144 channels ran 0.5-1.0
/// ms against the blocked kernel's 3.1-3.6 (narrower planes not measured).
const MIN_WIDTH: usize = 48;
/// Whether the row kernel takes this depthwise convolution: f32 on AVX-512 or AVX2 (the caller
/// checks the type), 2-D, one output channel per input channel, at most [`MAX_TAPS`] taps, stride 1,
/// output rows at least [`MIN_WIDTH`] wide.
pub(crate) fn pays(w: &WindowGeometry, in_channels: usize, out_channels: usize) -> bool {
    Simd::detect().is_some()
        && w.in_dims.len() == 2
        && in_channels == out_channels
        && w.kernel_len <= MAX_TAPS
        && w.strides.iter().all(|&s| s == 1)
        && w.out_dims[1] >= MIN_WIDTH
}

/// As [`super::depthwise_blocked::depthwise_blocked`] (same arguments, lengths checked by the
/// caller), for a geometry [`pays`] accepted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise_rows(
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    channels: usize,
    w: &WindowGeometry,
    post: Activation,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) {
    let simd = Simd::detect().expect("the row kernel needs AVX-512 or AVX2");
    assert!(w.in_dims.len() == 2 && w.kernel_len <= MAX_TAPS);
    if w.out_len == 0 || channels == 0 {
        return;
    }
    let band = Band::new(w, 1);
    let (oh, ow) = (w.out_dims[0], w.out_dims[1]);
    let clamp = Clamp::of(post, residual.is_some());
    let in_clamp = clamp.unwrap_or(Clamp {
        lo: 0.0,
        hi: 0.0,
        kind: ClampKind::None,
    });
    let stop = crate::run_control::stop_token();
    // Output plane `p` (batch item p / channels) of `y`, its first plane.
    let planes = |first: usize, y: &mut [f32]| {
        with_pack_buffers::<f32, _>(band.len, 0, |buf, _| {
            for (i, y) in y.chunks_exact_mut(w.out_len).enumerate() {
                let p = first + i;
                if stop.should_stop_at(p) {
                    return;
                }
                let c = p % channels;
                let x = &input[p * w.in_len..][..w.in_len];
                let k = &weight[c * w.kernel_len..][..w.kernel_len];
                let start = bias.map_or(0.0, |b| b[c]);
                let mut oy0 = 0;
                while oy0 < oh {
                    let rows = band.rows.min(oh - oy0);
                    band.fill(x, oy0, rows, &mut buf[..band.len]);
                    let row_step = band.rows_axis.stride * band.row_len;
                    #[cfg(target_arch = "x86_64")]
                    {
                        depthwise_rows_band::rows_band(
                            simd,
                            &buf[..band.len],
                            (row_step, band.taps(), band.reach()),
                            k,
                            start,
                            in_clamp,
                            &mut y[oy0 * ow..],
                            (rows, ow),
                        );
                    }
                    oy0 += rows;
                }
                match residual {
                    Some(res) => post.add_residual_bias_and_apply(
                        y,
                        Some(&res[p * w.out_len..][..w.out_len]),
                        0.0,
                    ),
                    None if clamp.is_none() => post.apply_all(y),
                    None => {}
                }
            }
        })
    };
    super::depthwise::for_each_plane_run(
        out,
        w.out_len,
        w.out_len.saturating_mul(w.kernel_len),
        threads,
        planes,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::spatial::WindowAttrs;
    use crate::ops::convolution::depthwise::depthwise;
    use crate::support::rng::Rng;

    /// The row kernel equals the plane kernel on random geometries (kernels 1-7, strides 1-3,
    /// dilation, asymmetric padding, odd sizes, batch 1-2) with every epilogue, at 1 and 2
    /// threads. The kernel computes any of them; `pays` only picks where it is fastest.
    #[test]
    fn rows_equal_the_plane_kernel() {
        if Simd::detect().is_none() {
            eprintln!("skipped: the row kernel needs AVX-512 or AVX2");
            return;
        }
        let mut rng = Rng::new(11);
        let posts = [
            Activation::None,
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::Relu,
            Activation::HardSwish,
        ];
        for case in 0..80 {
            let k = [rng.range(1, 7), rng.range(1, 7)];
            let s = rng.range(1, 3);
            let d = if rng.below(4) == 0 { 2 } else { 1 };
            let hw = [
                rng.range((k[0] - 1) * d + 1, 40),
                rng.range((k[1] - 1) * d + 1, 130),
            ];
            let pb = [rng.below(k[0]), rng.below(k[1])];
            let pe = [rng.below(k[0]), rng.below(k[1])];
            let attrs = WindowAttrs {
                kernel: &k,
                strides: &[s, s],
                pads_begin: &pb,
                pads_end: &pe,
                dilations: &[d, d],
                ceil_mode: false,
            };
            let w = WindowGeometry::new("test", &hw, &attrs).unwrap();
            let (c, batch) = (rng.range(1, 40), rng.range(1, 2));
            let x = rng.vec(batch * c * w.in_len);
            let kw = rng.vec(c * w.kernel_len);
            let bias = rng.vec(c);
            let res = (case % 3 == 2).then(|| rng.vec(batch * c * w.out_len));
            let post = posts[case % posts.len()];
            let mut want = vec![0.0f32; batch * c * w.out_len];
            depthwise(
                &x,
                &kw,
                Some(&bias),
                c,
                c,
                &w,
                post,
                res.as_deref(),
                &mut want,
                1,
            );
            for threads in [1, 2] {
                let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                let mut got = vec![f32::NAN; want.len()];
                crate::parallel::install(&pool, || {
                    depthwise_rows(
                        &x,
                        &kw,
                        Some(&bias),
                        c,
                        &w,
                        post,
                        res.as_deref(),
                        &mut got,
                        threads,
                    )
                });
                for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                        "case {case} k {k:?} s {s} d {d} hw {hw:?} pads {pb:?} {pe:?} {post:?} \
                         threads {threads}: element {j}: {a} vs {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn takes_wide_stride_one_planes() {
        let geometry = |hw: usize, s: usize| {
            let attrs = WindowAttrs {
                kernel: &[3, 3],
                strides: &[s, s],
                pads_begin: &[1, 1],
                pads_end: &[1, 1],
                dilations: &[1, 1],
                ceil_mode: false,
            };
            WindowGeometry::new("test", &[hw, hw], &attrs).unwrap()
        };
        if Simd::detect().is_some() {
            assert!(pays(&geometry(112, 1), 32, 32));
            assert!(pays(&geometry(56, 1), 144, 144));
        }
        assert!(!pays(&geometry(112, 2), 96, 96), "stride 2");
        assert!(!pays(&geometry(14, 1), 576, 576), "14 wide");
        assert!(!pays(&geometry(56, 1), 32, 64), "channel multiplier 2");
    }
}
