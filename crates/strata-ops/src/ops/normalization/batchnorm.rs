//! BatchNormalization in inference mode: y = (x − mean) / sqrt(var + ε) · scale + bias, per
//! channel (axis 1).

use strata_core::{DType, Device};

use crate::ops::normalization::batchnorm_training::BatchNormTraining;
use crate::ops::normalization::common::check_batch_norm_inputs;
use crate::support::kernel_choice::cpu_supported;
use crate::{
    Fact, InferenceBatchNorm, Kernel, KernelIo, OpCapabilities, OpContext, OpError, OpResult,
    Operator,
};

#[derive(Debug)]
pub struct BatchNorm {
    epsilon: f32,
}

impl BatchNorm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        if ctx.attrs.int_or("training_mode", 0)? != 0 {
            return BatchNormTraining::build(ctx);
        }
        if ctx.opset < 9 && ctx.attrs.int_or("spatial", 1)? != 1 {
            return Err(OpError::attribute(
                "BatchNormalization",
                "spatial",
                "only spatial=1 is supported",
            ));
        }
        Ok(Box::new(BatchNorm {
            epsilon: ctx.attrs.float_or("epsilon", 1e-5)?,
        }))
    }
}

impl Operator for BatchNorm {
    fn op_type(&self) -> &str {
        "BatchNormalization"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = check_batch_norm_inputs(inputs)?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        // Every input (X, scale, bias, mean, var) must be f32.
        let all_f32 = inputs.iter().take(5).all(|f| f.dtype == DType::F32);
        cpu_supported("BatchNormalization", inputs[0].dtype, device, all_f32)?;
        Ok(Box::new(BatchNormKernel {
            epsilon: self.epsilon,
        }))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            batch_norm: Some(InferenceBatchNorm {
                epsilon: self.epsilon,
            }),
            ..OpCapabilities::default()
        }
    }
}

#[derive(Debug)]
struct BatchNormKernel {
    epsilon: f32,
}

impl Kernel for BatchNormKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let dims = out.dims();
        let (n, c) = (dims[0], dims[1]);
        let spatial: usize = dims[2..].iter().product();
        let param = |i: usize| io.input(i).read::<f32>();
        let (scale, bias, mean, var) = (param(1)?, param(2)?, param(3)?, param(4)?);
        let (scale, bias, mean, var) = match (
            scale.as_slice(),
            bias.as_slice(),
            mean.as_slice(),
            var.as_slice(),
        ) {
            (Some(s), Some(b), Some(m), Some(v))
                if s.len() == c && b.len() == c && m.len() == c && v.len() == c =>
            {
                (s, b, m, v)
            }
            _ => {
                return Err(OpError::kernel(
                    "BatchNormalization",
                    format!("parameters must be contiguous with {c} elements"),
                ))
            }
        };
        let mut w = out.write::<f32>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("BatchNormalization", "output is not contiguous"))?;
        if io.in_place != Some(0) {
            let r = io.input(0).read::<f32>()?;
            data.copy_from_slice(
                r.as_slice().ok_or_else(|| {
                    OpError::kernel("BatchNormalization", "input is not contiguous")
                })?,
            );
        }
        for (i, plane) in data
            .chunks_exact_mut(spatial.max(1))
            .enumerate()
            .take(n * c)
        {
            let ch = i % c;
            let k = scale[ch] / (var[ch] + self.epsilon).sqrt();
            let b = bias[ch] - mean[ch] * k;
            plane.iter_mut().for_each(|x| *x = *x * k + b);
        }
        Ok(())
    }
}
