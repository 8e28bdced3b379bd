//! LpNormalization (opsets 1+): every lane along `axis` (default -1) is divided by its L1 or L2
//! norm (`p` = 1 or 2, default 2). A lane whose norm is zero becomes zeros instead of NaN, as
//! the ONNX reference does.

use std::marker::PhantomData;

use num_traits::{Float, Zero};
use strata_core::Device;

use super::common::{contiguous, contiguous_mut, float_input};
use crate::cpu_float_kernel;
use crate::support::axes::normalize_axis;
use crate::support::numeric::Real;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "LpNormalization";

#[derive(Debug, Clone, Copy)]
pub struct LpNorm {
    axis: i64,
    /// 1 or 2.
    p: i64,
}

impl LpNorm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let p = ctx.attrs.int_or("p", 2)?;
        if p != 1 && p != 2 {
            return Err(OpError::attribute(
                OP,
                "p",
                format!("must be 1 or 2, got {p}"),
            ));
        }
        Ok(Box::new(LpNorm {
            axis: ctx.attrs.int_or("axis", -1)?,
            p,
        }))
    }
}

impl Operator for LpNorm {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = float_input(OP, inputs, 0)?;
        normalize_axis(OP, "axis", self.axis, x.rank())?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = float_input(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => LpNormKernel::<T> { op: *self, _t: PhantomData })
    }
}

#[derive(Debug)]
struct LpNormKernel<T> {
    op: LpNorm,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for LpNormKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let dims = x.dims();
        let axis = normalize_axis(OP, "axis", self.op.axis, dims.len())?;
        let outer: usize = dims[..axis].iter().product();
        let len = dims[axis];
        let inner: usize = dims[axis + 1..].iter().product();
        let xr = x.read::<T>()?;
        let xs = contiguous(OP, "input", &xr)?;
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        for o in 0..outer {
            for i in 0..inner {
                let base = o * len * inner + i;
                let lane = (0..len).map(|k| base + k * inner);
                let norm = if self.op.p == 1 {
                    lane.clone()
                        .fold(T::Wide::zero(), |s, p| s + xs[p].widen().abs())
                } else {
                    lane.clone()
                        .fold(T::Wide::zero(), |s, p| {
                            let v = xs[p].widen();
                            s + v * v
                        })
                        .sqrt()
                };
                for p in lane {
                    y[p] = if norm == T::Wide::zero() {
                        T::narrow(T::Wide::zero())
                    } else {
                        T::narrow(xs[p].widen() / norm)
                    };
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs};
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn l2_along_last_axis_and_l1_along_first() {
        let x = Tensor::from_slice(&[3.0f32, 4.0, 0.0, 0.0], &[2, 2]).unwrap();
        let out = run_outputs("LpNormalization", 22, &[], std::slice::from_ref(&x), 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[0.6, 0.8, 0.0, 0.0],
            "l2",
        );
        let x = Tensor::from_slice(&[1.0f32, -2.0, -3.0, 2.0], &[2, 2]).unwrap();
        let out = run_outputs(
            "LpNormalization",
            22,
            &[("p", Attr::Int(1)), ("axis", Attr::Int(0))],
            &[x],
            1,
        )
        .unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[0.25, -0.5, -0.75, 0.5],
            "l1",
        );
    }

    #[test]
    fn bad_attributes_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
        let err = run_outputs(
            "LpNormalization",
            22,
            &[("p", Attr::Int(3))],
            std::slice::from_ref(&x),
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`p`"), "{err}");
        let err =
            run_outputs("LpNormalization", 22, &[("axis", Attr::Int(2))], &[x], 1).unwrap_err();
        assert!(err.to_string().contains("axis"), "{err}");
    }
}
