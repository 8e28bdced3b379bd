//! Resize (opsets 10, 11, 13, 18, 19): nearest (every `nearest_mode`), n-D linear and cubic
//! (`cubic_coeff_a`, `exclude_outside`) interpolation, every `coordinate_transformation_mode`
//! (tf_crop_and_resize with `roi` and `extrapolation_value`), output from `scales` or `sizes`,
//! and the opset 18 `axes`, `antialias` and `keep_aspect_ratio_policy`. Float and integer
//! element types (integers round half to even, saturating). Opset 10 has inputs
//! (X, scales) and resizes like Upsample (asymmetric coordinates, nearest rounds down).
//!
//! The output dims depend on the values of `scales`/`sizes`: known at plan time when those are
//! constants, otherwise left unknown so the runtime sizes the output when the node runs.

use num_traits::ToPrimitive;
use smallvec::SmallVec;
use strata_core::{DType, Device, Tensor};

use super::geometry::{AspectPolicy, AxisGeometry, CoordMode, Filter, NearestMode, ResizeSpec};
use super::interpolate::{resize_into, tap_table_bytes};
use super::sample::is_sampled;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_supported;
use crate::support::numeric::Real;
use crate::{dispatch_float, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// Where the scales come from.
#[derive(Debug, Clone)]
pub(crate) enum ScalesFrom {
    Input(usize),
    /// Upsample-7's `scales` attribute.
    Attribute(Vec<f64>),
}

/// The operator: its spec and which inputs hold roi, scales and sizes.
#[derive(Debug, Clone)]
pub struct Resize {
    spec: ResizeSpec,
    roi: Option<usize>,
    scales: ScalesFrom,
    sizes: Option<usize>,
}

/// What is known about one optional input.
enum Known<'a> {
    Absent,
    Unknown,
    Value(&'a Tensor),
}

impl Resize {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        const OP: &str = "Resize";
        let a = ctx.attrs;
        let legacy = ctx.opset < 11;
        let nearest = if legacy {
            NearestMode::Floor
        } else {
            NearestMode::parse(OP, &a.string_or("nearest_mode", "round_prefer_floor")?)?
        };
        let filter = match a.string_or("mode", "nearest")?.as_str() {
            "nearest" => Filter::Nearest(nearest),
            "linear" => Filter::Linear,
            "cubic" if !legacy => Filter::Cubic(f64::from(a.float_or("cubic_coeff_a", -0.75)?)),
            other => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("unknown mode {other:?} for opset {}", ctx.opset),
                ))
            }
        };
        let coord = if legacy {
            CoordMode::Asymmetric
        } else {
            CoordMode::parse(
                OP,
                &a.string_or("coordinate_transformation_mode", "half_pixel")?,
                ctx.opset,
            )?
        };
        let flag = |name: &str| -> OpResult<bool> {
            match a.int_or(name, 0)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(OpError::attribute(
                    OP,
                    name,
                    format!("must be 0 or 1, got {v}"),
                )),
            }
        };
        let spec = ResizeSpec {
            op: OP,
            filter,
            coord,
            exclude_outside: flag("exclude_outside")?,
            extrapolation: f64::from(a.float_or("extrapolation_value", 0.0)?),
            antialias: flag("antialias")?,
            axes: a.ints("axes")?,
            policy: AspectPolicy::parse(OP, &a.string_or("keep_aspect_ratio_policy", "stretch")?)?,
        };
        let resize = if legacy {
            Resize::new(spec, None, ScalesFrom::Input(1), None)
        } else {
            Resize::new(spec, Some(1), ScalesFrom::Input(2), Some(3))
        };
        Ok(Box::new(resize))
    }

    pub(crate) fn new(
        spec: ResizeSpec,
        roi: Option<usize>,
        scales: ScalesFrom,
        sizes: Option<usize>,
    ) -> Self {
        Resize {
            spec,
            roi,
            scales,
            sizes,
        }
    }

    /// The geometry of every axis, or `None` while a value it needs is unknown.
    fn geometry<'a>(
        &self,
        in_dims: &[usize],
        input: impl Fn(usize) -> Known<'a>,
    ) -> OpResult<Option<Vec<AxisGeometry>>> {
        let op = self.spec.op;
        let scales = match &self.scales {
            ScalesFrom::Attribute(s) => Some(SmallVec::from_slice(s)),
            ScalesFrom::Input(i) => match input(*i) {
                Known::Unknown => return Ok(None),
                Known::Value(t) if t.numel() > 0 => Some(float_values(op, "scales", t)?),
                _ => None,
            },
        };
        let sizes = match self.sizes.map(&input) {
            Some(Known::Unknown) => return Ok(None),
            Some(Known::Value(t)) if t.numel() > 0 => Some(crate::int_values(op, t)?),
            _ => None,
        };
        let roi = match self.roi.map(&input) {
            Some(Known::Value(t)) if t.numel() > 0 => Some(float_values(op, "roi", t)?),
            Some(Known::Unknown) if self.spec.coord == CoordMode::TfCropAndResize => {
                return Ok(None)
            }
            _ => None,
        };
        self.spec
            .resolve(in_dims, roi.as_deref(), scales.as_deref(), sizes.as_deref())
            .map(Some)
    }

    fn check_float(&self, what: &str, index: usize, dtype: DType) -> OpResult<()> {
        if dtype.is_float() {
            Ok(())
        } else {
            Err(OpError::DType {
                op: self.spec.op.into(),
                index,
                expected: format!("a float type for {what}"),
                actual: dtype,
            })
        }
    }

    fn fact_geometry(&self, inputs: &[&Fact]) -> OpResult<Option<Vec<AxisGeometry>>> {
        let x = required(self.spec.op, inputs, 0)?;
        let Some(in_dims) = x.concrete() else {
            return Ok(None);
        };
        self.geometry(&in_dims, |i| match optional(inputs, i) {
            None => Known::Absent,
            Some(f) => match &f.value {
                Some(v) => Known::Value(v),
                None if f.numel() == Some(0) => Known::Absent,
                None => Known::Unknown,
            },
        })
    }
}

/// A float tensor's values (f16/bf16/f32/f64) as f64.
fn float_values(op: &str, what: &str, t: &Tensor) -> OpResult<SmallVec<[f64; 8]>> {
    dispatch_float!(t.dtype(), T => Ok(t
        .to_vec::<T>()?
        .into_iter()
        .map(|v| v.widen().to_f64().unwrap_or(f64::NAN))
        .collect()),
        _ => Err(OpError::shape(op, format!("{what} must be a float tensor, got {}", t.dtype()))))
}

impl Operator for Resize {
    fn op_type(&self) -> &str {
        self.spec.op
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.spec.op;
        let x = required(op, inputs, 0)?;
        if !is_sampled(x.dtype) {
            return Err(OpError::DType {
                op: op.into(),
                index: 0,
                expected: "a float or integer type".into(),
                actual: x.dtype,
            });
        }
        if let ScalesFrom::Input(i) = self.scales {
            if let Some(f) = optional(inputs, i) {
                self.check_float("scales", i, f.dtype)?;
            }
        }
        if let Some(f) = self.roi.and_then(|i| optional(inputs, i)) {
            self.check_float("roi", 1, f.dtype)?;
        }
        if let Some(i) = self.sizes {
            crate::support::axes::check_int_input(op, inputs, i)?;
        }
        let axes = self.spec.resized_axes(x.rank())?;
        let dims = match self.fact_geometry(inputs)? {
            Some(geo) => geo.iter().map(|g| Dim::Known(g.out_dim)).collect(),
            None => (0..x.rank())
                .map(|a| {
                    let untouched = !axes.contains(&a) && self.spec.policy == AspectPolicy::Stretch;
                    if untouched {
                        x.dims[a].clone()
                    } else {
                        Dim::Unknown
                    }
                })
                .collect(),
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(self.spec.op, inputs, 0)?.dtype;
        cpu_supported(self.spec.op, dtype, device, is_sampled(dtype))?;
        Ok(Box::new(self.clone()))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        Ok(self
            .fact_geometry(inputs)?
            .map_or(0, |geo| tap_table_bytes(&self.spec, &geo)))
    }
}

impl Kernel for Resize {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.spec.op;
        let (x, out) = (io.input(0), io.output(0));
        let geo = self
            .geometry(x.dims(), |i| {
                let t = io.input(i);
                if t.is_defined() {
                    Known::Value(t)
                } else {
                    Known::Absent
                }
            })?
            .ok_or_else(|| OpError::kernel(op, "scales or sizes unknown at run time"))?;
        let fits = out.rank() == geo.len()
            && out.dims().iter().zip(&geo).all(|(&o, g)| o == g.out_dim)
            && out.dtype() == x.dtype();
        if !fits {
            return Err(OpError::kernel(
                op,
                format!(
                    "output {}{:?} does not match the resize of {}{:?}",
                    out.dtype(),
                    out.dims(),
                    x.dtype(),
                    x.dims()
                ),
            ));
        }
        if out.numel() == 0 {
            return Ok(());
        }
        resize_into(&self.spec, &geo, x, out, io.scratch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};

    fn t(v: &[f32], dims: &[usize]) -> Option<Tensor> {
        Some(Tensor::from_slice(v, dims).unwrap())
    }

    fn resize(attrs: &[(&str, Attr)], inputs: &[Option<Tensor>]) -> OpResult<Tensor> {
        let mut a = Attributes::new("Resize");
        for (k, v) in attrs {
            a.insert(k, v.clone());
        }
        run_constant("Resize", 19, a, inputs)
    }

    #[test]
    fn nearest_upsample_by_scales() {
        let x = t(&[1., 2., 3., 4.], &[1, 1, 2, 2]);
        let s = t(&[1., 1., 2., 1.5], &[4]);
        let y = resize(&[], &[x, None, s]).unwrap();
        assert_eq!(y.dims(), &[1, 1, 4, 3]);
        // half_pixel + round_prefer_floor: rows 0,0,1,1; cols at -0.17, 0.5, 1.17 -> 0,0,1.
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![1., 1., 2., 1., 1., 2., 3., 3., 4., 3., 3., 4.]
        );
    }

    #[test]
    fn bilinear_align_corners_by_sizes() {
        let x = t(&[0., 3., 6., 9.], &[2, 2]);
        let sizes = Some(Tensor::from_slice(&[3i64, 3], &[2]).unwrap());
        let mode = ("mode", Attr::String("linear".into()));
        let ct = (
            "coordinate_transformation_mode",
            Attr::String("align_corners".into()),
        );
        let y = resize(&[mode, ct], &[x, None, None, sizes]).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![0., 1.5, 3., 3., 4.5, 6., 6., 7.5, 9.]
        );
    }

    #[test]
    fn axes_pick_the_resized_dims() {
        let x = t(&[1., 2., 3., 4.], &[2, 2]);
        let s = t(&[2.], &[1]);
        let y = resize(&[("axes", Attr::Ints(vec![-1]))], &[x, None, s]).unwrap();
        assert_eq!(y.dims(), &[2, 4]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![1., 1., 2., 2., 3., 3., 4., 4.]
        );
    }

    #[test]
    fn integers_round_half_to_even() {
        let x = Some(Tensor::from_slice(&[0u8, 5, 255, 0], &[4]).unwrap());
        let mode = ("mode", Attr::String("linear".into()));
        let ct = (
            "coordinate_transformation_mode",
            Attr::String("asymmetric".into()),
        );
        let y = resize(&[mode, ct], &[x, None, t(&[2.], &[1])]).unwrap();
        // Midpoints 2.5 -> 2, 130 -> 130, 127.5 -> 128; the last clamps to the edge.
        assert_eq!(
            y.to_vec::<u8>().unwrap(),
            vec![0, 2, 5, 130, 255, 128, 0, 0]
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = t(&[1., 2., 3., 4.], &[2, 2]);
        let err = resize(&[], &[x.clone(), None, t(&[2.], &[1])]).unwrap_err();
        assert!(err.to_string().contains("scales"), "{err}");
        let err = resize(&[], &[x.clone(), None, None]).unwrap_err();
        assert!(err.to_string().contains("Resize"), "{err}");
        let err = resize(
            &[("mode", Attr::String("spline".into()))],
            std::slice::from_ref(&x),
        )
        .unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
        let bools = Some(Tensor::from_bools(&[true, false], &[1, 2]).unwrap());
        assert!(resize(&[], &[bools, None, t(&[1., 1.], &[2])]).is_err());
        let huge = t(&[1e30, 1.], &[2]);
        assert!(resize(&[], &[x, None, huge]).is_err());
    }
}
