//! HannWindow, HammingWindow and BlackmanWindow (opset 17): a window of `size` values (scalar
//! int input), periodic (`periodic = 1`, the default: the denominator is `size`) or symmetric
//! (`size - 1`), in `output_datatype` (default float). Computed in f64. The output length is a
//! value, so the window is built at plan time from a constant size, or on the runtime's dynamic
//! path.

use std::f64::consts::PI;

use strata_core::{DType, Device, Tensor};

use super::values::{is_storable, known_scalar_int, scalar_int, to_tensor};
use crate::ops::cast::cast::dtype_from_onnx_code;
use crate::support::axes::check_int_input;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// Which window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Hann,
    Hamming,
    Blackman,
}

#[derive(Debug, Clone, Copy)]
pub struct Window {
    shape: Shape,
    periodic: bool,
    dtype: DType,
}

impl Window {
    pub fn build_hann(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, Shape::Hann)
    }

    pub fn build_hamming(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, Shape::Hamming)
    }

    pub fn build_blackman(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, Shape::Blackman)
    }

    fn build(ctx: &OpContext, shape: Shape) -> OpResult<Box<dyn Operator>> {
        let op = ctx.op_type;
        let code = ctx.attrs.int_or("output_datatype", 1)?;
        let dtype = dtype_from_onnx_code(code)
            .filter(|&d| is_storable(d))
            .ok_or_else(|| {
                OpError::attribute(
                    op,
                    "output_datatype",
                    format!("type code {code} is not a numeric type"),
                )
            })?;
        Ok(Box::new(Window {
            shape,
            periodic: ctx.attrs.int_or("periodic", 1)? != 0,
            dtype,
        }))
    }

    fn name(&self) -> &'static str {
        match self.shape {
            Shape::Hann => "HannWindow",
            Shape::Hamming => "HammingWindow",
            Shape::Blackman => "BlackmanWindow",
        }
    }

    fn size(&self, size: i64) -> OpResult<usize> {
        usize::try_from(size)
            .map_err(|_| OpError::shape(self.name(), format!("size {size} is negative")))
    }

    /// The window's values; the size comes from data, so the vector is reserved fallibly.
    fn values(&self, size: usize) -> OpResult<Vec<f64>> {
        let denominator = if self.periodic {
            size
        } else {
            size.saturating_sub(1)
        } as f64;
        let values = (0..size).map(|n| {
            // A one-point symmetric window divides 0 by 0; it is the peak value 1.
            let x = if denominator == 0.0 {
                0.0
            } else {
                2.0 * PI * n as f64 / denominator
            };
            match self.shape {
                Shape::Hann => 0.5 - 0.5 * x.cos(),
                Shape::Hamming => 25.0 / 46.0 - 21.0 / 46.0 * x.cos(),
                Shape::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            }
        });
        Ok(strata_core::try_collect(size, values)?)
    }
}

impl Operator for Window {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.name();
        let size = required(op, inputs, 0)?;
        check_int_input(op, inputs, 0)?;
        match &size.value {
            Some(v) => {
                let n = self.size(known_scalar_int(op, "size", v)?)?;
                Ok(vec![Fact::constant(to_tensor(
                    op,
                    &self.values(n)?,
                    &[n],
                    self.dtype,
                )?)])
            }
            None => Ok(vec![Fact::new(self.dtype, vec![Dim::Unknown])]),
        }
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(self.name(), self.dtype, device)?;
        Ok(Box::new(*self))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for Window {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let n = self.size(scalar_int(self.name(), "size", io.input(0))?)?;
        let out = io.output(0);
        if out.dims() != [n] {
            return Err(OpError::kernel(
                self.name(),
                format!("output has dims {:?}, expected [{n}]", out.dims()),
            ));
        }
        let values: Tensor = to_tensor(self.name(), &self.values(n)?, &[n], self.dtype)?;
        out.copy_from(&values)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(shape: Shape, periodic: bool, size: i64) -> OpResult<Vec<f32>> {
        let w = Window {
            shape,
            periodic,
            dtype: DType::F32,
        };
        let size = Fact::constant(Tensor::from_slice(&[size], &[])?);
        let out = w.infer(&[&size])?;
        Ok(out[0].value.as_ref().unwrap().to_vec::<f32>()?)
    }

    fn close(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn periodic_and_symmetric_values() {
        // Hann, 4 points periodic: sin²(πn/4) = 0, 0.5, 1, 0.5.
        assert!(close(
            &window(Shape::Hann, true, 4).unwrap(),
            &[0.0, 0.5, 1.0, 0.5]
        ));
        // Symmetric 3 points: 0, 1, 0.
        assert!(close(
            &window(Shape::Hann, false, 3).unwrap(),
            &[0.0, 1.0, 0.0]
        ));
        let a = 25.0 / 46.0;
        assert!(close(
            &window(Shape::Hamming, false, 3).unwrap(),
            &[2.0 * a - 1.0, 1.0, 2.0 * a - 1.0]
        ));
        assert!(close(
            &window(Shape::Blackman, false, 3).unwrap(),
            &[0.0, 1.0, 0.0]
        ));
        assert_eq!(window(Shape::Blackman, false, 1).unwrap().len(), 1);
    }

    #[test]
    fn negative_size_and_bad_type_are_errors() {
        assert!(window(Shape::Hann, true, -1).is_err());
        let attrs =
            crate::Attributes::new("HannWindow").with("output_datatype", crate::Attr::Int(8));
        let ctx = OpContext {
            op_type: "HannWindow",
            domain: "",
            opset: 17,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        };
        assert!(Window::build_hann(&ctx).is_err());
    }
}
