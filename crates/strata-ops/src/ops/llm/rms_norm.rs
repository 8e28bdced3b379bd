//! RmsNorm: `Y = X / sqrt(mean(X²) + epsilon) · scale` over the last axis, with ggml's rounding
//! (see [`super::ggml_math::rms_norm_row`]). Inputs `X (..., d)` f32 and `scale (d)` f32;
//! attribute `epsilon` (default 1e-5). ONNX's RMSNormalization computes the same function with
//! different rounding; GGUF models use this one so their logits are llama.cpp's.

use strata_core::{DType, Device};

use super::ggml_math::rms_norm_row;
use super::{check_f32, contiguous_f32, contiguous_f32_mut};
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "RmsNorm";

#[derive(Clone, Copy, Debug)]
pub struct RmsNorm {
    epsilon: f32,
}

impl RmsNorm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let epsilon = ctx.attrs.float_or("epsilon", 1e-5)?;
        if !(epsilon >= 0.0 && epsilon.is_finite()) {
            return Err(OpError::attribute(
                OP,
                "epsilon",
                format!("must be finite and non-negative, got {epsilon}"),
            ));
        }
        Ok(Box::new(RmsNorm { epsilon }))
    }
}

impl Operator for RmsNorm {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x, scale] = exact_inputs(OP, inputs)?;
        check_f32(OP, x, 0)?;
        check_f32(OP, scale, 1)?;
        let fits = x.rank() >= 1
            && scale.rank() == 1
            && match (x.dims[x.rank() - 1].known(), scale.dims[0].known()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
        if !fits {
            return Err(OpError::shape(
                OP,
                format!(
                    "scale {:?} must be 1-D as long as the last axis of X {:?}",
                    scale.dims, x.dims
                ),
            ));
        }
        Ok(vec![x.clone()])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(RmsNormKernel(*self)))
    }
}

#[derive(Debug)]
struct RmsNormKernel(RmsNorm);

impl Kernel for RmsNormKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, w_t, y_t) = (io.input(0), io.input(1), io.output(0));
        let d = x_t.dims().last().copied().unwrap_or(0);
        let (x, w) = (x_t.read::<f32>()?, w_t.read::<f32>()?);
        let (x, w) = (contiguous_f32(OP, &x)?, contiguous_f32(OP, &w)?);
        let mut y_w = y_t.write::<f32>()?;
        let y = contiguous_f32_mut(OP, &mut y_w)?;
        if w.len() != d || y.len() != x.len() {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?}, scale {:?} and Y {:?} do not agree",
                    x_t.dims(),
                    w_t.dims(),
                    y_t.dims()
                ),
            ));
        }
        if d == 0 {
            return Ok(());
        }
        for (x, y) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)) {
            rms_norm_row(x, w, self.0.epsilon, y);
        }
        Ok(())
    }
}
