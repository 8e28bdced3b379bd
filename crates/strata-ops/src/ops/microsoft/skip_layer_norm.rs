//! com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization: a residual Add
//! (`input + skip + bias`) fused with the LayerNorm (or RMS norm) after it, over the last axis.
//! Inputs: input `(…, hidden)`, skip (input's dims, or a suffix of them such as `(seq, hidden)`),
//! gamma `(hidden)`, then beta and bias for the LayerNorm form, bias alone for the simplified
//! one. Outputs: Y, then optional mean and inverse standard deviation (f32, dims `(…, 1)`; not
//! filled by onnxruntime's CPU kernel) and the sum `input + skip + bias`.

use std::marker::PhantomData;

use strata_core::{DType, Device};

use super::access::{
    contiguous, contiguous_mut, optional_slice, optional_slice_mut, read_optional, write_optional,
};
use super::norm_rows::{normalize_rows, NormInputs, NormOutputs};
use crate::cpu_float_kernel;
use crate::ops::normalization::row_kernel::{RowNormKernel, RowSlots};
use crate::support::inputs::{optional, required};
use crate::support::numeric::Real;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipLayerNorm {
    op: &'static str,
    /// LayerNorm (with beta) or the simplified RMS form.
    centered: bool,
    epsilon: f32,
    num_outputs: usize,
}

impl SkipLayerNorm {
    pub(crate) fn build_layer(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, "SkipLayerNormalization", true)
    }

    pub(crate) fn build_simplified(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, "SkipSimplifiedLayerNormalization", false)
    }

    fn build(ctx: &OpContext, op: &'static str, centered: bool) -> OpResult<Box<dyn Operator>> {
        let epsilon = ctx.attrs.float_or("epsilon", 1e-12)?;
        if epsilon.is_nan() || epsilon < 0.0 {
            return Err(OpError::attribute(
                op,
                "epsilon",
                format!("must be >= 0, got {epsilon}"),
            ));
        }
        if ctx.num_outputs > 4 {
            return Err(OpError::shape(
                op,
                format!("at most 4 outputs, the node lists {}", ctx.num_outputs),
            ));
        }
        Ok(Box::new(SkipLayerNorm {
            op,
            centered,
            epsilon,
            num_outputs: ctx.num_outputs.max(1),
        }))
    }

    /// Input slots of beta and bias.
    fn beta_bias_slots(&self) -> (Option<usize>, usize) {
        if self.centered {
            (Some(3), 4)
        } else {
            (None, 3)
        }
    }
}

/// Checks that a parameter is 1-D of `hidden` elements.
fn check_vector(op: &str, what: &str, f: &Fact, hidden: &Dim) -> OpResult<()> {
    match f.dims.as_slice() {
        [d] if d.known().is_none() || hidden.known().is_none() || d == hidden => Ok(()),
        _ => Err(OpError::shape(
            op,
            format!(
                "{what} must be 1-D of the hidden size {hidden:?}, got {:?}",
                f.dims
            ),
        )),
    }
}

impl Operator for SkipLayerNorm {
    fn op_type(&self) -> &str {
        self.op
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.op;
        let x = required(op, inputs, 0)?;
        if !x.dtype.is_float() || x.rank() < 2 {
            return Err(OpError::shape(
                op,
                format!(
                    "input must be a float tensor of rank >= 2, got {} {:?}",
                    x.dtype, x.dims
                ),
            ));
        }
        let hidden = x.dims[x.rank() - 1].clone();
        let skip = required(op, inputs, 1)?;
        let gamma = required(op, inputs, 2)?;
        let (beta_slot, bias_slot) = self.beta_bias_slots();
        let mut present = vec![(1, skip), (2, gamma)];
        present.extend(beta_slot.and_then(|s| optional(inputs, s).map(|f| (s, f))));
        present.extend(optional(inputs, bias_slot).map(|f| (bias_slot, f)));
        for &(index, f) in &present {
            if f.dtype != x.dtype {
                return Err(OpError::DType {
                    op: op.into(),
                    index,
                    expected: x.dtype.to_string(),
                    actual: f.dtype,
                });
            }
            if index >= 2 {
                check_vector(op, ["", "", "gamma", "beta", "bias"][index], f, &hidden)?;
            }
        }
        // skip: the input's dims or a suffix of them (leading ones allowed), at least 2-D.
        let core: Vec<&Dim> = skip
            .dims
            .iter()
            .skip_while(|d| **d == Dim::Known(1))
            .collect();
        let suffix = &x.dims[x.rank().saturating_sub(core.len())..];
        let fits = skip.rank() >= 2
            && core.len() <= x.rank()
            && core
                .iter()
                .zip(suffix)
                .all(|(a, b)| a.known().is_none() || b.known().is_none() || *a == b);
        if !fits {
            return Err(OpError::shape(
                op,
                format!(
                    "skip {:?} does not broadcast to the input {:?}",
                    skip.dims, x.dims
                ),
            ));
        }
        let mut stat_dims = x.dims.clone();
        *stat_dims.last_mut().expect("rank >= 2") = Dim::Known(1);
        let mut out = vec![Fact::new(x.dtype, x.dims.clone())];
        for k in 1..self.num_outputs {
            out.push(if k == 3 {
                Fact::new(x.dtype, x.dims.clone())
            } else {
                Fact::new(DType::F32, stat_dims.clone())
            });
        }
        Ok(out)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(self.op, inputs, 0)?;
        let dtype = x.dtype;
        let (beta, bias) = self.beta_bias_slots();
        let slots = RowSlots {
            skip: Some(1),
            gamma: 2,
            beta,
            bias: Some(bias),
            mean: Some(1),
            inv_std: Some(2),
            sum: Some(3),
        };
        let axis = x.rank().saturating_sub(1);
        if device == Device::Cpu && RowNormKernel::fits(&slots, axis, inputs, outputs) {
            return Ok(Box::new(RowNormKernel {
                op: self.op,
                slots,
                axis,
                epsilon: self.epsilon,
                centered: self.centered,
            }));
        }
        cpu_float_kernel!(self.op, dtype, device, T => SkipLayerNormKernel::<T> {
            op: *self,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct SkipLayerNormKernel<T> {
    op: SkipLayerNorm,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for SkipLayerNormKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.op;
        let x_t = io.input(0);
        let cols = x_t.dims().last().copied().unwrap_or(0);
        let (beta_slot, bias_slot) = self.op.beta_bias_slots();
        let (xr, skr, gr) = (
            x_t.read::<T>()?,
            io.input(1).read::<T>()?,
            io.input(2).read::<T>()?,
        );
        let br = match beta_slot {
            Some(s) => read_optional::<T>(io.input(s))?,
            None => None,
        };
        let biasr = read_optional::<T>(io.input(bias_slot))?;
        let mut yw = io.output(0).write::<T>()?;
        let mut mean_w = write_optional::<f32>(io.output(1))?;
        let mut inv_w = write_optional::<f32>(io.output(2))?;
        let mut sum_w = write_optional::<T>(io.output(3))?;
        let inputs = NormInputs {
            x: contiguous(op, "input", &xr)?,
            skip: contiguous(op, "skip", &skr)?,
            bias: optional_slice(op, "bias", &biasr)?,
            gamma: contiguous(op, "gamma", &gr)?,
            beta: optional_slice(op, "beta", &br)?,
            cols,
            epsilon: self.op.epsilon,
            centered: self.op.centered,
        };
        let outputs = NormOutputs {
            y: contiguous_mut(op, "output", &mut yw)?,
            sum: optional_slice_mut(op, "input_skip_bias_sum", &mut sum_w)?,
            mean: optional_slice_mut(op, "mean", &mut mean_w)?,
            inv_std: optional_slice_mut(op, "inv_std_var", &mut inv_w)?,
        };
        normalize_rows(op, &inputs, outputs)
    }
}
