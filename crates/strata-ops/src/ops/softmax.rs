//! Softmax: along one axis (opset 13+), or over the 2-D coercion at `axis` (before 13).

use std::marker::PhantomData;

use num_traits::Float;
use strata_core::{DType, Device, Element};

use super::identity::first_input;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// The softmax family's constructors, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[("Softmax", Softmax::build)];

#[derive(Debug)]
pub struct Softmax {
    axis: i64,
    /// Before opset 13 the input is coerced to 2-D at `axis` and softmax runs over all of the
    /// trailing dims at once.
    coerce_2d: bool,
}

impl Softmax {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let coerce_2d = ctx.opset < 13;
        let axis = ctx.attrs.int_or("axis", if coerce_2d { 1 } else { -1 })?;
        Ok(Box::new(Softmax { axis, coerce_2d }))
    }
}

impl Operator for Softmax {
    fn op_type(&self) -> &str {
        "Softmax"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = first_input("Softmax", inputs)?;
        let r = x.rank() as i64;
        let axis = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if !(0..r.max(1)).contains(&axis) {
            return Err(OpError::attribute(
                "Softmax",
                "axis",
                format!("{} out of range for rank {r}", self.axis),
            ));
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = inputs[0].dtype;
        let (axis, coerce_2d) = (self.axis, self.coerce_2d);
        match (dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(SoftmaxKernel::<f32> {
                axis,
                coerce_2d,
                _t: PhantomData,
            })),
            (DType::F64, Device::Cpu) => Ok(Box::new(SoftmaxKernel::<f64> {
                axis,
                coerce_2d,
                _t: PhantomData,
            })),
            _ => Err(OpError::NoKernel {
                op: "Softmax".into(),
                dtype,
                device,
            }),
        }
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

#[derive(Debug)]
struct SoftmaxKernel<T> {
    axis: i64,
    coerce_2d: bool,
    _t: PhantomData<T>,
}

/// Softmax of each of `outer × inner` lanes of length `len` (stride `inner`), in place.
fn softmax_lanes<T: Float>(data: &mut [T], outer: usize, len: usize, inner: usize) {
    for o in 0..outer {
        for i in 0..inner {
            let base = o * len * inner + i;
            let lane = (0..len).map(|k| base + k * inner);
            let max = lane.clone().fold(T::neg_infinity(), |m, p| m.max(data[p]));
            let mut sum = T::zero();
            for p in lane.clone() {
                let e = (data[p] - max).exp();
                data[p] = e;
                sum = sum + e;
            }
            for p in lane {
                data[p] = data[p] / sum;
            }
        }
    }
}

impl<T: Element + Float> Kernel for SoftmaxKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let dims = out.dims();
        let r = dims.len() as i64;
        let axis = (if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        })
        .clamp(0, r.max(1) - 1) as usize;
        let (outer, len, inner) = if dims.is_empty() {
            (1, 1, 1)
        } else if self.coerce_2d {
            (
                dims[..axis].iter().product(),
                dims[axis..].iter().product(),
                1,
            )
        } else {
            (
                dims[..axis].iter().product(),
                dims[axis],
                dims[axis + 1..].iter().product(),
            )
        };
        let mut w = out.write::<T>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("Softmax", "output is not contiguous"))?;
        if io.in_place != Some(0) {
            let r = io.input(0).read::<T>()?;
            data.copy_from_slice(
                r.as_slice()
                    .ok_or_else(|| OpError::kernel("Softmax", "input is not contiguous"))?,
            );
        }
        softmax_lanes(data, outer, len, inner);
        Ok(())
    }
}
