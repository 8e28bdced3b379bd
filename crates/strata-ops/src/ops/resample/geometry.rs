//! Resize geometry shared by Resize and Upsample: the attribute forms (interpolation mode,
//! nearest rounding, coordinate transformation, aspect-ratio policy), resolving the output dims
//! and per-axis scales from the `scales` or `sizes` input, and the per-axis tap tables that map
//! each output index to weighted input indices. Interpolation is separable, so an n-D resize is
//! the product of these 1-D tables (the ONNX reference resizes one axis at a time, in f64).

use smallvec::SmallVec;

use crate::{OpError, OpResult};

/// How a fractional source coordinate picks a pixel in `nearest` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// The interpolation filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Filter {
    Nearest(NearestMode),
    Linear,
    /// Keys cubic convolution with coefficient `a` (`cubic_coeff_a`).
    Cubic(f64),
}

/// How an output index maps back to a source coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoordMode {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    /// Opsets 11-12 only: `(x + 0.5) / scale`, for TF's nearest-neighbour resize.
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How `sizes` is honoured when it would change the aspect ratio (opset 18+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AspectPolicy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Everything about a resize that comes from attributes.
#[derive(Debug, Clone)]
pub(crate) struct ResizeSpec {
    /// The op the errors name (Resize or Upsample).
    pub op: &'static str,
    pub filter: Filter,
    pub coord: CoordMode,
    pub exclude_outside: bool,
    pub extrapolation: f64,
    pub antialias: bool,
    /// The `axes` attribute (opset 18+), as written; `None` means every axis.
    pub axes: Option<Vec<i64>>,
    pub policy: AspectPolicy,
}

/// One axis after resolving scales or sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AxisGeometry {
    pub in_dim: usize,
    pub out_dim: usize,
    pub scale: f64,
    /// Region of interest (start, end) in normalized coordinates; (0, 1) when not given.
    pub roi: (f64, f64),
}

/// Marks a tap row whose source coordinate lies outside the crop (tf_crop_and_resize): the
/// output element is `extrapolation_value`.
pub(crate) const EXTRAPOLATE: usize = usize::MAX;

/// Largest output dim accepted: keeps index arithmetic far from overflow.
const MAX_DIM: f64 = (1u64 << 40) as f64;

impl NearestMode {
    pub fn parse(op: &str, name: &str) -> OpResult<Self> {
        Ok(match name {
            "round_prefer_floor" => NearestMode::RoundPreferFloor,
            "round_prefer_ceil" => NearestMode::RoundPreferCeil,
            "floor" => NearestMode::Floor,
            "ceil" => NearestMode::Ceil,
            other => {
                return Err(OpError::attribute(
                    op,
                    "nearest_mode",
                    format!("unknown mode {other:?}"),
                ))
            }
        })
    }
}

impl CoordMode {
    pub fn parse(op: &str, name: &str, opset: i64) -> OpResult<Self> {
        Ok(match name {
            "half_pixel" => CoordMode::HalfPixel,
            "half_pixel_symmetric" if opset >= 19 => CoordMode::HalfPixelSymmetric,
            "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
            "align_corners" => CoordMode::AlignCorners,
            "asymmetric" => CoordMode::Asymmetric,
            "tf_half_pixel_for_nn" if opset < 13 => CoordMode::TfHalfPixelForNn,
            "tf_crop_and_resize" => CoordMode::TfCropAndResize,
            other => {
                return Err(OpError::attribute(
                    op,
                    "coordinate_transformation_mode",
                    format!("unknown mode {other:?} for opset {opset}"),
                ))
            }
        })
    }
}

impl AspectPolicy {
    pub fn parse(op: &str, name: &str) -> OpResult<Self> {
        Ok(match name {
            "stretch" => AspectPolicy::Stretch,
            "not_larger" => AspectPolicy::NotLarger,
            "not_smaller" => AspectPolicy::NotSmaller,
            other => {
                return Err(OpError::attribute(
                    op,
                    "keep_aspect_ratio_policy",
                    format!("unknown policy {other:?}"),
                ))
            }
        })
    }
}

fn checked_dim(op: &str, value: f64, what: &str) -> OpResult<usize> {
    if value.is_finite() && (0.0..MAX_DIM).contains(&value) {
        Ok(value as usize)
    } else {
        Err(OpError::shape(
            op,
            format!("{what} gives an impossible output dim {value}"),
        ))
    }
}

impl ResizeSpec {
    /// The axes being resized, normalized, in the order the `scales`/`sizes`/`roi` values use.
    pub fn resized_axes(&self, rank: usize) -> OpResult<SmallVec<[usize; 8]>> {
        let Some(axes) = &self.axes else {
            return Ok((0..rank).collect());
        };
        let mut out: SmallVec<[usize; 8]> = SmallVec::new();
        for &a in axes {
            let axis = crate::support::axes::normalize_axis(self.op, "axes", a, rank)?;
            if out.contains(&axis) {
                return Err(OpError::attribute(
                    self.op,
                    "axes",
                    format!("repeated axis in {axes:?}"),
                ));
            }
            out.push(axis);
        }
        Ok(out)
    }

    /// Output dims, scales and rois of every axis from the input dims and exactly one of
    /// `scales` (floats) or `sizes` (ints), each holding one value per resized axis.
    pub fn resolve(
        &self,
        in_dims: &[usize],
        roi: Option<&[f64]>,
        scales: Option<&[f64]>,
        sizes: Option<&[i64]>,
    ) -> OpResult<Vec<AxisGeometry>> {
        let op = self.op;
        let axes = self.resized_axes(in_dims.len())?;
        let mut geo: Vec<AxisGeometry> = in_dims
            .iter()
            .map(|&d| AxisGeometry {
                in_dim: d,
                out_dim: d,
                scale: 1.0,
                roi: (0.0, 1.0),
            })
            .collect();
        let count_err = |what: &str, n: usize| {
            OpError::shape(
                op,
                format!(
                    "{what} has {n} values, expected one per resized axis ({})",
                    axes.len()
                ),
            )
        };
        match (scales, sizes) {
            (Some(scales), None) => {
                if scales.len() != axes.len() {
                    return Err(count_err("scales", scales.len()));
                }
                for (&axis, &s) in axes.iter().zip(scales) {
                    if !(s.is_finite() && s > 0.0) {
                        return Err(OpError::shape(
                            op,
                            format!("scales must be positive, got {scales:?}"),
                        ));
                    }
                    let g = &mut geo[axis];
                    g.scale = s;
                    g.out_dim = checked_dim(op, (s * g.in_dim as f64).floor(), "scales")?;
                }
            }
            (None, Some(sizes)) => {
                if sizes.len() != axes.len() {
                    return Err(count_err("sizes", sizes.len()));
                }
                let mut ratios: SmallVec<[f64; 8]> = SmallVec::new();
                for (&axis, &s) in axes.iter().zip(sizes) {
                    let in_dim = geo[axis].in_dim;
                    if s < 0 || (in_dim == 0 && s > 0) {
                        return Err(OpError::shape(
                            op,
                            format!("cannot resize axis {axis} of size {in_dim} to {s}"),
                        ));
                    }
                    ratios.push(if in_dim == 0 {
                        1.0
                    } else {
                        s as f64 / in_dim as f64
                    });
                }
                let common = match self.policy {
                    AspectPolicy::Stretch => None,
                    AspectPolicy::NotLarger => ratios.iter().copied().reduce(f64::min),
                    AspectPolicy::NotSmaller => ratios.iter().copied().reduce(f64::max),
                };
                for ((&axis, &s), &ratio) in axes.iter().zip(sizes).zip(&ratios) {
                    let g = &mut geo[axis];
                    match common {
                        None => {
                            g.scale = ratio;
                            g.out_dim = s as usize;
                        }
                        Some(c) => {
                            g.scale = c;
                            // The reference rounds half up.
                            g.out_dim =
                                checked_dim(op, (c * g.in_dim as f64 + 0.5).floor(), "sizes")?;
                        }
                    }
                }
            }
            (Some(_), Some(_)) => {
                return Err(OpError::shape(
                    op,
                    "only one of scales and sizes may be given",
                ))
            }
            (None, None) => return Err(OpError::shape(op, "one of scales or sizes is required")),
        }
        if self.coord == CoordMode::TfCropAndResize {
            let roi =
                roi.ok_or_else(|| OpError::shape(op, "tf_crop_and_resize needs the roi input"))?;
            let n = axes.len();
            if roi.len() != 2 * n {
                return Err(OpError::shape(
                    op,
                    format!("roi has {} values, expected {}", roi.len(), 2 * n),
                ));
            }
            for (i, &axis) in axes.iter().enumerate() {
                geo[axis].roi = (roi[i], roi[n + i]);
            }
        }
        Ok(geo)
    }

    /// Whether the reference leaves this axis untouched (same size, unit scale, full roi).
    fn is_identity(&self, g: &AxisGeometry) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
        g.out_dim == g.in_dim
            && close(g.scale, 1.0)
            && (self.coord != CoordMode::TfCropAndResize
                || ((g.roi.0).abs() <= 1e-9 && close(g.roi.1, 1.0)))
    }

    /// Taps per output index on this axis: 1 for identity axes and `nearest`, otherwise the
    /// filter's (even) support, widened by 1/scale when antialiasing a downsample.
    pub fn taps(&self, g: &AxisGeometry) -> usize {
        if self.is_identity(g) {
            return 1;
        }
        match self.filter {
            Filter::Nearest(_) => 1,
            Filter::Linear if self.antialias => (2 - 2 * antialias_start(1.0, g.scale)) as usize,
            Filter::Cubic(_) if self.antialias => (2 - 2 * antialias_start(2.0, g.scale)) as usize,
            Filter::Linear => 2,
            Filter::Cubic(_) => 4,
        }
    }

    /// The source coordinate of output index `y`.
    fn source_coord(&self, g: &AxisGeometry, y: f64) -> f64 {
        let (in_w, scale) = (g.in_dim as f64, g.scale);
        let out_w = scale * in_w;
        match self.coord {
            CoordMode::AlignCorners if out_w == 1.0 => 0.0,
            CoordMode::AlignCorners => y * (in_w - 1.0) / (out_w - 1.0),
            CoordMode::Asymmetric => y / scale,
            CoordMode::TfHalfPixelForNn => (y + 0.5) / scale,
            CoordMode::TfCropAndResize => {
                let (r0, r1) = g.roi;
                let x = if out_w == 1.0 {
                    (r1 - r0) * (in_w - 1.0) / 2.0
                } else {
                    y * (r1 - r0) * (in_w - 1.0) / (out_w - 1.0)
                };
                x + r0 * (in_w - 1.0)
            }
            CoordMode::PytorchHalfPixel if out_w == 1.0 => -0.5,
            CoordMode::PytorchHalfPixel | CoordMode::HalfPixel => (y + 0.5) / scale - 0.5,
            CoordMode::HalfPixelSymmetric => {
                let adjustment = g.out_dim as f64 / out_w;
                let offset = in_w / 2.0 * (1.0 - adjustment);
                offset + (y + 0.5) / scale - 0.5
            }
        }
    }

    /// Fills the tap table of one axis: `out_dim` rows of `taps(g)` (input index, weight)
    /// pairs. Indices are clamped to the axis (edge padding); a row outside a crop starts with
    /// [`EXTRAPOLATE`].
    pub fn fill_taps(&self, g: &AxisGeometry, index: &mut [usize], weight: &mut [f64]) {
        let n = self.taps(g);
        debug_assert!(index.len() == g.out_dim * n && weight.len() == g.out_dim * n);
        let last = g.in_dim.saturating_sub(1) as i64;
        let identity = self.is_identity(g);
        let rows = index.chunks_exact_mut(n).zip(weight.chunks_exact_mut(n));
        for (y, (idx, w)) in rows.enumerate() {
            if identity {
                idx[0] = y;
                w[0] = 1.0;
                continue;
            }
            let x = self.source_coord(g, y as f64);
            if self.coord == CoordMode::TfCropAndResize && (x < 0.0 || x > last as f64) {
                idx.fill(0);
                idx[0] = EXTRAPOLATE;
                w.fill(0.0);
                continue;
            }
            // The reference takes the ratio in (0, 1]: an integral coordinate counts as the
            // right end of the interval starting one pixel to its left.
            let floor = x.floor();
            let ratio = if x == floor { 1.0 } else { x - floor };
            let left = (x - ratio) as i64;
            if let Filter::Nearest(mode) = self.filter {
                let right = match mode {
                    _ if ratio == 1.0 => true,
                    NearestMode::RoundPreferFloor => ratio > 0.5,
                    NearestMode::RoundPreferCeil => ratio >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                };
                idx[0] = (left + i64::from(right)).clamp(0, last) as usize;
                w[0] = 1.0;
                continue;
            }
            // Taps sit at left + start + k for k in 0..n.
            let start = 1 - (n / 2) as i64;
            for (k, wk) in w.iter_mut().enumerate() {
                let offset = start + k as i64;
                *wk = self.coefficient(offset as f64 - ratio, g.scale);
            }
            if self.antialias {
                let sum: f64 = w.iter().sum();
                w.iter_mut().for_each(|v| *v /= sum);
            }
            for (k, (ik, wk)) in idx.iter_mut().zip(w.iter_mut()).enumerate() {
                let i = left + start + k as i64;
                if self.exclude_outside && !(0..=last).contains(&i) {
                    *wk = 0.0;
                }
                *ik = i.clamp(0, last) as usize;
            }
            if self.exclude_outside {
                let sum: f64 = w.iter().sum();
                let sum = if sum == 0.0 { 1.0 } else { sum };
                w.iter_mut().for_each(|v| *v /= sum);
            }
        }
    }

    /// The filter weight of a tap `distance` pixels from the source coordinate.
    fn coefficient(&self, distance: f64, scale: f64) -> f64 {
        // Antialiasing stretches the filter by 1/scale when downsampling.
        let s = if self.antialias { scale.min(1.0) } else { 1.0 };
        let t = (distance * s).abs();
        match self.filter {
            Filter::Linear => (1.0 - t).clamp(0.0, 1.0),
            Filter::Cubic(a) => {
                if t <= 1.0 {
                    ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
                } else if t < 2.0 {
                    ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
                } else {
                    0.0
                }
            }
            Filter::Nearest(_) => f64::from(u8::from(t < 0.5)),
        }
    }
}

/// First tap offset of an antialiased filter of half-width `support` at `scale`.
fn antialias_start(support: f64, scale: f64) -> i64 {
    let s = scale.min(1.0);
    (-support / s).floor() as i64 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(filter: Filter, coord: CoordMode) -> ResizeSpec {
        ResizeSpec {
            op: "Resize",
            filter,
            coord,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            policy: AspectPolicy::Stretch,
        }
    }

    fn table(s: &ResizeSpec, g: &AxisGeometry) -> (Vec<usize>, Vec<f64>) {
        let n = s.taps(g) * g.out_dim;
        let (mut i, mut w) = (vec![0; n], vec![0.0; n]);
        s.fill_taps(g, &mut i, &mut w);
        (i, w)
    }

    #[test]
    fn scales_floor_and_sizes_keep_aspect() {
        let s = spec(Filter::Linear, CoordMode::HalfPixel);
        let g = s.resolve(&[1, 3], None, Some(&[1.0, 0.6]), None).unwrap();
        assert_eq!((g[1].out_dim, g[1].scale), (1, 0.6));
        let mut s = spec(Filter::Nearest(NearestMode::Floor), CoordMode::HalfPixel);
        s.policy = AspectPolicy::NotLarger;
        s.axes = Some(vec![-1, 0]);
        // Axis 1 asks 4/2 = 2x, axis 0 asks 3/4: not_larger takes 0.75 for both.
        let g = s.resolve(&[4, 2], None, None, Some(&[4, 3])).unwrap();
        assert_eq!((g[0].out_dim, g[1].out_dim), (3, 2));
        assert_eq!(g[0].scale, 0.75);
        assert!(s.resolve(&[4, 2], None, None, Some(&[4])).is_err());
        assert!(s.resolve(&[4, 2], None, Some(&[1.0, 0.0]), None).is_err());
        assert!(s.resolve(&[4, 2], None, None, None).is_err());
    }

    #[test]
    fn linear_half_pixel_taps() {
        // 2 -> 4: source coords -0.25, 0.25, 0.75, 1.25.
        let s = spec(Filter::Linear, CoordMode::HalfPixel);
        let g = s.resolve(&[2], None, Some(&[2.0]), None).unwrap()[0];
        let (i, w) = table(&s, &g);
        assert_eq!(i, vec![0, 0, 0, 1, 0, 1, 1, 1]);
        assert_eq!(w, vec![0.25, 0.75, 0.75, 0.25, 0.25, 0.75, 0.75, 0.25]);
    }

    #[test]
    fn nearest_rounding_modes() {
        // 2 -> 4 asymmetric: coords 0, 0.5, 1, 1.5.
        let pick = |mode| {
            let s = spec(Filter::Nearest(mode), CoordMode::Asymmetric);
            let g = s.resolve(&[2], None, Some(&[2.0]), None).unwrap()[0];
            table(&s, &g).0
        };
        assert_eq!(pick(NearestMode::RoundPreferFloor), vec![0, 0, 1, 1]);
        assert_eq!(pick(NearestMode::RoundPreferCeil), vec![0, 1, 1, 1]);
        assert_eq!(pick(NearestMode::Floor), vec![0, 0, 1, 1]);
        assert_eq!(pick(NearestMode::Ceil), vec![0, 1, 1, 1]);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_crop_extrapolates() {
        let s = spec(Filter::Cubic(-0.75), CoordMode::HalfPixel);
        let g = s.resolve(&[4], None, Some(&[0.5]), None).unwrap()[0];
        let (_, w) = table(&s, &g);
        for row in w.chunks(4) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        let s = spec(Filter::Linear, CoordMode::TfCropAndResize);
        let g = s
            .resolve(&[3], Some(&[-0.5, 1.0]), None, Some(&[3]))
            .unwrap()[0];
        // Coords -1, 0.5, 2: the first is outside the input.
        let (i, w) = table(&s, &g);
        assert_eq!(i[0], EXTRAPOLATE);
        assert_eq!((&i[2..4], &w[2..4]), (&[0, 1][..], &[0.5, 0.5][..]));
    }

    #[test]
    fn antialias_widens_downsampling() {
        let mut s = spec(Filter::Linear, CoordMode::HalfPixel);
        s.antialias = true;
        let g = s.resolve(&[4], None, Some(&[0.5]), None).unwrap()[0];
        assert_eq!(s.taps(&g), 4);
        let (i, w) = table(&s, &g);
        // Output 0 sits at 0.5: taps -1..3 with tent weights 0.25, 0.75, 0.75, 0.25 (over 2).
        assert_eq!(&i[..4], &[0, 0, 1, 2]);
        assert_eq!(&w[..4], &[0.125, 0.375, 0.375, 0.125]);
    }
}
