//! LRN, local response normalization across channels (opsets 1 and 13):
//! `y = x / (bias + alpha / size * Σ x²)^beta`, the sum running over the channels
//! `c - floor((size-1)/2) ..= c + ceil((size-1)/2)` clipped to the valid range. Input dims are
//! `[N, C, spatial...]`.

use std::marker::PhantomData;

use num_traits::{Float, Zero};
use strata_core::Device;

use super::common::{contiguous, contiguous_mut, float_input};
use crate::cpu_float_kernel;
use crate::support::numeric::{Real, WideFloat};
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "LRN";

#[derive(Debug, Clone, Copy)]
pub struct Lrn {
    alpha: f32,
    beta: f32,
    bias: f32,
    size: usize,
}

impl Lrn {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let size = ctx
            .attrs
            .int("size")?
            .ok_or_else(|| OpError::attribute(OP, "size", "is required"))?;
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| OpError::attribute(OP, "size", format!("{size} is not positive")))?;
        Ok(Box::new(Lrn {
            alpha: ctx.attrs.float_or("alpha", 1e-4)?,
            beta: ctx.attrs.float_or("beta", 0.75)?,
            bias: ctx.attrs.float_or("bias", 1.0)?,
            size,
        }))
    }
}

impl Operator for Lrn {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = float_input(OP, inputs, 0)?;
        if x.rank() < 2 {
            return Err(OpError::shape(
                OP,
                format!("input must have rank >= 2 (N, C, ...), got {:?}", x.dims),
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
        let dtype = float_input(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => LrnKernel::<T> { op: *self, _t: PhantomData })
    }
}

#[derive(Debug)]
struct LrnKernel<T> {
    op: Lrn,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for LrnKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let dims = x.dims();
        if dims.len() < 2 {
            return Err(OpError::kernel(
                OP,
                format!("input dims {dims:?} have rank < 2"),
            ));
        }
        let (n, c) = (dims[0], dims[1]);
        let spatial: usize = dims[2..].iter().product();
        let before = (self.op.size - 1) / 2;
        let after = self.op.size / 2; // ceil((size - 1) / 2)
        let lit = <T::Wide as WideFloat>::lit;
        let alpha = lit(f64::from(self.op.alpha) / self.op.size as f64);
        let (beta, bias) = (lit(f64::from(self.op.beta)), lit(f64::from(self.op.bias)));
        let xr = x.read::<T>()?;
        let xs = contiguous(OP, "input", &xr)?;
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        for b in 0..n {
            for ch in 0..c {
                let window = ch.saturating_sub(before)..(ch + after + 1).min(c);
                for s in 0..spatial {
                    let sum = window.clone().fold(T::Wide::zero(), |acc, k| {
                        let v = xs[(b * c + k) * spatial + s].widen();
                        acc + v * v
                    });
                    let p = (b * c + ch) * spatial + s;
                    y[p] = T::narrow(xs[p].widen() / (bias + alpha * sum).powf(beta));
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
    fn sums_squares_over_neighbouring_channels() {
        // Three channels [1, 2, 3], size 2: floor(1/2) = 0 channels before and ceil(1/2) = 1
        // after, so the windows are {0, 1}, {1, 2} and {2}.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3, 1]).unwrap();
        let out = run_outputs(
            "LRN",
            13,
            &[
                ("size", Attr::Int(2)),
                ("alpha", Attr::Float(2.0)),
                ("beta", Attr::Float(1.0)),
                ("bias", Attr::Float(1.0)),
            ],
            &[x],
            1,
        )
        .unwrap();
        // alpha / size = 1: y = x / (1 + Σ x²).
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[1.0 / 6.0, 2.0 / 14.0, 3.0 / 10.0],
            "y",
        );
    }

    #[test]
    fn bad_size_and_rank_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
        let err = run_outputs("LRN", 13, &[], std::slice::from_ref(&x), 1).unwrap_err();
        assert!(err.to_string().contains("size"), "{err}");
        let err = run_outputs(
            "LRN",
            13,
            &[("size", Attr::Int(0))],
            std::slice::from_ref(&x),
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("size"), "{err}");
        let err = run_outputs("LRN", 13, &[("size", Attr::Int(3))], &[x], 1).unwrap_err();
        assert!(err.to_string().contains("rank"), "{err}");
    }
}
