//! Depthwise 3x3 convolution at stride 2 (and stride 1 from 8 outputs wide) plane by plane on
//! the NCHW data, for f32 on AVX-512 or AVX2.
//!
//! The blocked kernel ([`super::depthwise_blocked`]) interleaves 16 channels of the input band
//! into vectors first; at stride 2 the input is four times the output, so that transpose costs
//! more than the multiply-adds (MobileNetV2's stride-2 layers ran 1.4-2x onnxruntime's time),
//! and the row kernel ([`super::depthwise_rows`]) copies every input row into a padded band.
//! Here each vector holds sixteen (AVX2: eight) outputs of one row, read straight from the input
//! rows ([`super::depthwise_direct_plane`]: register permutes at stride 2, shifted loads at
//! stride 1, masks for the padding): no copy of the input at all. Bias is the accumulators' start and
//! Relu/Clip are applied at the store; a residual or another activation runs as a pass over
//! the finished plane. Stride-1 planes narrower than 28 with rows as wide as their input's
//! ("same" padding: MobileNetV2's 14x14) go through the flat kernel
//! ([`super::depthwise_flat_avx512`]), sixteen consecutive outputs of the plane per vector. On
//! AVX2 a row of 7 outputs fills 7/8 of a vector, so this kernel takes every width from 7.

use crate::kernels::activation::Activation;
use crate::kernels::spatial::WindowGeometry;

#[cfg(target_arch = "x86_64")]
use super::depthwise_direct_plane::{self, Plane};
#[cfg(target_arch = "x86_64")]
use super::depthwise_flat_avx512::{self, Masks};
use super::row_band::{Clamp, ClampKind};
use super::simd::Simd;

/// The narrowest output rows taken at stride 1 (narrower ones fill too little of a vector; the
/// blocked kernel takes them).
const MIN_WIDTH_1: usize = 28;
/// The narrowest output rows taken at stride 2. MobileNetV2 (1 thread): 56, 28 and 14 wide
/// ran 1.5-1.9x faster than the blocked kernel, 7 wide 1.6x slower (per-plane overhead on a
/// vector less than half full).
const MIN_WIDTH_2: usize = 14;
/// The narrowest output rows taken on AVX2, either stride. Zen 3 (1 thread, one-layer models
/// with Clip, medians of 200 runs, noisy machine): 7x7 x 960 channels ran 68 us against the
/// blocked kernel's 105, 14x14 x 384 77 against 160, and 14 -> 7 at stride 2 (576 channels)
/// 54 against 179.
const MIN_WIDTH_AVX2: usize = 7;
/// The narrowest output rows the flat kernel takes at stride 1. MobileNetV2 on Zen 4 (1 thread,
/// in the model): 14x14 ran 47-55 us against the blocked kernel's 54-63 (384 channels) and
/// 66-78 against 82-90 (576); 7x7 tied or lost (43-55 against 44-47 us for 960 channels: a
/// quarter of every vector is a padding lane, and the blocked kernel's transposes are small).
const MIN_FLAT_WIDTH: usize = 8;
/// Whether a stride-1 geometry takes the flat kernel ([`super::depthwise_flat_avx512`]): rows
/// narrower than [`MIN_WIDTH_1`], as wide as the input rows, planes of at most 1024 outputs.
fn flat(w: &WindowGeometry) -> bool {
    Simd::detect().and_then(Simd::avx512).is_some()
        && (MIN_FLAT_WIDTH..MIN_WIDTH_1).contains(&w.out_dims[1])
        && w.in_dims[1] == w.out_dims[1]
        && w.out_len <= 1024
}

/// Whether this kernel takes the depthwise convolution: f32 on AVX-512 or AVX2 (the caller
/// checks the type), 2-D, one output channel per input channel, a 3x3 kernel at stride 2 or 1
/// with output rows at least [`MIN_WIDTH_2`] or [`MIN_WIDTH_1`] wide (or [`flat`] at stride 1;
/// on AVX2 [`MIN_WIDTH_AVX2`]), without dilation, at most one row and column of padding before
/// the plane.
pub(crate) fn pays(w: &WindowGeometry, in_channels: usize, out_channels: usize) -> bool {
    let Some(simd) = Simd::detect() else {
        return false;
    };
    let (min_1, min_2) = match simd {
        Simd::Avx512(_) => (MIN_WIDTH_1, MIN_WIDTH_2),
        Simd::Avx2(_) => (MIN_WIDTH_AVX2, MIN_WIDTH_AVX2),
    };
    w.in_dims.len() == 2
        && in_channels == out_channels
        && w.kernel[..] == [3, 3]
        && match w.strides[..] {
            [1, 1] => w.out_dims[1] >= min_1 || flat(w),
            [2, 2] => w.out_dims[1] >= min_2,
            _ => false,
        }
        && w.dilations[..] == [1, 1]
        && w.pads_begin.iter().all(|&p| p <= 1)
}

/// As [`super::depthwise_blocked::depthwise_blocked`] (same arguments, lengths checked by the
/// caller), for a geometry [`pays`] accepted.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise_direct(
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
    assert!(pays(w, channels, channels));
    #[cfg(target_arch = "x86_64")]
    let simd = Simd::detect().expect("pays found an ISA");
    if w.out_len == 0 || channels == 0 {
        return;
    }
    let clamp = Clamp::of(post, residual.is_some());
    let in_clamp = clamp.unwrap_or(Clamp {
        lo: 0.0,
        hi: 0.0,
        kind: ClampKind::None,
    });
    #[cfg(target_arch = "x86_64")]
    let geometry = Plane {
        stride: w.strides[0],
        ih: w.in_dims[0],
        iw: w.in_dims[1],
        oh: w.out_dims[0],
        ow: w.out_dims[1],
        pad_top: w.pads_begin[0],
        pad_left: w.pads_begin[1],
    };
    #[cfg(target_arch = "x86_64")]
    let masks = (w.strides[..] == [1, 1] && flat(w)).then(|| Masks::new(&geometry));
    let stop = crate::run_control::stop_token();
    // Output planes `first..` in `y`.
    let planes = |first: usize, y: &mut [f32]| {
        for (i, y) in y.chunks_exact_mut(w.out_len).enumerate() {
            let p = first + i;
            if stop.should_stop_at(p) {
                return;
            }
            let c = p % channels;
            let x = &input[p * w.in_len..][..w.in_len];
            let k: &[f32; 9] = weight[c * 9..][..9].try_into().expect("nine taps");
            let start = bias.map_or(0.0, |b| b[c]);
            #[cfg(target_arch = "x86_64")]
            match &masks {
                // SAFETY: the flat masks are made on AVX-512 only (`flat`).
                Some(m) => unsafe {
                    depthwise_flat_avx512::plane(x, &geometry, m, k, start, in_clamp, y)
                },
                None => {
                    depthwise_direct_plane::direct_plane(simd, x, geometry, k, start, in_clamp, y)
                }
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
    };
    // Runs of planes to whichever thread is free. Pinned splits measured slower (Sapphire
    // Rapids, 2 threads, single-layer models on a shared machine, alternating, minimum of 300
    // runs, medians of 5 rounds; branch `dw`, commit 8fb23db): each thread the same band of
    // output rows of every plane (the split of the pointwise convolution before these layers,
    // which cuts its output positions in halves) ran 1.28x (192 channels, 28 -> 14) and 1.16x
    // (144 channels, 56 -> 28) this split's time; a busy core holds its pinned half back.
    super::depthwise::for_each_plane_run(
        out,
        w.out_len,
        w.out_len.saturating_mul(9),
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

    fn avx512() -> Option<crate::ops::convolution::simd::Avx512> {
        Simd::detect().and_then(Simd::avx512)
    }

    fn geometry(hw: [usize; 2], pb: [usize; 2], pe: [usize; 2]) -> WindowGeometry {
        strided(hw, pb, pe, 2)
    }

    fn strided(hw: [usize; 2], pb: [usize; 2], pe: [usize; 2], s: usize) -> WindowGeometry {
        let attrs = WindowAttrs {
            kernel: &[3, 3],
            strides: &[s, s],
            pads_begin: &pb,
            pads_end: &pe,
            dilations: &[1, 1],
            ceil_mode: false,
        };
        WindowGeometry::new("test", &hw, &attrs).unwrap()
    }

    /// The direct kernel equals the plane kernel on random geometries it takes (strides 1 and
    /// 2, odd and even sizes, 1 to 150 wide so rows span one to several register chunks and
    /// end in partial vectors, padding 0-1 before and 0-2 after, batch 1-2) with every
    /// epilogue, at 1, 2 and 3 threads, on the widest instruction set this CPU has.
    #[test]
    fn direct_equals_the_plane_kernel() {
        if Simd::detect().is_none() {
            eprintln!("skipped: the direct kernel needs AVX-512 or AVX2");
            return;
        }
        let mut rng = Rng::new(23);
        let posts = [
            Activation::None,
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::Relu,
            Activation::HardSwish,
        ];
        let mut checked = 0;
        for case in 0..400 {
            let pb = [rng.below(2), rng.below(2)];
            let pe = [rng.below(3), rng.below(3)];
            let stride = 1 + case % 2;
            let hw = [
                rng.range(3 - pb[0] - pe[0].min(1), 40),
                rng.range(3 - pb[1] - pe[1].min(1), 150),
            ];
            let w = strided(hw, pb, pe, stride);
            // Flat geometries are tested below; the rest must be ones the kernel takes.
            if !pays(&w, 1, 1) || flat(&w) {
                continue;
            }
            checked += 1;
            let (c, batch) = (rng.range(1, 40), rng.range(1, 2));
            let x = rng.vec(batch * c * w.in_len);
            let kw = rng.vec(c * 9);
            let bias = (case % 4 != 3).then(|| rng.vec(c));
            let res = (case % 3 == 2).then(|| rng.vec(batch * c * w.out_len));
            let post = posts[case % posts.len()];
            let mut want = vec![0.0f32; batch * c * w.out_len];
            depthwise(
                &x,
                &kw,
                bias.as_deref(),
                c,
                c,
                &w,
                post,
                res.as_deref(),
                &mut want,
                1,
            );
            for threads in [1, 2, 3] {
                let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                let mut got = vec![f32::NAN; want.len()];
                crate::parallel::install(&pool, || {
                    depthwise_direct(
                        &x,
                        &kw,
                        bias.as_deref(),
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
                        "case {case} stride {stride} hw {hw:?} pads {pb:?} {pe:?} {post:?} \
                         threads {threads}: element {j}: {a} vs {b}"
                    );
                }
            }
        }
        assert!(checked >= 60, "only {checked} geometries taken");
    }

    /// MobileNetV2's planes (7x7 to 112x112, stride 1 and 2, "same" padding, and the 113-wide
    /// odd variant) through the direct kernel equal the plane kernel with a bias and Clip, a
    /// residual with Relu, and no epilogue, at 1 and 2 threads.
    #[test]
    fn direct_equals_the_plane_kernel_on_mobilenet_planes() {
        if Simd::detect().is_none() {
            eprintln!("skipped: the direct kernel needs AVX-512 or AVX2");
            return;
        }
        let mut rng = Rng::new(5);
        for (hw, stride) in [
            (7, 1),
            (14, 1),
            (14, 2),
            (28, 2),
            (56, 1),
            (112, 1),
            (113, 2),
        ] {
            let w = strided([hw, hw], [1, 1], [1, 1], stride);
            if !pays(&w, 3, 3) {
                continue;
            }
            let c = 3;
            let x = rng.vec(c * w.in_len);
            let kw = rng.vec(c * 9);
            let bias = rng.vec(c);
            let res = rng.vec(c * w.out_len);
            for (post, b, r) in [
                (
                    Activation::Clip { min: 0.0, max: 6.0 },
                    Some(&bias[..]),
                    None,
                ),
                (Activation::Relu, None, Some(&res[..])),
                (Activation::None, Some(&bias[..]), None),
            ] {
                let mut want = vec![0.0f32; c * w.out_len];
                depthwise(&x, &kw, b, c, c, &w, post, r, &mut want, 1);
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    crate::parallel::install(&pool, || {
                        depthwise_direct(&x, &kw, b, c, &w, post, r, &mut got, threads)
                    });
                    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{hw}x{hw} stride {stride} {post:?} threads {threads}: element \
                             {j}: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    /// The flat kernel (stride 1, rows 8 to 27 wide as wide as the input's) equals the plane
    /// kernel: "same" padding (1, 1) or (0, 2) across, any rows' padding, planes 1 to 37 rows
    /// high (the last vector of a plane partial or full), every epilogue, 1 and 2 threads.
    #[test]
    fn flat_equals_the_plane_kernel() {
        if avx512().is_none() {
            eprintln!("skipped: the flat kernel needs AVX-512");
            return;
        }
        let mut rng = Rng::new(31);
        let posts = [
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::None,
            Activation::Relu,
            Activation::HardSwish,
        ];
        for case in 0..80 {
            let across = if case % 2 == 0 { [1, 1] } else { [0, 2] };
            let (pt, pb) = (rng.below(2), rng.below(3));
            let ow = rng.range(MIN_FLAT_WIDTH, MIN_WIDTH_1 - 1);
            let oh = rng.range(1, 1024 / ow).min(37);
            // Input rows: oh = ih + pt + pb - 2.
            let ih = (oh + 2).saturating_sub(pt + pb).max(1);
            let w = strided([ih, ow], [pt, across[0]], [pb, across[1]], 1);
            if w.out_dims[0] == 0 {
                continue;
            }
            assert!(flat(&w) && pays(&w, 3, 3), "case {case}: {w:?}");
            let (c, batch) = (rng.range(1, 20), rng.range(1, 2));
            let x = rng.vec(batch * c * w.in_len);
            let kw = rng.vec(c * 9);
            let bias = (case % 4 != 3).then(|| rng.vec(c));
            let res = (case % 3 == 2).then(|| rng.vec(batch * c * w.out_len));
            let post = posts[case % posts.len()];
            let mut want = vec![0.0f32; batch * c * w.out_len];
            depthwise(
                &x,
                &kw,
                bias.as_deref(),
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
                    depthwise_direct(
                        &x,
                        &kw,
                        bias.as_deref(),
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
                        "case {case} {ih}x{ow} pads {pt},{pb} {across:?} {post:?} threads \
                         {threads}: element {j}: {a} vs {b}"
                    );
                }
            }
        }
    }

    /// Wide planes 1 to 14 output rows high (whole blocks of rows and every remainder after
    /// them, for the masked vectors at the rows' ends), strides 1 and 2, padding 0 or 1 on each
    /// side, equal the plane kernel with a bias and Clip, at 1 and 2 threads.
    #[test]
    fn row_blocks_equal_the_plane_kernel() {
        if Simd::detect().is_none() {
            eprintln!("skipped: the direct kernel needs AVX-512 or AVX2");
            return;
        }
        let mut rng = Rng::new(41);
        let clip = Activation::Clip { min: 0.0, max: 6.0 };
        for stride in [1, 2] {
            for oh in 1..=14 {
                let (pt, pb) = (oh % 2, (oh / 2) % 2);
                let ih = (oh - 1) * stride + 3 - pt - pb;
                let iw = if oh % 3 == 0 { 700 } else { 333 };
                let w = strided([ih, iw], [pt, 1], [pb, oh % 2], stride);
                assert_eq!(w.out_dims[0], oh);
                assert!(pays(&w, 2, 2));
                let c = 2;
                let x = rng.vec(c * w.in_len);
                let kw = rng.vec(c * 9);
                let bias = rng.vec(c);
                let mut want = vec![0.0f32; c * w.out_len];
                depthwise(&x, &kw, Some(&bias), c, c, &w, clip, None, &mut want, 1);
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    crate::parallel::install(&pool, || {
                        let b = Some(&bias[..]);
                        depthwise_direct(&x, &kw, b, c, &w, clip, None, &mut got, threads)
                    });
                    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "stride {stride} {ih}x{iw} pads {pt},{pb} threads {threads}: \
                             element {j}: {a} vs {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn takes_three_by_three_stride_one_and_two_only() {
        if avx512().is_some() {
            assert!(pays(&geometry([112, 112], [1, 1], [1, 1]), 96, 96));
            assert!(pays(&geometry([28, 28], [0, 0], [1, 1]), 192, 192));
            assert!(
                !pays(&geometry([14, 14], [0, 0], [1, 1]), 576, 576),
                "7 wide"
            );
        }
        assert!(
            !pays(&geometry([112, 112], [1, 1], [1, 1]), 32, 64),
            "multiplier 2"
        );
        assert!(
            !pays(&geometry([112, 112], [2, 2], [2, 2]), 8, 8),
            "padding 2"
        );
        let attrs = WindowAttrs {
            kernel: &[3, 3],
            strides: &[1, 1],
            pads_begin: &[1, 1],
            pads_end: &[1, 1],
            dilations: &[1, 1],
            ceil_mode: false,
        };
        let narrow = WindowGeometry::new("test", &[7, 7], &attrs).unwrap();
        let ragged = strided([14, 14], [1, 1], [1, 0], 1);
        if avx512().is_some() {
            assert!(!pays(&narrow, 8, 8), "stride 1, 7 wide");
            assert!(
                !pays(&ragged, 8, 8),
                "stride 1, 14 wide, rows narrower than the input's"
            );
        }
        if matches!(Simd::detect(), Some(Simd::Avx2(_))) {
            assert!(pays(&narrow, 8, 8), "AVX2: stride 1, 7 wide");
            assert!(pays(&ragged, 8, 8), "AVX2: stride 1, 13 wide");
            let seven = geometry([14, 14], [0, 0], [1, 1]);
            assert!(pays(&seven, 576, 576), "AVX2: stride 2, 7 wide");
            let six = strided([6, 6], [1, 1], [1, 1], 1);
            assert!(!pays(&six, 8, 8), "AVX2: stride 1, 6 wide");
        }
        if avx512().is_some() {
            let flat = WindowGeometry::new("test", &[14, 14], &attrs).unwrap();
            assert!(pays(&flat, 8, 8), "stride 1, 14 wide, same padding");
        }
        if avx512().is_some() {
            let wide = WindowGeometry::new("test", &[56, 56], &attrs).unwrap();
            assert!(pays(&wide, 8, 8), "stride 1, 56 wide");
        }
    }
}
