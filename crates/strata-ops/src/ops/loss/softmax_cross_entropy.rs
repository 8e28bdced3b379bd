//! SoftmaxCrossEntropyLoss (opsets 12, 13): the log-softmax of the scores over the class axis
//! (axis 1), then the negative log-likelihood loss of the targets (see `nll.rs` for
//! `reduction`, `ignore_index` and `weights`). The optional second output is the log-softmax.

use std::marker::PhantomData;

use strata_core::Device;

use super::nll::{loss_kernel, LossConfig};
use crate::ops::activation::softmax::{apply_lanes, SoftmaxKind};
use crate::ops::normalization::common::{contiguous, contiguous_mut, float_input};
use crate::support::numeric::Real;
use crate::{dispatch_float, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "SoftmaxCrossEntropyLoss";

#[derive(Debug, Clone, Copy)]
pub struct SoftmaxCrossEntropy {
    config: LossConfig,
    /// Whether the node asks for the log-probabilities (output 1).
    log_prob_output: bool,
}

impl SoftmaxCrossEntropy {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        if ctx.num_outputs > 2 {
            return Err(OpError::shape(
                OP,
                format!("at most 2 outputs, the node lists {}", ctx.num_outputs),
            ));
        }
        Ok(Box::new(SoftmaxCrossEntropy {
            config: LossConfig::parse(OP, ctx)?,
            log_prob_output: ctx.num_outputs == 2,
        }))
    }
}

impl Operator for SoftmaxCrossEntropy {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let loss = self.config.infer_loss(inputs)?;
        let x = inputs[0];
        let mut out = vec![loss];
        if self.log_prob_output {
            out.push(Fact::new(x.dtype, x.dims.clone()));
        }
        Ok(out)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = float_input(OP, inputs, 0)?.dtype;
        loss_kernel(self.config, dtype, device, |config, dtype| {
            dispatch_float!(dtype, T => Some(Box::new(SceKernel::<T> { config, _t: PhantomData })
                as Box<dyn Kernel>), _ => None)
        })
    }

    /// Without the log-prob output, the log-softmax lives in planned scratch.
    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        if self.log_prob_output {
            return Ok(0);
        }
        let x = float_input(OP, inputs, 0)?;
        Ok(x.numel().map_or(0, |n| n * x.dtype.size_in_bytes()))
    }
}

#[derive(Debug)]
struct SceKernel<T> {
    config: LossConfig,
    _t: PhantomData<T>,
}

impl<T: Real> SceKernel<T> {
    /// Writes the log-softmax of `x` over axis 1 into `log_prob`, then the loss.
    fn run_into(&self, io: &KernelIo<'_>, log_prob: &mut [T]) -> OpResult<()> {
        let x = io.input(0);
        let dims = x.dims();
        let xr = x.read::<T>()?;
        let xs = contiguous(OP, "scores", &xr)?;
        if log_prob.len() != xs.len() {
            return Err(OpError::kernel(
                OP,
                "log-prob buffer does not match the scores",
            ));
        }
        log_prob.copy_from_slice(xs);
        let spatial = dims[2..].iter().product();
        apply_lanes(SoftmaxKind::LogSoftmax, log_prob, dims[0], dims[1], spatial);
        self.config
            .gather_loss(log_prob, dims, io.input(1), io.input(2), io.output(0))
    }
}

impl<T: Real> Kernel for SceKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        if x.rank() < 2 {
            return Err(OpError::kernel(OP, "scores must have rank >= 2"));
        }
        let log_prob = io.output(1);
        if log_prob.is_defined() {
            let mut w = log_prob.write::<T>()?;
            return self.run_into(io, contiguous_mut(OP, "log_prob", &mut w)?);
        }
        let bytes = x.numel() * std::mem::size_of::<T>();
        let mut scratch = match io.scratch {
            Some(s) if s.numel() >= bytes => Some(s.write_bytes(OP)?),
            _ => None,
        };
        match scratch.as_mut() {
            Some(g) => {
                let buf = bytemuck::try_cast_slice_mut(&mut g.bytes()[..bytes])
                    .map_err(|e| OpError::kernel(OP, format!("scratch is misaligned: {e}")))?;
                self.run_into(io, buf)
            }
            // No scratch was planned (e.g. constant folding): allocate.
            None => self.run_into(
                io,
                &mut vec![T::narrow(num_traits::Zero::zero()); x.numel()],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs as run};
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn loss_and_log_prob_of_two_samples() {
        // Row 0 has equal scores (log-prob -ln 3 each); row 1 is [0, ln 2, 0]: probs 1/4, 1/2, 1/4.
        let l2 = 2.0f32.ln();
        let x = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 0.0, l2, 0.0], &[2, 3]).unwrap();
        let t = Tensor::from_slice(&[0i64, 1], &[2]).unwrap();
        let none = [("reduction", Attr::String("none".into()))];
        let out = run(
            "SoftmaxCrossEntropyLoss",
            13,
            &none,
            &[x.clone(), t.clone()],
            2,
        )
        .unwrap();
        let l3 = 3.0f32.ln();
        assert_close(&out[0].to_vec::<f32>().unwrap(), &[l3, l2], "loss");
        assert_close(
            &out[1].to_vec::<f32>().unwrap(),
            &[-l3, -l3, -l3, -2.0 * l2, -l2, -2.0 * l2],
            "log_prob",
        );
        let w = Tensor::from_slice(&[3.0f32, 1.0, 1.0], &[3]).unwrap();
        let out = run("SoftmaxCrossEntropyLoss", 13, &[], &[x, t, w], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[(3.0 * l3 + l2) / 4.0],
            "mean",
        );
    }

    #[test]
    fn class_axis_is_axis_one_with_spatial_dims() {
        // [N=1, C=2, d=2]: lanes are the columns [0, ln 3] and [0, 0].
        let l3 = 3.0f32.ln();
        let x = Tensor::from_slice(&[0.0f32, 0.0, l3, 0.0], &[1, 2, 2]).unwrap();
        let t = Tensor::from_slice(&[1i32, 0], &[1, 2]).unwrap();
        let sum = [("reduction", Attr::String("sum".into()))];
        let out = run("SoftmaxCrossEntropyLoss", 13, &sum, &[x, t], 1).unwrap();
        let expected = -(0.75f32.ln()) - 0.5f32.ln();
        assert_close(&out[0].to_vec::<f32>().unwrap(), &[expected], "sum");
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[0.0f32; 3], &[3]).unwrap();
        let t = Tensor::from_slice(&[0i64], &[1]).unwrap();
        let err = run("SoftmaxCrossEntropyLoss", 13, &[], &[x, t], 1).unwrap_err();
        assert!(err.to_string().contains("rank"), "{err}");
        let x = Tensor::from_slice(&[0.0f32; 6], &[2, 3]).unwrap();
        let t = Tensor::from_slice(&[0i64, -2], &[2]).unwrap();
        let err = run("SoftmaxCrossEntropyLoss", 13, &[], &[x.clone(), t], 1).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let t = Tensor::from_slice(&[0i64, 1], &[2]).unwrap();
        let w = Tensor::from_slice(&[1.0f32; 2], &[2]).unwrap();
        let err = run("SoftmaxCrossEntropyLoss", 13, &[], &[x, t, w], 1).unwrap_err();
        assert!(err.to_string().contains("weight"), "{err}");
    }
}
