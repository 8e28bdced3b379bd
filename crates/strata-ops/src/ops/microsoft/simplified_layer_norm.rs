//! SimplifiedLayerNormalization (onnxruntime's RMS norm, written in the default ONNX domain by
//! its transformer optimizer; registered in com.microsoft too): each row of X reshaped to 2-D at
//! `axis` is divided by its root mean square and multiplied by `scale` (the normalized dims).
//! Optional output 1 is the inverse RMS per row (f32, dims `X[..axis]` then ones).

use std::marker::PhantomData;

use strata_core::{DType, Device};

use super::access::{contiguous, contiguous_mut, optional_slice_mut, write_optional};
use super::norm_rows::{normalize_rows, NormInputs, NormOutputs};
use crate::cpu_float_kernel;
use crate::ops::normalization::row_kernel::{RowNormKernel, RowSlots};
use crate::support::axes::normalize_axis;
use crate::support::inputs::{optional, required};
use crate::support::numeric::Real;
use crate::{
    Dim, Fact, Kernel, KernelIo, OpCapabilities, OpContext, OpError, OpResult, Operator, RowNorm,
};

const OP: &str = "SimplifiedLayerNormalization";

#[derive(Debug, Clone, Copy)]
pub(crate) struct SimplifiedLayerNorm {
    axis: i64,
    epsilon: f32,
    num_outputs: usize,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let stash = ctx.attrs.int_or("stash_type", 1)?;
    if stash != 1 {
        return Err(OpError::attribute(
            OP,
            "stash_type",
            format!("only 1 (float statistics) is supported, got {stash}"),
        ));
    }
    if ctx.num_outputs > 2 {
        return Err(OpError::shape(
            OP,
            format!("at most 2 outputs, the node lists {}", ctx.num_outputs),
        ));
    }
    Ok(Box::new(SimplifiedLayerNorm {
        axis: ctx.attrs.int_or("axis", -1)?,
        epsilon: ctx.attrs.float_or("epsilon", 1e-5)?,
        num_outputs: ctx.num_outputs.max(1),
    }))
}

impl Operator for SimplifiedLayerNorm {
    fn op_type(&self) -> &str {
        OP
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            row_norm: Some(RowNorm {
                axis: self.axis,
                epsilon: self.epsilon,
                centered: false,
            }),
            ..OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let scale = required(OP, inputs, 1)?;
        if !x.dtype.is_float() || scale.dtype != x.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: usize::from(x.dtype.is_float()),
                expected: "a float type, the same for X and scale".into(),
                actual: if x.dtype.is_float() {
                    scale.dtype
                } else {
                    x.dtype
                },
            });
        }
        if optional(inputs, 2).is_some() {
            return Err(OpError::InputCount {
                op: OP.into(),
                expected: "2".into(),
                actual: inputs.len(),
            });
        }
        let axis = normalize_axis(OP, "axis", self.axis, x.rank())?;
        if let (Some(n), Some(block)) = (
            scale.numel(),
            x.dims[axis..]
                .iter()
                .map(Dim::known)
                .product::<Option<usize>>(),
        ) {
            if n != block {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "scale {:?} must cover the normalized dims {:?}",
                        scale.dims,
                        &x.dims[axis..]
                    ),
                ));
            }
        }
        let mut out = vec![Fact::new(x.dtype, x.dims.clone())];
        if self.num_outputs > 1 {
            let mut stat: Vec<Dim> = x.dims[..axis].to_vec();
            stat.resize(x.rank(), Dim::Known(1));
            out.push(Fact::new(DType::F32, stat));
        }
        Ok(out)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(OP, inputs, 0)?;
        let dtype = x.dtype;
        let slots = RowSlots {
            skip: None,
            gamma: 1,
            beta: None,
            bias: None,
            mean: None,
            inv_std: Some(1),
            sum: None,
        };
        let axis = normalize_axis(OP, "axis", self.axis, x.rank())?;
        if device == Device::Cpu && RowNormKernel::fits(&slots, axis, inputs, outputs) {
            return Ok(Box::new(RowNormKernel {
                op: OP,
                slots,
                axis,
                epsilon: self.epsilon,
                centered: false,
            }));
        }
        cpu_float_kernel!(OP, dtype, device, T => SimplifiedKernel::<T> {
            op: *self,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct SimplifiedKernel<T> {
    op: SimplifiedLayerNorm,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for SimplifiedKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x_t = io.input(0);
        let axis = normalize_axis(OP, "axis", self.op.axis, x_t.rank())?;
        let cols: usize = x_t.dims()[axis..].iter().product();
        let (xr, sr) = (x_t.read::<T>()?, io.input(1).read::<T>()?);
        let mut yw = io.output(0).write::<T>()?;
        let mut inv_w = write_optional::<f32>(io.output(1))?;
        let inputs = NormInputs {
            x: contiguous(OP, "X", &xr)?,
            skip: &[],
            bias: &[],
            gamma: contiguous(OP, "scale", &sr)?,
            beta: &[],
            cols,
            epsilon: self.op.epsilon,
            centered: false,
        };
        let outputs = NormOutputs {
            y: contiguous_mut(OP, "Y", &mut yw)?,
            sum: None,
            mean: None,
            inv_std: optional_slice_mut(OP, "inv_std_var", &mut inv_w)?,
        };
        normalize_rows(OP, &inputs, outputs)
    }
}
