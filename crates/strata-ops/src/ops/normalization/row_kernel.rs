//! The f32 kernel every last-axes normalization shares (LayerNormalization, RMSNormalization,
//! SimplifiedLayerNormalization, com.microsoft SkipLayerNormalization and its simplified form):
//! where each operator keeps its inputs and outputs, then one call to the vectorized, threaded
//! [`norm_rows`] kernel. Operators pick it at plan time when their parameters cover the whole
//! normalized block and every statistics output is f32; otherwise their generic kernel runs.

use strata_core::{DType, ReadGuard, Tensor, WriteGuard};

use super::common::{contiguous, contiguous_mut};
use crate::kernels::norm::{norm_rows, NormOut, NormRows};
use crate::{Dim, Fact, Kernel, KernelIo, OpError, OpResult};

/// Input and output slots of one operator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowSlots {
    pub skip: Option<usize>,
    pub gamma: usize,
    pub beta: Option<usize>,
    pub bias: Option<usize>,
    pub mean: Option<usize>,
    pub inv_std: Option<usize>,
    pub sum: Option<usize>,
}

#[derive(Debug)]
pub(crate) struct RowNormKernel {
    pub op: &'static str,
    pub slots: RowSlots,
    /// The first normalized axis (all after it are normalized too).
    pub axis: usize,
    pub epsilon: f32,
    pub centered: bool,
}

impl RowNormKernel {
    /// This kernel for the facts, when it computes what the operator asks: f32 data, gamma,
    /// beta and bias of exactly the block's size, f32 statistics outputs.
    pub(crate) fn fits(slots: &RowSlots, axis: usize, inputs: &[&Fact], outputs: &[&Fact]) -> bool {
        let Some(x) = inputs.first() else {
            return false;
        };
        if x.dtype != DType::F32 || axis >= x.rank() {
            return false;
        }
        let block = x.dims[axis..]
            .iter()
            .map(Dim::known)
            .product::<Option<usize>>();
        let Some(block) = block else {
            return false;
        };
        let vector_ok = |slot: Option<usize>, required: bool| match slot
            .and_then(|s| inputs.get(s))
            .filter(|f| f.is_defined())
        {
            Some(f) => f.dtype == DType::F32 && f.numel() == Some(block),
            None => !required,
        };
        let outputs_ok = [slots.mean, slots.inv_std].into_iter().flatten().all(|s| {
            outputs
                .get(s)
                .is_none_or(|f| !f.is_defined() || f.dtype == DType::F32)
        });
        vector_ok(Some(slots.gamma), true)
            && vector_ok(slots.beta, false)
            && vector_ok(slots.bias, false)
            && outputs_ok
    }
}

/// Input `slot` when the operator has one there and the node fills it.
fn optional_input<'a>(io: &KernelIo<'a>, slot: Option<usize>) -> Option<&'a Tensor> {
    slot.map(|s| io.input(s)).filter(|t| t.is_defined())
}

fn optional_output<'a>(io: &KernelIo<'a>, slot: Option<usize>) -> Option<&'a Tensor> {
    slot.map(|s| io.output(s)).filter(|t| t.is_defined())
}

fn read(t: Option<&Tensor>) -> OpResult<Option<ReadGuard<'_, f32>>> {
    Ok(t.map(|t| t.read::<f32>()).transpose()?)
}

fn write(t: Option<&Tensor>) -> OpResult<Option<WriteGuard<'_, f32>>> {
    Ok(t.map(|t| t.write::<f32>()).transpose()?)
}

fn slice<'a>(op: &str, what: &str, g: &'a Option<ReadGuard<'_, f32>>) -> OpResult<&'a [f32]> {
    match g {
        Some(g) => contiguous(op, what, g),
        None => Ok(&[]),
    }
}

fn slice_mut<'a>(
    op: &str,
    what: &str,
    g: &'a mut Option<WriteGuard<'_, f32>>,
) -> OpResult<Option<&'a mut [f32]>> {
    g.as_mut().map(|g| contiguous_mut(op, what, g)).transpose()
}

impl Kernel for RowNormKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op;
        let s = &self.slots;
        let x = io.input(0);
        if self.axis >= x.rank() {
            return Err(OpError::kernel(op, "the normalized axis is past the rank"));
        }
        let cols: usize = x.dims()[self.axis..].iter().product();
        let xr = x.read::<f32>()?;
        let gr = io.input(s.gamma).read::<f32>()?;
        let (skr, br, biasr) = (
            read(optional_input(io, s.skip))?,
            read(optional_input(io, s.beta))?,
            read(optional_input(io, s.bias))?,
        );
        let mut yw = io.output(0).write::<f32>()?;
        let mut mean_w = write(optional_output(io, s.mean))?;
        let mut inv_w = write(optional_output(io, s.inv_std))?;
        let mut sum_w = write(optional_output(io, s.sum))?;
        let rows = NormRows {
            x: contiguous(op, "input", &xr)?,
            skip: slice(op, "skip", &skr)?,
            bias: slice(op, "bias", &biasr)?,
            gamma: contiguous(op, "gamma", &gr)?,
            beta: slice(op, "beta", &br)?,
            cols,
            epsilon: self.epsilon,
            centered: self.centered,
        };
        let out = NormOut {
            y: contiguous_mut(op, "output", &mut yw)?,
            sum: slice_mut(op, "sum", &mut sum_w)?,
            mean: slice_mut(op, "mean", &mut mean_w)?,
            inv_std: slice_mut(op, "inv_std", &mut inv_w)?,
        };
        norm_rows(&rows, out).map_err(|e| OpError::kernel(op, e.to_string()))
    }
}
