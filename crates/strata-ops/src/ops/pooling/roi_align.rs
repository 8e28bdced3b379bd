//! RoiAlign (opsets 10, 16, 22): for each region of interest `[x1, y1, x2, y2]` (scaled by
//! `spatial_scale`) on image `batch_indices[r]` of `X` (`[N, C, H, W]`), an
//! `output_height × output_width` grid of bins, each pooled over a regular grid of bilinear
//! samples (`sampling_ratio` per axis, or `ceil(bin size)` when it is 0). `mode` "avg" averages
//! the samples; "max" takes, as the ONNX reference and onnxruntime do, the largest of the four
//! weighted corner terms of each sample (`max(w1·v1, w2·v2, w3·v3, w4·v4)`) over the samples.
//! `coordinate_transformation_mode` (opset 16+, default "half_pixel") shifts the region by half a
//! pixel; "output_half_pixel" (the only behaviour of opset 10) does not, and stretches regions
//! smaller than one pixel to one. f32, f64, f16 and bf16; sample positions are computed in f64,
//! values accumulate in f32 (f64 for f64) and are rounded once on store.

use std::marker::PhantomData;

use num_traits::ToPrimitive;
use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::support::inputs::required;
use crate::support::numeric::{Real, WideFloat};
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "RoiAlign";

/// Most samples per bin along one axis. An adaptive grid is `ceil(region / bins)`: bounding it
/// keeps a region with absurd coordinates from turning into an endless loop.
const MAX_GRID: usize = 1 << 16;

/// Below this many (channel × sample) steps per region the region runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 14;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Avg,
    Max,
}

#[derive(Debug, Clone)]
pub struct RoiAlign {
    mode: Mode,
    output_height: usize,
    output_width: usize,
    /// Samples per bin along each axis; 0 means adaptive (`ceil(bin size)`).
    sampling_ratio: usize,
    spatial_scale: f64,
    half_pixel: bool,
}

impl RoiAlign {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let mode = match a.string_or("mode", "avg")?.as_str() {
            "avg" => Mode::Avg,
            "max" => Mode::Max,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("{other:?} is not \"avg\" or \"max\""),
                ))
            }
        };
        // Opset 10 has no attribute and behaves as output_half_pixel.
        let default_mode = if ctx.opset >= 16 {
            "half_pixel"
        } else {
            "output_half_pixel"
        };
        let half_pixel = match a
            .string_or("coordinate_transformation_mode", default_mode)?
            .as_str()
        {
            "half_pixel" => true,
            "output_half_pixel" => false,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "coordinate_transformation_mode",
                    format!("{other:?} is not \"half_pixel\" or \"output_half_pixel\""),
                ))
            }
        };
        let positive = |name: &str| -> OpResult<usize> {
            let v = a.int_or(name, 1)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| OpError::attribute(OP, name, format!("must be >= 1, got {v}")))
        };
        let output_height = positive("output_height")?;
        let output_width = positive("output_width")?;
        let ratio = a.int_or("sampling_ratio", 0)?;
        let sampling_ratio = usize::try_from(ratio)
            .ok()
            .filter(|&r| r <= MAX_GRID)
            .ok_or_else(|| {
                OpError::attribute(
                    OP,
                    "sampling_ratio",
                    format!("must be in 0..={MAX_GRID}, got {ratio}"),
                )
            })?;
        let spatial_scale = a.float_or("spatial_scale", 1.0)?;
        if !spatial_scale.is_finite() {
            return Err(OpError::attribute(
                OP,
                "spatial_scale",
                format!("must be finite, got {spatial_scale}"),
            ));
        }
        Ok(Box::new(RoiAlign {
            mode,
            output_height,
            output_width,
            sampling_ratio,
            spatial_scale: f64::from(spatial_scale),
            half_pixel,
        }))
    }
}

/// Checks that a known dim equals `expected` (when that is known too).
fn check_dim(what: &str, dim: &Dim, expected: &Dim) -> OpResult<()> {
    match (dim.known(), expected.known()) {
        (Some(a), Some(b)) if a != b => {
            Err(OpError::shape(OP, format!("{what} is {a}, expected {b}")))
        }
        _ => Ok(()),
    }
}

impl Operator for RoiAlign {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let rois = required(OP, inputs, 1)?;
        let batch_indices = required(OP, inputs, 2)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: x.dtype,
            });
        }
        if rois.dtype != x.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: x.dtype.to_string(),
                actual: rois.dtype,
            });
        }
        if batch_indices.dtype != DType::I64 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 2,
                expected: DType::I64.to_string(),
                actual: batch_indices.dtype,
            });
        }
        if x.rank() != 4 {
            return Err(OpError::shape(
                OP,
                format!("X must be [N, C, H, W], got dims {:?}", x.dims),
            ));
        }
        if rois.rank() != 2 || batch_indices.rank() != 1 {
            return Err(OpError::shape(
                OP,
                format!(
                    "rois must be [num_rois, 4] and batch_indices [num_rois], got {:?} and {:?}",
                    rois.dims, batch_indices.dims
                ),
            ));
        }
        check_dim("rois dim 1", &rois.dims[1], &Dim::Known(4))?;
        check_dim(
            "batch_indices length",
            &batch_indices.dims[0],
            &rois.dims[0],
        )?;
        let num_rois = match rois.dims[0] {
            Dim::Unknown => batch_indices.dims[0].clone(),
            ref d => d.clone(),
        };
        Ok(vec![Fact::new(
            x.dtype,
            vec![
                num_rois,
                x.dims[1].clone(),
                Dim::Known(self.output_height),
                Dim::Known(self.output_width),
            ],
        )])
    }

    /// One accumulator per channel (in the compute type) for the bin being pooled.
    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let x = required(OP, inputs, 0)?;
        let Some(channels) = x.dims.get(1).and_then(Dim::known) else {
            return Ok(0);
        };
        let wide = if x.dtype == DType::F64 { 8 } else { 4 };
        channels
            .checked_mul(wide)
            .ok_or_else(|| OpError::shape(OP, "channel count overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => RoiAlignKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct RoiAlignKernel<T> {
    op: RoiAlign,
    _t: PhantomData<T>,
}

/// One bilinear sample: four flat positions in an `H × W` plane and their weights. A sample
/// outside the map has all weights 0 (and positions 0), as in the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample<W> {
    pos: [usize; 4],
    weight: [W; 4],
}

/// The bilinear sample at `(y, x)` on an `height × width` plane (both >= 1), following the
/// reference exactly: points more than one pixel outside contribute nothing, the rest are clamped
/// to the border.
fn bilinear_sample<W: WideFloat>(y: f64, x: f64, height: usize, width: usize) -> Sample<W> {
    let (h, w) = (height as f64, width as f64);
    // `!(a >= b)` also sends NaN coordinates outside.
    if !(y >= -1.0 && y <= h && x >= -1.0 && x <= w) {
        return Sample {
            pos: [0; 4],
            weight: [W::lit(0.0); 4],
        };
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    // In range 0..=h, so the conversion is exact.
    let mut y_low = y as usize;
    let mut x_low = x as usize;
    let y_high;
    let x_high;
    if y_low >= height - 1 {
        y_low = height - 1;
        y_high = y_low;
        y = y_low as f64;
    } else {
        y_high = y_low + 1;
    }
    if x_low >= width - 1 {
        x_low = width - 1;
        x_high = x_low;
        x = x_low as f64;
    } else {
        x_high = x_low + 1;
    }
    let (ly, lx) = (y - y_low as f64, x - x_low as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        pos: [
            y_low * width + x_low,
            y_low * width + x_high,
            y_high * width + x_low,
            y_high * width + x_high,
        ],
        weight: [
            W::lit(hy * hx),
            W::lit(hy * lx),
            W::lit(ly * hx),
            W::lit(ly * lx),
        ],
    }
}

/// Where one region lies and how its bins are sampled (in input pixel coordinates).
#[derive(Debug, Clone, Copy)]
struct Region {
    start_y: f64,
    start_x: f64,
    bin_h: f64,
    bin_w: f64,
    grid_h: usize,
    grid_w: usize,
}

impl RoiAlign {
    /// The region of `roi` (`[x1, y1, x2, y2]`, index `r` for messages).
    fn region(&self, r: usize, roi: [f64; 4]) -> OpResult<Region> {
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let [x1, y1, x2, y2] = roi.map(|v| v * self.spatial_scale - offset);
        let (mut width, mut height) = (x2 - x1, y2 - y1);
        if !self.half_pixel {
            // Malformed regions become 1 × 1.
            width = width.max(1.0);
            height = height.max(1.0);
        }
        let bin_h = height / self.output_height as f64;
        let bin_w = width / self.output_width as f64;
        let grid = |bin: f64| -> OpResult<usize> {
            if self.sampling_ratio > 0 {
                return Ok(self.sampling_ratio);
            }
            let n = bin.ceil();
            if n.is_nan() || n > MAX_GRID as f64 {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "region {r} ({roi:?}) needs {n} samples per bin along an axis; \
                         at most {MAX_GRID} are supported"
                    ),
                ));
            }
            // A negative extent (half_pixel allows it) samples nothing.
            Ok(n.max(0.0) as usize)
        };
        Ok(Region {
            start_y: y1,
            start_x: x1,
            bin_h,
            bin_w,
            grid_h: grid(bin_h)?,
            grid_w: grid(bin_w)?,
        })
    }
}

/// Pools one region for a block of channels: `planes` holds those channels' `H × W` input planes,
/// `out` their `bins` outputs each, `acc` one accumulator per channel.
#[allow(clippy::too_many_arguments)]
fn pool_region<T: Real>(
    mode: Mode,
    region: &Region,
    planes: &[T],
    (height, width): (usize, usize),
    (out_h, out_w): (usize, usize),
    out: &mut [T],
    acc: &mut [T::Wide],
) {
    let plane = height * width;
    let bins = out_h * out_w;
    let samples = region.grid_h * region.grid_w;
    let count = T::Wide::lit(samples.max(1) as f64);
    for ph in 0..out_h {
        for pw in 0..out_w {
            acc.fill(T::Wide::lit(0.0));
            for iy in 0..region.grid_h {
                let y = region.start_y
                    + ph as f64 * region.bin_h
                    + (iy as f64 + 0.5) * region.bin_h / region.grid_h as f64;
                for ix in 0..region.grid_w {
                    let x = region.start_x
                        + pw as f64 * region.bin_w
                        + (ix as f64 + 0.5) * region.bin_w / region.grid_w as f64;
                    let s: Sample<T::Wide> = bilinear_sample(y, x, height, width);
                    let first = iy == 0 && ix == 0;
                    for (c, a) in acc.iter_mut().enumerate() {
                        let p = &planes[c * plane..][..plane];
                        let terms = [0, 1, 2, 3].map(|k| s.weight[k] * p[s.pos[k]].widen());
                        match mode {
                            Mode::Avg => *a = *a + terms[0] + terms[1] + terms[2] + terms[3],
                            Mode::Max => {
                                // Python's max(): keep the earlier value unless a later is larger.
                                let mut v = terms[0];
                                for &t in &terms[1..] {
                                    if t > v {
                                        v = t;
                                    }
                                }
                                if first || v > *a {
                                    *a = v;
                                }
                            }
                        }
                    }
                }
            }
            let bin = ph * out_w + pw;
            for (c, &a) in acc.iter().enumerate() {
                out[c * bins + bin] = T::narrow(match mode {
                    Mode::Avg => a / count,
                    Mode::Max => a,
                });
            }
        }
    }
}

impl<T: Real> Kernel for RoiAlignKernel<T>
where
    T::Wide: bytemuck::Pod,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, rois, batch_indices, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let [n, channels, height, width] = *x.dims() else {
            return Err(OpError::shape(
                OP,
                format!("X dims {:?} are not 4-d", x.dims()),
            ));
        };
        let num_rois = batch_indices.dims().first().copied().unwrap_or(0);
        let (out_h, out_w) = (self.op.output_height, self.op.output_width);
        let expected = [num_rois, channels, out_h, out_w];
        if out.dims() != expected || rois.dims() != [num_rois, 4] {
            return Err(OpError::kernel(
                OP,
                format!(
                    "rois {:?} and output {:?} do not match {num_rois} regions (output {expected:?})",
                    rois.dims(),
                    out.dims()
                ),
            ));
        }
        let not_contiguous = || OpError::kernel(OP, "operands must be contiguous");
        let rx = x.read::<T>()?;
        let rr = rois.read::<T>()?;
        let rb = batch_indices.read::<i64>()?;
        let mut wo = out.write::<T>()?;
        let (xs, roi_values, batch) = (
            rx.as_slice().ok_or_else(not_contiguous)?,
            rr.as_slice().ok_or_else(not_contiguous)?,
            rb.as_slice().ok_or_else(not_contiguous)?,
        );
        let ys = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        let image_len = channels * height * width;
        let roi_out_len = channels * out_h * out_w;
        if ys.is_empty() {
            return Ok(());
        }
        if height == 0 || width == 0 {
            return Err(OpError::shape(
                OP,
                format!(
                    "cannot sample regions on an empty feature map {:?}",
                    x.dims()
                ),
            ));
        }
        let mut guard = match io.scratch {
            Some(s) => Some(s.write_bytes(OP)?),
            None => None,
        };
        let mut rest: &mut [T::Wide] = match &mut guard {
            Some(g) => scratch_as(OP, g.bytes())?,
            None => &mut [],
        };
        let acc = carve(OP, &mut rest, channels)?;
        for (r, out_roi) in ys.chunks_mut(roi_out_len).enumerate() {
            let b = batch[r];
            let image = usize::try_from(b).ok().filter(|&b| b < n).ok_or_else(|| {
                OpError::shape(OP, format!("batch_indices[{r}] = {b} is outside 0..{n}"))
            })?;
            let roi: [f64; 4] =
                std::array::from_fn(|k| roi_values[r * 4 + k].widen().to_f64().unwrap_or(f64::NAN));
            let region = self.op.region(r, roi)?;
            let planes = &xs[image * image_len..][..image_len];
            let work = [region.grid_h, region.grid_w, out_h, out_w]
                .iter()
                .fold(channels, |w, &v| w.saturating_mul(v));
            let threads = io.threads.clamp(1, channels.max(1));
            if threads > 1 && work >= PARALLEL_MIN_WORK {
                // Channel blocks are independent: each owns its accumulators and output planes.
                let block = channels.div_ceil(threads);
                let plane_len = block * height * width;
                let result: Result<(), std::convert::Infallible> =
                    crate::parallel::try_for_each_chunk_pair_mut(
                        (out_roi, block * out_h * out_w),
                        (&mut acc[..], block),
                        1,
                        |b, out_block, acc_block| {
                            // Channel block `b` of the input, as of the output and accumulators.
                            let start = b * plane_len;
                            let plane_block = &planes[start..(start + plane_len).min(planes.len())];
                            pool_region(
                                self.op.mode,
                                &region,
                                plane_block,
                                (height, width),
                                (out_h, out_w),
                                out_block,
                                acc_block,
                            );
                            Ok(())
                        },
                    );
                let Ok(()) = result;
            } else {
                pool_region(
                    self.op.mode,
                    &region,
                    planes,
                    (height, width),
                    (out_h, out_w),
                    out_roi,
                    acc,
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_checked};
    use crate::{Attr, OpError};
    use strata_core::{f16, Tensor};

    /// Runs RoiAlign at `opset` on f32 `x` with the given regions (all on their batch index).
    fn roi_align(
        opset: i64,
        attrs: &[(&str, Attr)],
        x: (&[usize], &[f32]),
        rois: &[[f32; 4]],
        batch: &[i64],
    ) -> Result<Vec<f32>, OpError> {
        let flat: Vec<f32> = rois.iter().flatten().copied().collect();
        let inputs = [
            Tensor::from_slice(x.1, x.0)?,
            Tensor::from_slice(&flat, &[rois.len(), 4])?,
            Tensor::from_slice(batch, &[batch.len()])?,
        ];
        run_checked("RoiAlign", opset, attrs, &inputs, false)?
            .to_vec::<f32>()
            .map_err(Into::into)
    }

    /// x[i][j] = 3i + j on a 3 × 3 map: bilinear sampling of a linear function is exact, so an
    /// average of samples is the function at their mean position.
    const RAMP: [f32; 9] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];

    #[test]
    fn average_of_a_linear_map_is_its_value_at_the_bin_centre() {
        let one_bin = [("sampling_ratio", Attr::Int(2))];
        // output_half_pixel: region [0, 2]², samples at 0.5 and 1.5 -> mean (1, 1) -> 4.
        let out = roi_align(
            16,
            &[
                one_bin[0].clone(),
                (
                    "coordinate_transformation_mode",
                    Attr::String("output_half_pixel".into()),
                ),
            ],
            (&[1, 1, 3, 3], &RAMP),
            &[[0.0, 0.0, 2.0, 2.0]],
            &[0],
        )
        .unwrap();
        assert_close(&out, &[4.0], "output");
        // Opset 10 behaves as output_half_pixel without the attribute.
        let out = roi_align(
            10,
            &one_bin,
            (&[1, 1, 3, 3], &RAMP),
            &[[0.0, 0.0, 2.0, 2.0]],
            &[0],
        );
        assert_close(&out.unwrap(), &[4.0], "output");
        // half_pixel (the opset 16 default) shifts by -0.5: samples at 0 and 1 -> (0.5, 0.5).
        let out = roi_align(
            16,
            &one_bin,
            (&[1, 1, 3, 3], &RAMP),
            &[[0.0, 0.0, 2.0, 2.0]],
            &[0],
        );
        assert_close(&out.unwrap(), &[2.0], "output");
    }

    #[test]
    fn bins_spatial_scale_and_adaptive_sampling() {
        // Region [0, 4]² scaled by 0.5 -> [0, 2]², 2 × 2 bins of size 1, adaptive grid
        // ceil(1) = 1 sample at each bin centre (0.5 / 1.5): 3y + x there.
        let attrs = [
            ("output_height", Attr::Int(2)),
            ("output_width", Attr::Int(2)),
            ("spatial_scale", Attr::Float(0.5)),
        ];
        let out = roi_align(
            10,
            &attrs,
            (&[1, 1, 3, 3], &RAMP),
            &[[0.0, 0.0, 4.0, 4.0]],
            &[0],
        );
        assert_close(&out.unwrap(), &[2.0, 3.0, 5.0, 6.0], "output");
    }

    #[test]
    fn max_takes_the_largest_weighted_corner() {
        // One sample at (0.5, 0.5) on [[1, 2], [3, 4]]: corner terms 0.25, 0.5, 0.75, 1.0.
        let x = (&[1, 1, 2, 2][..], &[1.0, 2.0, 3.0, 4.0][..]);
        let ratio = ("sampling_ratio", Attr::Int(1));
        let out = roi_align(
            10,
            std::slice::from_ref(&ratio),
            x,
            &[[0.0, 0.0, 1.0, 1.0]],
            &[0],
        );
        assert_close(&out.unwrap(), &[2.5], "output");
        let max = [ratio, ("mode", Attr::String("max".into()))];
        let out = roi_align(10, &max, x, &[[0.0, 0.0, 1.0, 1.0]], &[0]);
        assert_close(&out.unwrap(), &[1.0], "output");
    }

    #[test]
    fn regions_pick_their_image_and_outside_samples_are_zero() {
        // Two images, two channels each (image 1 = image 0 + 100); a region far off the map
        // samples nothing but still divides by its sample count.
        let mut x: Vec<f32> = RAMP.iter().chain(RAMP.iter()).copied().collect();
        x.extend(x.clone().iter().map(|v| v + 100.0));
        let attrs = [
            ("sampling_ratio", Attr::Int(2)),
            (
                "coordinate_transformation_mode",
                Attr::String("output_half_pixel".into()),
            ),
        ];
        let out = roi_align(
            22,
            &attrs,
            (&[2, 2, 3, 3], &x),
            &[[0.0, 0.0, 2.0, 2.0], [50.0, 50.0, 60.0, 60.0]],
            &[1, 0],
        )
        .unwrap();
        assert_close(&out, &[104.0, 104.0, 0.0, 0.0], "output");
    }

    #[test]
    fn half_precision_rounds_once() {
        let x: Vec<f16> = RAMP.iter().map(|&v| f16::from_f32(v)).collect();
        let rois: Vec<f16> = [0.0f32, 0.0, 2.0, 2.0]
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let inputs = [
            Tensor::from_slice(&x, &[1, 1, 3, 3]).unwrap(),
            Tensor::from_slice(&rois, &[1, 4]).unwrap(),
            Tensor::from_slice(&[0i64], &[1]).unwrap(),
        ];
        let attrs = [("sampling_ratio", Attr::Int(2))];
        let out = run_checked("RoiAlign", 22, &attrs, &inputs, false).unwrap();
        assert_eq!(out.to_vec::<f16>().unwrap(), [f16::from_f32(2.0)]);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let x = (&[1, 1, 3, 3][..], &RAMP[..]);
        let err = roi_align(16, &[], x, &[[0.0, 0.0, 1.0, 1.0]], &[1]).unwrap_err();
        assert!(err.to_string().contains("batch_indices[0] = 1"), "{err}");
        let err = roi_align(16, &[], x, &[[0.0, 0.0, 1.0, 1.0]], &[-1]).unwrap_err();
        assert!(err.to_string().contains("outside 0..1"), "{err}");
        // A region so large that the adaptive grid would never finish.
        let err = roi_align(16, &[], x, &[[0.0, 0.0, 1e30, 1.0]], &[0]).unwrap_err();
        assert!(err.to_string().contains("samples per bin"), "{err}");
        for attrs in [
            [("mode", Attr::String("min".into()))],
            [("output_height", Attr::Int(0))],
            [("sampling_ratio", Attr::Int(-1))],
            [(
                "coordinate_transformation_mode",
                Attr::String("asymmetric".into()),
            )],
        ] {
            let err = roi_align(16, &attrs, x, &[[0.0; 4]], &[0]).unwrap_err();
            assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        }
        // rois must be [num_rois, 4]; batch_indices int64 of the same length.
        let inputs = [
            Tensor::from_slice(&RAMP, &[1, 1, 3, 3]).unwrap(),
            Tensor::from_slice(&[0.0f32; 3], &[1, 3]).unwrap(),
            Tensor::from_slice(&[0i64], &[1]).unwrap(),
        ];
        let err = run_checked("RoiAlign", 16, &[], &inputs, false).unwrap_err();
        assert!(err.to_string().contains("rois dim 1 is 3"), "{err}");
        let inputs = [
            inputs[0].clone(),
            Tensor::from_slice(&[0.0f32; 4], &[1, 4]).unwrap(),
            Tensor::from_slice(&[0i32], &[1]).unwrap(),
        ];
        let err = run_checked("RoiAlign", 16, &[], &inputs, false).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 2, .. }), "{err}");
        let inputs = [
            Tensor::from_slice(&RAMP, &[1, 9]).unwrap(),
            Tensor::from_slice(&[0.0f32; 4], &[1, 4]).unwrap(),
            Tensor::from_slice(&[0i64], &[1]).unwrap(),
        ];
        let err = run_checked("RoiAlign", 16, &[], &inputs, false).unwrap_err();
        assert!(err.to_string().contains("[N, C, H, W]"), "{err}");
    }
}
