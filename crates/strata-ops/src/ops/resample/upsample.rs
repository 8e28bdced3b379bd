//! Upsample (opsets 7 and 9; deprecated in favour of Resize): nearest or n-D linear
//! interpolation with asymmetric coordinates, output dims `floor(input_dim * scale)`. Opset 7
//! takes `scales` as an attribute, opset 9 as input 1. Runs on Resize's geometry and kernel.

use super::geometry::{AspectPolicy, CoordMode, Filter, NearestMode, ResizeSpec};
use super::resize::{Resize, ScalesFrom};
use crate::{OpContext, OpError, OpResult, Operator};

pub struct Upsample;

impl Upsample {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        const OP: &str = "Upsample";
        let filter = match ctx.attrs.string_or("mode", "nearest")?.as_str() {
            "nearest" => Filter::Nearest(NearestMode::Floor),
            "linear" | "bilinear" => Filter::Linear,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("unknown mode {other:?}"),
                ))
            }
        };
        let scales = if ctx.opset < 9 {
            let s = ctx
                .attrs
                .floats("scales")?
                .ok_or_else(|| OpError::attribute(OP, "scales", "is required before opset 9"))?;
            if s.iter().any(|&v| v < 1.0) {
                return Err(OpError::attribute(
                    OP,
                    "scales",
                    format!("must all be at least 1, got {s:?}"),
                ));
            }
            ScalesFrom::Attribute(s.into_iter().map(f64::from).collect())
        } else {
            ScalesFrom::Input(1)
        };
        let spec = ResizeSpec {
            op: OP,
            filter,
            coord: CoordMode::Asymmetric,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            policy: AspectPolicy::Stretch,
        };
        Ok(Box::new(Resize::new(spec, None, scales, None)))
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    #[test]
    fn nearest_repeats_and_linear_interpolates() {
        let x = Tensor::from_slice(&[1.0f32, 2., 3., 4.], &[1, 2, 2]).unwrap();
        let scales = Tensor::from_slice(&[1.0f32, 2., 3.], &[3]).unwrap();
        let y = run_constant(
            "Upsample",
            9,
            Attributes::new("Upsample"),
            &[Some(x.clone()), Some(scales)],
        )
        .unwrap();
        assert_eq!(y.dims(), &[1, 4, 6]);
        assert_eq!(
            &y.to_vec::<f32>().unwrap()[..12],
            &[1., 1., 1., 2., 2., 2., 1., 1., 1., 2., 2., 2.]
        );
        let attrs = Attributes::new("Upsample")
            .with("mode", Attr::String("linear".into()))
            .with("scales", Attr::Floats(vec![1.0, 1.0, 2.0]));
        let y = run_constant("Upsample", 7, attrs, &[Some(x.clone())]).unwrap();
        // Asymmetric: columns at 0, 0.5, 1, 1.5 (the last clamps to the edge).
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![1., 1.5, 2., 2., 3., 3.5, 4., 4.]
        );
        let shrink = Attributes::new("Upsample").with("scales", Attr::Floats(vec![1.0, 0.5, 1.0]));
        assert!(run_constant("Upsample", 7, shrink, &[Some(x)]).is_err());
    }
}
