//! The integer convolution on the integer GEMM (`kernels::igemm`), for 1-D and 2-D
//! convolutions: per image and group, output pixels are GEMM rows and output channels its
//! columns, so the weights are the packed B (once at plan time when constant) and the
//! activations A — read straight from the input for a 1x1 stride-1 unpadded kernel, else
//! unfolded tile by tile (im2col) with the padding at the zero point. With weights packed at
//! plan time, im2col reads a padded channels-last copy of the input made once per image and
//! group (`Im2colNhwc`, depth ordered by tap then channel, the weights reordered to match);
//! otherwise it reads the input as it is (`Im2colA`). The write-back puts each
//! tile into the NCHW output (channel stride = pixels per image) and applies the bias and the
//! requantization. A depthwise convolution (one input and one output channel per group) skips
//! the GEMM: each channel accumulates its taps directly in i32.

use std::sync::Arc;

use strata_core::Tensor;

use crate::kernels::igemm::{
    igemm, nhwc_scratch, pack_b_into, pixel_bytes, tap_major_weights, Epilogue, Im2colA,
    Im2colGeometry, Im2colNhwc, IntSlice, MatrixA, OutMat, PackedB, Requant,
};
use crate::ops::convolution::integer_conv_kernel::ResolvedConv;
use crate::ops::convolution::integer_depthwise::{depthwise, DepthwiseGeometry};
use crate::ops::quantization::int_params::{packed_b_words, with_dest, with_int_slice};
use crate::support::scratch::carve;
use crate::{Fact, OpError, OpResult};

/// A 1-D or 2-D convolution's geometry seen as 2-D (a 1-D one has height 1).
#[derive(Debug, Clone, Copy)]
struct Plane {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    in_hw: (usize, usize),
    out_hw: (usize, usize),
    kernel: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    pad: (usize, usize),
}

impl Plane {
    fn of(r: &ResolvedConv) -> Option<Plane> {
        let p = &r.params;
        let two = |v: &[usize], fill: usize| match v.len() {
            1 => Some((fill, v[0])),
            2 => Some((v[0], v[1])),
            _ => None,
        };
        let (x, out) = (&r.x_dims, &r.out_dims);
        Some(Plane {
            batch: x[0],
            in_channels: x[1],
            out_channels: out[1],
            groups: p.groups.max(1),
            in_hw: two(&x[2..], 1)?,
            out_hw: two(&out[2..], 1)?,
            kernel: two(&p.kernel, 1)?,
            stride: two(&p.strides, 1)?,
            dilation: two(&p.dilations, 1)?,
            pad: two(&p.pads_begin, 0)?,
        })
    }

    fn pixels(&self) -> usize {
        self.out_hw.0 * self.out_hw.1
    }

    fn group_in(&self) -> usize {
        self.in_channels / self.groups
    }

    fn group_out(&self) -> usize {
        self.out_channels / self.groups
    }

    /// GEMM depth: input channels of a group times kernel taps.
    fn depth(&self) -> usize {
        self.group_in() * self.kernel.0 * self.kernel.1
    }

    fn is_depthwise(&self) -> bool {
        self.groups > 1
            && self.group_in() == 1
            && self.group_out() == 1
            && self.kernel.0 * self.kernel.1 <= 64
    }

    fn depthwise_geometry(&self) -> DepthwiseGeometry {
        DepthwiseGeometry {
            batch: self.batch,
            channels: self.out_channels,
            in_hw: self.in_hw,
            out_hw: self.out_hw,
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
            pad: self.pad,
        }
    }

    fn is_pointwise(&self) -> bool {
        self.kernel == (1, 1) && self.stride == (1, 1) && self.pad == (0, 0)
    }

    /// Whether constant weights are packed tap-major for [`Im2colNhwc`] (every im2col
    /// convolution).
    fn tap_major(&self) -> bool {
        !self.is_depthwise() && !self.is_pointwise()
    }

    /// The im2col view of one image and group whose input starts at `offset`.
    fn im2col(&self, offset: usize) -> Im2colGeometry {
        Im2colGeometry {
            offset,
            channels: self.group_in(),
            in_h: self.in_hw.0,
            in_w: self.in_hw.1,
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
            pad: self.pad,
            out_h: self.out_hw.0,
            out_w: self.out_hw.1,
        }
    }

    /// Scratch words of the channels-last input copy and its pixel sums.
    fn nhwc_words(&self) -> Option<usize> {
        let (bytes, pixels) = nhwc_scratch(&self.im2col(0))?;
        bytes.div_ceil(4).checked_add(pixels)
    }
}

/// Whether [`int_conv`] handles this convolution (1-D or 2-D).
pub(crate) fn supports(r: &ResolvedConv) -> bool {
    Plane::of(r).is_some()
}

/// Each group's weights packed as the GEMM's B.
#[derive(Debug)]
pub(crate) struct ConvWeights {
    groups: Vec<PackedB>,
    /// Depth ordered `(ky, kx, c)` with channels padded to 4, for [`Im2colNhwc`].
    tap_major: bool,
}

/// The weights packed at plan time when they are a constant (and the convolution runs on the
/// GEMM).
pub(crate) fn prepack_weights(
    op: &str,
    resolved: Option<&ResolvedConv>,
    w: &Fact,
) -> OpResult<Option<Arc<ConvWeights>>> {
    let (Some(r), Some(value)) = (resolved, w.value.as_ref()) else {
        return Ok(None);
    };
    let Some(plane) = Plane::of(r).filter(|p| !p.is_depthwise()) else {
        return Ok(None);
    };
    let (k, cog) = (plane.depth(), plane.group_out());
    let (cg, taps) = (plane.group_in(), plane.kernel.0 * plane.kernel.1);
    let tap_major = plane.tap_major();
    let c4 = pixel_bytes(&plane.im2col(0)).ok_or_else(|| OpError::shape(op, "input too large"))?;
    let too_large = || OpError::shape(op, "weights too large");
    with_int_slice(op, value, |wv| {
        let groups = (0..plane.groups)
            .map(|g| {
                let w = wv.range(g * cog * k, cog * k);
                if !tap_major {
                    return Ok(PackedB::new(w, k, cog, (1, k))?);
                }
                let packed = match w {
                    IntSlice::U8(w) => {
                        let r = tap_major_weights(w, cog, cg, taps, c4).ok_or_else(too_large)?;
                        PackedB::new(IntSlice::U8(&r), r.len() / cog, cog, (1, r.len() / cog))
                    }
                    IntSlice::I8(w) => {
                        let r = tap_major_weights(w, cog, cg, taps, c4).ok_or_else(too_large)?;
                        PackedB::new(IntSlice::I8(&r), r.len() / cog, cog, (1, r.len() / cog))
                    }
                };
                Ok(packed?)
            })
            .collect::<OpResult<Vec<_>>>()?;
        Ok(Some(Arc::new(ConvWeights { groups, tap_major })))
    })
}

/// Scratch words [`int_conv`] needs: a group's packed weights when not packed at plan time, a
/// depthwise channel's sums.
pub(crate) fn int_conv_words(r: &ResolvedConv, prepacked: bool) -> Option<usize> {
    let plane = Plane::of(r)?;
    if plane.is_depthwise() {
        return Some(0);
    }
    if prepacked {
        return if plane.tap_major() {
            plane.nhwc_words()
        } else {
            Some(0)
        };
    }
    packed_b_words(plane.depth(), plane.group_out())
}

/// `conv(x - x_zero, w - w_zero)` through `epilogue` (bias, requantization) into `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn int_conv(
    op: &str,
    r: &ResolvedConv,
    x: &Tensor,
    x_zero: i32,
    w: &Tensor,
    w_zero: &[i32],
    packed: Option<&ConvWeights>,
    epilogue: &Epilogue<'_>,
    out: &Tensor,
    work: &mut &mut [i32],
    threads: usize,
) -> OpResult<()> {
    let plane = Plane::of(r).ok_or_else(|| OpError::kernel(op, "not a 1-D or 2-D convolution"))?;
    if x.dims() != r.x_dims || w.dims() != r.w_dims || out.dims() != r.out_dims {
        return Err(OpError::kernel(op, "dims differ from the planned ones"));
    }
    let lines = plane.out_channels;
    if w_zero.len() != 1 && w_zero.len() != lines {
        return Err(OpError::shape(
            op,
            format!("w_zero_point must be a scalar or one per output channel ({lines})"),
        ));
    }
    if plane.is_depthwise() {
        let geometry = plane.depthwise_geometry();
        return with_int_slice(op, x, |xv| {
            with_int_slice(op, w, |wv| {
                with_dest(op, out, |dest| {
                    depthwise(&geometry, xv, x_zero, wv, w_zero, epilogue, dest, threads);
                    Ok(())
                })
            })
        });
    }
    let (k, cog, pixels) = (plane.depth(), plane.group_out(), plane.pixels());
    let packed = packed.filter(|p| p.groups.len() == plane.groups);
    let mut b_buffer = match packed {
        Some(_) => None,
        None => {
            let words =
                packed_b_words(k, cog).ok_or_else(|| OpError::shape(op, "weights too large"))?;
            let buf = carve(op, work, words)?;
            let (bytes, sums) = buf.split_at_mut(words - cog);
            Some((bytemuck::cast_slice_mut::<i32, i8>(bytes), sums))
        }
    };
    // The channels-last input copy and its pixel sums, reused by every image and group.
    let mut nhwc = match packed {
        Some(p) if p.tap_major => {
            let (bytes, pixels) = nhwc_scratch(&plane.im2col(0))
                .ok_or_else(|| OpError::shape(op, "input too large"))?;
            let buf = carve(op, work, bytes.div_ceil(4))?;
            let sums = carve(op, work, pixels)?;
            Some((&mut bytemuck::cast_slice_mut::<i32, u8>(buf)[..bytes], sums))
        }
        _ => None,
    };
    let (h, w_in) = plane.in_hw;
    with_int_slice(op, x, |xv| {
        with_int_slice(op, w, |wv| {
            with_dest(op, out, |mut dest| {
                for g in 0..plane.groups {
                    let b = match (packed, b_buffer.as_mut()) {
                        (Some(p), _) => p.groups[g].view(),
                        (None, Some((bytes, sums))) => pack_b_into(
                            wv.range(g * cog * k, cog * k),
                            k,
                            cog,
                            (1, k),
                            bytes,
                            sums,
                        )?,
                        (None, None) => return Err(OpError::kernel(op, "weights are not packed")),
                    };
                    let channels = g * cog..(g + 1) * cog;
                    let w_zero_g = if w_zero.len() == 1 {
                        w_zero
                    } else {
                        &w_zero[channels.clone()]
                    };
                    let scale = epilogue.scale.map(|s| Requant {
                        col: if s.col.len() == 1 {
                            s.col
                        } else {
                            &s.col[channels.clone()]
                        },
                        row: None,
                    });
                    let group_epilogue = Epilogue {
                        bias_i32: epilogue.bias_i32.map(|b| &b[channels.clone()]),
                        bias_f32: epilogue.bias_f32.map(|b| &b[channels.clone()]),
                        scale,
                        zero_point: epilogue.zero_point,
                    };
                    for n in 0..plane.batch {
                        let offset = (n * plane.in_channels + g * plane.group_in()) * h * w_in;
                        let start = (n * plane.out_channels + g * cog) * pixels;
                        let c = OutMat {
                            dest: dest.sub(start, cog * pixels),
                            rs: 1,
                            cs: pixels,
                        };
                        if plane.is_pointwise() {
                            let a = MatrixA::new(
                                xv.range(offset, plane.group_in() * h * w_in),
                                pixels,
                                plane.group_in(),
                                (1, h * w_in),
                            )?;
                            igemm(&a, &[x_zero], b, w_zero_g, c, &group_epilogue, threads)?;
                        } else if let Some((buf, sums)) = nhwc.as_mut() {
                            let geometry = plane.im2col(offset);
                            let a = Im2colNhwc::new(xv, geometry, x_zero, buf, sums)?;
                            igemm(&a, &[x_zero], b, w_zero_g, c, &group_epilogue, threads)?;
                        } else {
                            let a = Im2colA::new(xv, plane.im2col(offset), x_zero)?;
                            igemm(&a, &[x_zero], b, w_zero_g, c, &group_epilogue, threads)?;
                        }
                    }
                }
                Ok(())
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::rng::Rng;
    use crate::support::test_util::OpRun;
    use crate::Attr;

    /// One convolution case: input dims, output channels, groups, kernel, stride, pad, dilation.
    struct Case {
        x: Vec<usize>,
        out_channels: usize,
        groups: usize,
        kernel: Vec<usize>,
        stride: usize,
        pad: usize,
        dilation: usize,
    }

    fn cases() -> Vec<Case> {
        let case =
            |x: &[usize], out_channels, groups, kernel: &[usize], stride, pad, dilation| Case {
                x: x.to_vec(),
                out_channels,
                groups,
                kernel: kernel.to_vec(),
                stride,
                pad,
                dilation,
            };
        vec![
            case(&[2, 8, 5, 7], 12, 1, &[1, 1], 1, 0, 1),
            case(&[1, 5, 9, 8], 7, 1, &[3, 3], 2, 1, 1),
            case(&[2, 6, 7, 7], 6, 6, &[3, 3], 1, 1, 1),
            case(&[1, 4, 8, 9], 4, 4, &[3, 3], 2, 1, 2),
            case(&[1, 8, 6, 6], 4, 2, &[3, 3], 1, 0, 1),
            case(&[1, 3, 10], 5, 1, &[3], 1, 1, 1),
            case(&[1, 40, 3, 3], 33, 1, &[1, 1], 2, 0, 1),
            // Depthwise, large enough to be spread over threads; 5x5 taps, stride 2.
            case(&[1, 32, 30, 29], 32, 32, &[5, 5], 2, 2, 1),
            case(&[2, 12, 17, 15], 12, 12, &[3, 3], 1, 1, 1),
        ]
    }

    /// The convolution of centered values, exactly, as [n][co][pixel].
    fn reference(
        c: &Case,
        x: &[i32],
        x_zero: i32,
        w: &[i32],
        w_zero: &[i32],
    ) -> (Vec<i64>, Vec<usize>) {
        let spatial = c.x.len() - 2;
        let (n, cin) = (c.x[0], c.x[1]);
        let dims2 = |v: &[usize]| {
            if v.len() == 1 {
                (1, v[0])
            } else {
                (v[0], v[1])
            }
        };
        let (h, wd) = dims2(&c.x[2..]);
        let (kh, kw) = dims2(&c.kernel);
        let (ph, pw) = if spatial == 1 {
            (0, c.pad)
        } else {
            (c.pad, c.pad)
        };
        let (sh, sw) = if spatial == 1 {
            (1, c.stride)
        } else {
            (c.stride, c.stride)
        };
        let (dh, dw) = if spatial == 1 {
            (1, c.dilation)
        } else {
            (c.dilation, c.dilation)
        };
        let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
        let ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
        let (cg, cog) = (cin / c.groups, c.out_channels / c.groups);
        let mut out = vec![0i64; n * c.out_channels * oh * ow];
        for b in 0..n {
            for co in 0..c.out_channels {
                let g = co / cog;
                let zw = if w_zero.len() == 1 {
                    w_zero[0]
                } else {
                    w_zero[co]
                };
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = 0i64;
                        for ci in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * sh + ky * dh) as isize - ph as isize;
                                    let ix = (ox * sw + kx * dw) as isize - pw as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                        continue;
                                    }
                                    let xv = x[((b * cin + g * cg + ci) * h + iy as usize) * wd
                                        + ix as usize];
                                    let wv = w[((co * cg + ci) * kh + ky) * kw + kx];
                                    s += i64::from((xv - x_zero) * (wv - zw));
                                }
                            }
                        }
                        out[((b * c.out_channels + co) * oh + oy) * ow + ox] = s;
                    }
                }
            }
        }
        let mut dims = vec![n, c.out_channels];
        if spatial == 2 {
            dims.push(oh);
        }
        dims.push(ow);
        (out, dims)
    }

    fn int_tensor(values: &[i32], dims: &[usize], signed: bool) -> Tensor {
        if signed {
            let v: Vec<i8> = values.iter().map(|&x| x as i8).collect();
            Tensor::from_slice(&v, dims).unwrap()
        } else {
            let v: Vec<u8> = values.iter().map(|&x| x as u8).collect();
            Tensor::from_slice(&v, dims).unwrap()
        }
    }

    fn random(rng: &mut Rng, len: usize, signed: bool) -> Vec<i32> {
        (0..len)
            .map(|_| rng.below(256) as i32 - if signed { 128 } else { 0 })
            .collect()
    }

    fn attrs(c: &Case) -> Vec<(&'static str, Attr)> {
        let spatial = c.x.len() - 2;
        vec![
            ("group", Attr::Int(c.groups as i64)),
            ("strides", Attr::Ints(vec![c.stride as i64; spatial])),
            ("pads", Attr::Ints(vec![c.pad as i64; 2 * spatial])),
            ("dilations", Attr::Ints(vec![c.dilation as i64; spatial])),
        ]
    }

    #[test]
    fn conv_integer_matches_the_reference_on_pointwise_im2col_depthwise_grouped_and_1d() {
        let mut rng = Rng::new(5);
        for c in cases() {
            for (x_signed, w_signed, constant) in [
                (false, true, true),
                (true, false, false),
                (false, false, true),
            ] {
                let x = random(&mut rng, c.x.iter().product(), x_signed);
                let mut w_dims = vec![c.out_channels, c.x[1] / c.groups];
                w_dims.extend(&c.kernel);
                let w = random(&mut rng, w_dims.iter().product(), w_signed);
                let x_zero = random(&mut rng, 1, x_signed)[0];
                let w_zero = random(&mut rng, c.out_channels, w_signed);
                let (want, dims) = reference(&c, &x, x_zero, &w, &w_zero);
                let inputs = [
                    int_tensor(&x, &c.x, x_signed),
                    int_tensor(&w, &w_dims, w_signed),
                    int_tensor(&[x_zero], &[], x_signed),
                    int_tensor(&w_zero, &[c.out_channels], w_signed),
                ];
                let mut run = OpRun::new("ConvInteger", 10)
                    .attrs(&attrs(&c))
                    .checked_writes();
                if constant {
                    run = run.constant_inputs();
                }
                let y = run.run(&inputs).unwrap();
                assert_eq!(y[0].dims(), dims.as_slice(), "{:?}", c.x);
                let got: Vec<i64> = y[0]
                    .to_vec::<i32>()
                    .unwrap()
                    .into_iter()
                    .map(i64::from)
                    .collect();
                assert_eq!(got, want, "{:?} k {:?} groups {}", c.x, c.kernel, c.groups);
            }
        }
    }

    #[test]
    fn qlinear_conv_requantizes_with_bias_and_per_channel_scales() {
        let mut rng = Rng::new(9);
        for c in cases() {
            let x = random(&mut rng, c.x.iter().product(), false);
            let mut w_dims = vec![c.out_channels, c.x[1] / c.groups];
            w_dims.extend(&c.kernel);
            let w = random(&mut rng, w_dims.iter().product(), true);
            let (x_zero, w_zero) = (117, vec![0; c.out_channels]);
            let (acc, _) = reference(&c, &x, x_zero, &w, &w_zero);
            let bias: Vec<i32> = (0..c.out_channels).map(|i| i as i32 * 37 - 100).collect();
            let w_scale: Vec<f32> = (0..c.out_channels)
                .map(|i| 0.002 + 0.001 * i as f32)
                .collect();
            let (x_scale, y_scale, y_zero) = (0.05f32, 0.1f32, 10i32);
            let pixels = acc.len() / c.x[0] / c.out_channels;
            let want: Vec<u8> = acc
                .iter()
                .enumerate()
                .map(|(i, &a)| {
                    let co = (i / pixels) % c.out_channels;
                    let m = (x_scale * w_scale[co]) / y_scale;
                    let v = (a as i32 + bias[co]) as f32 * m;
                    (v.round_ties_even() + y_zero as f32).clamp(0.0, 255.0) as u8
                })
                .collect();
            let scalar = |v: f32| Tensor::from_slice(&[v], &[]).unwrap();
            let inputs = [
                int_tensor(&x, &c.x, false),
                scalar(x_scale),
                int_tensor(&[x_zero], &[], false),
                int_tensor(&w, &w_dims, true),
                Tensor::from_slice(&w_scale, &[c.out_channels]).unwrap(),
                int_tensor(&w_zero, &[c.out_channels], true),
                scalar(y_scale),
                int_tensor(&[y_zero], &[], false),
                Tensor::from_slice(&bias, &[c.out_channels]).unwrap(),
            ];
            let y = OpRun::new("QLinearConv", 10)
                .attrs(&attrs(&c))
                .constant_inputs()
                .checked_writes()
                .run(&inputs)
                .unwrap();
            assert_eq!(
                y[0].to_vec::<u8>().unwrap(),
                want,
                "{:?} k {:?}",
                c.x,
                c.kernel
            );
        }
    }
}
