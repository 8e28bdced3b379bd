//! Dropout (opsets 1–22) for inference. Outside training mode, or with a drop ratio of 0, the
//! output is the input and the optional mask is all true (bool from opset 10, ones of the input
//! type before). Training mode with a ratio above 0 drops random elements: strata has no random
//! kernel, so that case is reported as unsupported instead of producing an arbitrary answer.
//! The ratio is an attribute before opset 12 and the optional input 1 from 12 on, where input 2
//! is `training_mode` (default false). Before opset 7, `is_test = 0` asks for training mode.

use strata_core::{DType, Device, Tensor};

use crate::ops::shape::identity::copy_kernel;
use crate::support::inputs::{optional, required};
use crate::support::numeric::Real;
use crate::{
    dispatch_float, Constructor, DropsTrailingOutputs, Fact, Kernel, KernelIo, OpCapabilities,
    OpContext, OpError, OpResult, Operator,
};

/// Dropout's constructors, listed in the activation family's `OPS` (which the registry reads).
pub const OPS: &[(&str, Constructor)] = &[("Dropout", Dropout::build)];

const OP: &str = "Dropout";

#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    opset: i64,
    /// The ratio attribute (before opset 12).
    ratio: f32,
    /// Training mode fixed by the attributes (`is_test = 0` before opset 7).
    training: bool,
    /// Whether the node lists the mask output.
    mask: bool,
    /// Whether the node lists a `training_mode` input (opset 12 on), which may turn training
    /// on at run time.
    training_input: bool,
}

impl Dropout {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let ratio = ctx.attrs.float_or("ratio", 0.5)?;
        check_ratio(ratio)?;
        if ctx.num_outputs > 2 {
            return Err(OpError::shape(
                OP,
                format!("at most 2 outputs, the node lists {}", ctx.num_outputs),
            ));
        }
        Ok(Box::new(Dropout {
            opset: ctx.opset,
            ratio,
            training: ctx.opset < 7 && ctx.attrs.int_or("is_test", 0)? == 0,
            mask: ctx.num_outputs == 2,
            training_input: ctx.opset >= 12 && ctx.num_inputs > 2,
        }))
    }

    /// The mask's dtype: bool from opset 10, the input's before.
    fn mask_dtype(&self, x: DType) -> DType {
        if self.opset >= 10 {
            DType::Bool
        } else {
            x
        }
    }

    fn random_is_unsupported(&self) -> OpError {
        OpError::Unsupported {
            op_type: "Dropout (training mode with a ratio above 0, which needs random numbers)"
                .into(),
            domain: String::new(),
            opset: self.opset,
        }
    }
}

fn check_ratio(ratio: f32) -> OpResult<()> {
    if (0.0..1.0).contains(&ratio) {
        Ok(())
    } else {
        Err(OpError::attribute(
            OP,
            "ratio",
            format!("must be in [0, 1), got {ratio}"),
        ))
    }
}

impl Operator for Dropout {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        if self.opset >= 12 {
            if let Some(r) = optional(inputs, 1) {
                if !r.dtype.is_float() || r.rank() != 0 {
                    return Err(OpError::shape(
                        OP,
                        format!("ratio must be a float scalar, got {r:?}"),
                    ));
                }
            }
            if let Some(t) = optional(inputs, 2) {
                if t.dtype != DType::Bool || t.rank() != 0 {
                    return Err(OpError::shape(
                        OP,
                        format!("training_mode must be a bool scalar, got {t:?}"),
                    ));
                }
            }
        }
        let mut out = vec![Fact::new(x.dtype, x.dims.clone())];
        if self.mask {
            out.push(Fact::new(self.mask_dtype(x.dtype), x.dims.clone()));
        }
        Ok(out)
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        if self.training && self.ratio > 0.0 {
            return Err(self.random_is_unsupported());
        }
        Ok(Box::new(DropoutKernel {
            op: *self,
            copy: copy_kernel(OP, device)?,
        }))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        // Outside training the output is the input: readers can read it directly.
        let may_drop = self.training_input || (self.training && self.ratio > 0.0);
        OpCapabilities {
            trailing_outputs: Some(self),
            forwards_input: (!may_drop).then_some(0),
            ..OpCapabilities::default()
        }
    }
}

/// The mask nobody reads is left out: an all-true tensor filled on every run for nothing.
impl DropsTrailingOutputs for Dropout {
    fn keep_outputs(&self, keep: usize) -> Option<std::sync::Arc<dyn Operator>> {
        (keep == 1 && self.mask).then(|| {
            std::sync::Arc::new(Dropout {
                mask: false,
                ..*self
            }) as std::sync::Arc<dyn Operator>
        })
    }
}

#[derive(Debug)]
struct DropoutKernel {
    op: Dropout,
    copy: Box<dyn Kernel>,
}

/// A float scalar input as f64.
fn float_scalar(t: &Tensor) -> OpResult<f64> {
    let dtype = t.dtype();
    if t.numel() != 1 {
        return Err(OpError::kernel(
            OP,
            format!("ratio must be a scalar, got {:?}", t.dims()),
        ));
    }
    dispatch_float!(dtype, T => {
        let v = t.to_vec::<T>()?;
        Ok(num_traits::ToPrimitive::to_f64(&v[0].widen()).unwrap_or(f64::NAN))
    }, _ => Err(OpError::kernel(OP, format!("ratio must be a float, got {dtype}"))))
}

impl DropoutKernel {
    /// Whether this run drops elements (and so needs random numbers).
    fn drops(&self, io: &KernelIo<'_>) -> OpResult<bool> {
        if self.op.opset < 12 {
            return Ok(self.op.training && self.op.ratio > 0.0);
        }
        let training = io.input(2);
        let training = training.is_defined() && training.to_bools()?.first() == Some(&true);
        let ratio = io.input(1);
        let ratio = if ratio.is_defined() {
            float_scalar(ratio)?
        } else {
            0.5
        };
        check_ratio(ratio as f32)?;
        Ok(training && ratio > 0.0)
    }
}

impl Kernel for DropoutKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if self.drops(io)? {
            return Err(self.op.random_is_unsupported());
        }
        self.copy.run(&KernelIo {
            inputs: &io.inputs[..1.min(io.inputs.len())],
            outputs: &io.outputs[..1.min(io.outputs.len())],
            scratch: None,
            in_place: io.in_place,
            threads: io.threads,
        })?;
        let mask = io.output(1);
        if !mask.is_defined() {
            return Ok(());
        }
        let dtype = mask.dtype();
        if dtype == DType::Bool {
            mask.write::<u8>()?.fill(1);
            return Ok(());
        }
        dispatch_float!(dtype, T => {
            mask.write::<T>()?.fill(T::narrow(num_traits::One::one()));
            Ok(())
        }, _ => Err(OpError::kernel(OP, format!("mask dtype {dtype} is not bool or a float type"))))
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_outputs as run;
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn inference_is_identity_with_a_true_mask() {
        let x = Tensor::from_slice(&[1.0f32, -2.0, 3.0], &[3]).unwrap();
        let r = Tensor::scalar(0.3f32).unwrap();
        let out = run("Dropout", 22, &[], &[x.clone(), r], 2).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0]);
        assert_eq!(out[1].to_bools().unwrap(), vec![true; 3]);
        // Opset 7: the mask has the input's type.
        let out = run("Dropout", 7, &[("ratio", Attr::Float(0.2))], &[x], 2).unwrap();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![1.0; 3]);
    }

    #[test]
    fn training_with_zero_ratio_is_identity() {
        let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let r = Tensor::scalar(0.0f32).unwrap();
        let t = Tensor::from_bools(&[true], &[]).unwrap();
        let out = run("Dropout", 22, &[], &[x, r, t], 1).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    }

    #[test]
    fn random_dropping_and_bad_ratios_are_errors() {
        let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let r = Tensor::scalar(0.5f32).unwrap();
        let t = Tensor::from_bools(&[true], &[]).unwrap();
        let err = run("Dropout", 22, &[], &[x.clone(), r, t.clone()], 1).unwrap_err();
        assert!(err.to_string().contains("training mode"), "{err}");
        let err = run("Dropout", 6, &[], std::slice::from_ref(&x), 1).unwrap_err();
        assert!(err.to_string().contains("training mode"), "{err}");
        let r = Tensor::scalar(1.5f32).unwrap();
        let err = run("Dropout", 22, &[], &[x.clone(), r, t], 1).unwrap_err();
        assert!(err.to_string().contains("ratio"), "{err}");
        let err = run("Dropout", 11, &[("ratio", Attr::Float(-0.1))], &[x], 1).unwrap_err();
        assert!(err.to_string().contains("ratio"), "{err}");
    }
}
