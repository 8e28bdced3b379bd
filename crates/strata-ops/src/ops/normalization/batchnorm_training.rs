//! BatchNormalization with `training_mode = 1` (opsets 14, 15): normalizes with the batch's
//! own per-channel mean and (population) variance and returns the updated running statistics,
//! `running = input_running · momentum + batch · (1 − momentum)`.

use strata_core::{DType, Device};

use crate::ops::normalization::common::check_batch_norm_inputs;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct BatchNormTraining {
    epsilon: f32,
    momentum: f32,
}

impl BatchNormTraining {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        if ctx.num_outputs > 3 {
            return Err(OpError::attribute(
                "BatchNormalization",
                "training_mode",
                format!(
                    "{} outputs: the saved mean/var outputs of opset 9 training are not \
                     produced (opset 14+ has at most 3)",
                    ctx.num_outputs
                ),
            ));
        }
        Ok(Box::new(BatchNormTraining {
            epsilon: ctx.attrs.float("epsilon")?.unwrap_or(1e-5),
            momentum: ctx.attrs.float("momentum")?.unwrap_or(0.9),
        }))
    }
}

impl Operator for BatchNormTraining {
    fn op_type(&self) -> &str {
        "BatchNormalization"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = check_batch_norm_inputs(inputs)?;
        let channels = vec![x.dims[1].clone()];
        Ok(vec![
            Fact::new(x.dtype, x.dims.clone()),
            Fact::new(x.dtype, channels.clone()),
            Fact::new(x.dtype, channels),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(TrainingKernel {
                epsilon: self.epsilon,
                momentum: self.momentum,
            })),
            (dtype, device) => Err(OpError::no_kernel("BatchNormalization", dtype, device)),
        }
    }
}

#[derive(Debug)]
struct TrainingKernel {
    epsilon: f32,
    momentum: f32,
}

impl Kernel for TrainingKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x_t = io.input(0);
        let dims = x_t.dims();
        let (n, c) = (dims[0], dims[1]);
        let spatial: usize = dims[2..].iter().product();
        let contiguous =
            |what: &str| OpError::kernel("BatchNormalization", format!("{what} is not contiguous"));
        let x = x_t.read::<f32>()?;
        let x = x.as_slice().ok_or_else(|| contiguous("the input"))?;
        let params: Vec<Vec<f32>> = (1..5)
            .map(|i| io.input(i).to_vec::<f32>())
            .collect::<Result<_, _>>()?;
        if params.iter().any(|p| p.len() != c) {
            return Err(OpError::kernel(
                "BatchNormalization",
                format!("parameters must have {c} elements"),
            ));
        }
        let (scale, bias, mean_in, var_in) = (&params[0], &params[1], &params[2], &params[3]);
        let count = (n * spatial).max(1) as f64;
        // Per-channel batch statistics, accumulated in f64.
        let mut mean = vec![0f64; c];
        let mut var = vec![0f64; c];
        for (i, plane) in x.chunks_exact(spatial.max(1)).enumerate().take(n * c) {
            mean[i % c] += plane.iter().map(|&v| f64::from(v)).sum::<f64>();
        }
        mean.iter_mut().for_each(|m| *m /= count);
        for (i, plane) in x.chunks_exact(spatial.max(1)).enumerate().take(n * c) {
            let m = mean[i % c];
            var[i % c] += plane
                .iter()
                .map(|&v| (f64::from(v) - m).powi(2))
                .sum::<f64>();
        }
        var.iter_mut().for_each(|v| *v /= count);
        {
            let mut w = io.output(0).write::<f32>()?;
            let y = w.as_mut_slice().ok_or_else(|| contiguous("the output"))?;
            for (i, (out, plane)) in y
                .chunks_exact_mut(spatial.max(1))
                .zip(x.chunks_exact(spatial.max(1)))
                .enumerate()
                .take(n * c)
            {
                let ch = i % c;
                let k = f64::from(scale[ch]) / (var[ch] + f64::from(self.epsilon)).sqrt();
                let b = f64::from(bias[ch]) - mean[ch] * k;
                for (o, &v) in out.iter_mut().zip(plane) {
                    *o = (f64::from(v) * k + b) as f32;
                }
            }
        }
        let momentum = f64::from(self.momentum);
        for (k, (batch, running)) in [(1, (&mean, mean_in)), (2, (&var, var_in))] {
            let out = io.output(k);
            if !out.is_defined() {
                continue;
            }
            let mut w = out.write::<f32>()?;
            let dst = w
                .as_mut_slice()
                .ok_or_else(|| contiguous("a statistics output"))?;
            for ((d, &b), &r) in dst.iter_mut().zip(batch.iter()).zip(running.iter()) {
                *d = (f64::from(r) * momentum + b * (1.0 - momentum)) as f32;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use super::*;
    use crate::support::test_util::OpRun;
    use crate::{build_operator, Attr, Attributes};

    fn run(x: &[f32], dims: &[usize], momentum: f32) -> Vec<Vec<f32>> {
        let c = dims[1];
        let inputs = [
            Tensor::from_slice(x, dims).unwrap(),
            Tensor::from_slice(&vec![1f32; c], &[c]).unwrap(),
            Tensor::from_slice(&vec![0f32; c], &[c]).unwrap(),
            Tensor::from_slice(&vec![10f32; c], &[c]).unwrap(),
            Tensor::from_slice(&vec![4f32; c], &[c]).unwrap(),
        ];
        let outputs = OpRun::new("BatchNormalization", 15)
            .attrs(&[
                ("training_mode", Attr::Int(1)),
                ("momentum", Attr::Float(momentum)),
                ("epsilon", Attr::Float(0.0)),
            ])
            .outputs(3)
            .constant_inputs()
            .run(&inputs)
            .unwrap();
        outputs.iter().map(|t| t.to_vec::<f32>().unwrap()).collect()
    }

    #[test]
    fn normalizes_with_batch_statistics_and_updates_running_ones() {
        // One channel holding 1, 3 (mean 2, variance 1); a second holding 5, 5 (variance 0).
        let out = run(&[1., 5., 3., 5.], &[2, 2], 0.75);
        assert_eq!(out[0][0], -1.0);
        assert_eq!(out[0][2], 1.0);
        // running mean: 10·0.75 + 2·0.25 = 8; 10·0.75 + 5·0.25 = 8.75
        assert_eq!(out[1], vec![8.0, 8.75]);
        // running var: 4·0.75 + 1·0.25 = 3.25; 4·0.75 + 0 = 3
        assert_eq!(out[2], vec![3.25, 3.0]);
    }

    #[test]
    fn opset_9_saved_statistics_outputs_are_rejected() {
        let attrs = Attributes::new("BatchNormalization").with("training_mode", Attr::Int(1));
        let err = build_operator(&OpContext {
            op_type: "BatchNormalization",
            domain: "",
            opset: 15,
            attrs: &attrs,
            num_inputs: 5,
            num_outputs: 5,
        })
        .unwrap_err();
        assert!(err.to_string().contains("outputs"), "{err}");
    }
}
