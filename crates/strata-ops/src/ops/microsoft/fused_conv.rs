//! com.microsoft FusedConv: Conv (every attribute of ONNX Conv) followed by an activation
//! (`activation`: Relu, LeakyRelu, Sigmoid, Clip, Tanh, HardSigmoid, with `activation_params`),
//! with an optional residual Z added before it: `act(conv(X, W, B) + Z)`. Without Z, the
//! activations Conv's kernel can fuse (Relu, LeakyRelu, Sigmoid, Clip) are applied as it stores
//! each tile; otherwise Conv runs and one pass adds Z and applies the activation in place.

use strata_core::Device;

use super::access::{contiguous, contiguous_mut};
use crate::kernels::Activation;
use crate::ops::convolution::conv::Conv;
use crate::support::inputs::{optional, required};
use crate::{EpilogueStep, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "FusedConv";

/// The activation after the convolution.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PostActivation {
    /// One Conv's kernel applies itself.
    Fusable(Activation),
    Tanh,
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
}

#[derive(Debug)]
pub(crate) struct FusedConv {
    conv: Box<dyn Operator>,
    /// The activation left for the second pass (None when the conv kernel applies it).
    post: Option<PostActivation>,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let name = ctx.attrs.string_or("activation", "")?;
    let params = ctx.attrs.floats("activation_params")?.unwrap_or_default();
    let param = |i: usize, default: f32| params.get(i).copied().unwrap_or(default);
    let activation = match name.as_str() {
        "" | "Identity" => PostActivation::Fusable(Activation::None),
        "Relu" => PostActivation::Fusable(Activation::Relu),
        "LeakyRelu" => PostActivation::Fusable(Activation::LeakyRelu {
            alpha: param(0, 0.01),
        }),
        "Sigmoid" => PostActivation::Fusable(Activation::Sigmoid),
        "Clip" => PostActivation::Fusable(Activation::Clip {
            min: param(0, f32::MIN),
            max: param(1, f32::MAX),
        }),
        "Tanh" => PostActivation::Tanh,
        "HardSigmoid" => PostActivation::HardSigmoid {
            alpha: param(0, 0.2),
            beta: param(1, 0.5),
        },
        other => {
            return Err(OpError::attribute(
                OP,
                "activation",
                format!("{other:?} is not supported"),
            ))
        }
    };
    let conv = Conv::build(&OpContext {
        num_inputs: ctx.num_inputs.min(3),
        ..*ctx
    })?;
    let has_z = ctx.num_inputs > 3;
    let (conv, post) = match activation {
        PostActivation::Fusable(Activation::None) => (conv, None),
        PostActivation::Fusable(a) if !has_z => {
            let fused = conv
                .capabilities()
                .epilogue
                .and_then(|e| e.fuse(EpilogueStep::Activation(a)))
                .ok_or_else(|| OpError::attribute(OP, "activation", "Conv cannot fuse it"))?;
            (fused.op, None)
        }
        other => (conv, Some(other)),
    };
    Ok(Box::new(FusedConv { conv, post }))
}

impl Operator for FusedConv {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let out = self.conv.infer(&inputs[..inputs.len().min(3)])?;
        if let Some(z) = optional(inputs, 3) {
            if z.dtype != out[0].dtype
                || (z.concrete().is_some() && out[0].concrete().is_some() && z.dims != out[0].dims)
            {
                return Err(OpError::shape(
                    OP,
                    format!("Z {:?} must match the output {:?}", z.dims, out[0].dims),
                ));
            }
        }
        required(OP, inputs, 1)?;
        Ok(out)
    }

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        self.conv
            .scratch_bytes(&inputs[..inputs.len().min(3)], outputs)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        if self.post.is_some() || optional(inputs, 3).is_some() {
            crate::support::kernel_choice::cpu_supported(
                OP,
                dtype,
                device,
                dtype == strata_core::DType::F32,
            )?;
        }
        Ok(Box::new(FusedConvKernel {
            conv: self
                .conv
                .kernel(&inputs[..inputs.len().min(3)], outputs, device)?,
            post: self.post,
        }))
    }
}

#[derive(Debug)]
struct FusedConvKernel {
    conv: Box<dyn Kernel>,
    /// Applied after adding Z (when the node lists a Z or the conv kernel cannot fuse it).
    post: Option<PostActivation>,
}

impl Kernel for FusedConvKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let z_t = io.input(3);
        let inputs = &io.inputs[..io.inputs.len().min(3)];
        self.conv.run(&KernelIo {
            inputs,
            outputs: io.outputs,
            scratch: io.scratch,
            in_place: None,
            threads: io.threads,
        })?;
        if !z_t.is_defined() && self.post.is_none() {
            // Nothing left: the conv kernel applied the activation, if any.
            return Ok(());
        }
        let mut yw = io.output(0).write::<f32>()?;
        let y = contiguous_mut(OP, "Y", &mut yw)?;
        if z_t.is_defined() {
            let zr = z_t.read::<f32>()?;
            let z = contiguous(OP, "Z", &zr)?;
            if z.len() != y.len() {
                return Err(OpError::kernel(
                    OP,
                    format!("Z has {} elements, Y {}", z.len(), y.len()),
                ));
            }
            y.iter_mut().zip(z).for_each(|(o, &v)| *o += v);
        }
        match self.post {
            None => {}
            Some(PostActivation::Fusable(a)) => a.add_bias_and_apply(y, 0.0),
            Some(PostActivation::Tanh) => y
                .iter_mut()
                .for_each(|v| *v = crate::support::fast_math::tanh(*v)),
            Some(PostActivation::HardSigmoid { alpha, beta }) => y
                .iter_mut()
                .for_each(|v| *v = (alpha * *v + beta).clamp(0.0, 1.0)),
        }
        Ok(())
    }
}
