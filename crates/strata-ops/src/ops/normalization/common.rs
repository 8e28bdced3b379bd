//! Helpers shared by the normalization operators: input checks over facts, contiguous access to
//! kernel tensors, lane moments computed in the wide float type, and the "parameter broadcast
//! over the normalized block" rule used by LayerNormalization and RMSNormalization.

use strata_core::{DType, Element, ReadGuard, Tensor, WriteGuard};

use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{Dim, Fact, OpError, OpResult};

/// Input `index`, required, with a floating-point dtype.
pub(crate) fn float_input<'a>(op: &str, inputs: &[&'a Fact], index: usize) -> OpResult<&'a Fact> {
    let f = required(op, inputs, index)?;
    if !f.dtype.is_float() {
        return Err(OpError::DType {
            op: op.into(),
            index,
            expected: "a float type".into(),
            actual: f.dtype,
        });
    }
    Ok(f)
}

/// Checks that optional input `index`, when present, has the dtype of input 0.
pub(crate) fn same_dtype(op: &str, inputs: &[&Fact], index: usize, dtype: DType) -> OpResult<()> {
    match optional(inputs, index) {
        Some(f) if f.dtype != dtype => Err(OpError::DType {
            op: op.into(),
            index,
            expected: dtype.to_string(),
            actual: f.dtype,
        }),
        _ => Ok(()),
    }
}

/// Checks that input `index`, when present, is 1-D with `len` elements (when both are known).
pub(crate) fn check_vector(
    op: &str,
    inputs: &[&Fact],
    index: usize,
    what: &str,
    len: &Dim,
) -> OpResult<()> {
    let Some(f) = optional(inputs, index) else {
        return Ok(());
    };
    let ok = match f.dims.as_slice() {
        [d] => d.known().is_none() || len.known().is_none() || d == len,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(OpError::shape(
            op,
            format!("{what} must have dims [{len:?}], got {:?}", f.dims),
        ))
    }
}

/// Checks that a parameter (scale or bias) broadcasts over the normalized block `block`
/// (the input dims from `axis` on): after dropping leading 1s its dims must be a suffix of the
/// block's, so element `j` of a block reads parameter element `j % len`.
pub(crate) fn check_block_param(op: &str, what: &str, param: &Fact, block: &[Dim]) -> OpResult<()> {
    let first = param
        .dims
        .iter()
        .position(|d| *d != Dim::Known(1))
        .unwrap_or(param.dims.len());
    let core = &param.dims[first..];
    let fits = core.len() <= block.len()
        && core
            .iter()
            .zip(&block[block.len() - core.len()..])
            .all(|(p, b)| p.known().is_none() || b.known().is_none() || p == b);
    if fits {
        Ok(())
    } else {
        Err(OpError::shape(
            op,
            format!(
                "{what} dims {:?} do not broadcast over the normalized dims {block:?}",
                param.dims
            ),
        ))
    }
}

/// Run-time form of [`check_block_param`]: the parameter's element count, which must divide
/// the block length.
pub(crate) fn block_param_len(
    op: &str,
    what: &str,
    param: &Tensor,
    block: &[usize],
) -> OpResult<usize> {
    let dims = param.dims();
    let first = dims.iter().position(|&d| d != 1).unwrap_or(dims.len());
    let core = &dims[first..];
    if core.len() > block.len() || core != &block[block.len() - core.len()..] {
        return Err(OpError::kernel(
            op,
            format!("{what} dims {dims:?} do not broadcast over the normalized dims {block:?}"),
        ));
    }
    Ok(core.iter().product())
}

/// The elements of a read guard, which must be contiguous.
pub(crate) fn contiguous<'a, T: Element>(
    op: &str,
    what: &str,
    guard: &'a ReadGuard<'_, T>,
) -> OpResult<&'a [T]> {
    guard
        .as_slice()
        .ok_or_else(|| OpError::kernel(op, format!("{what} is not contiguous")))
}

/// The elements of a write guard, which must be contiguous.
pub(crate) fn contiguous_mut<'a, T: Element>(
    op: &str,
    what: &str,
    guard: &'a mut WriteGuard<'_, T>,
) -> OpResult<&'a mut [T]> {
    guard
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(op, format!("{what} is not contiguous")))
}

/// Mean and biased variance of `lane` (two passes, for accuracy), in the wide type.
pub(crate) fn mean_var<T: Real>(lane: &[T]) -> (T::Wide, T::Wide) {
    let n = <T::Wide as WideFloat>::lit(lane.len().max(1) as f64);
    let zero = <T::Wide as num_traits::Zero>::zero();
    let mean = lane.iter().fold(zero, |s, &x| s + x.widen()) / n;
    let var = lane.iter().fold(zero, |s, &x| {
        let d = x.widen() - mean;
        s + d * d
    }) / n;
    (mean, var)
}

/// BatchNormalization (both modes): validates X, scale, bias, mean and var (every parameter a
/// vector of the channel count) and returns X's fact.
pub(crate) fn check_batch_norm_inputs<'a>(inputs: &[&'a Fact]) -> OpResult<&'a Fact> {
    let x = required("BatchNormalization", inputs, 0)?;
    if inputs.len() < 5 || inputs[1..5].iter().any(|f| !f.is_defined()) {
        return Err(OpError::InputCount {
            op: "BatchNormalization".into(),
            expected: "5".into(),
            actual: inputs.len(),
        });
    }
    if x.rank() < 2 {
        return Err(OpError::shape(
            "BatchNormalization",
            format!("input must have rank >= 2, got {:?}", x.dims),
        ));
    }
    for (i, p) in inputs[1..5].iter().enumerate() {
        if p.rank() != 1
            || (p.dims[0].known().is_some()
                && x.dims[1].known().is_some()
                && p.dims[0] != x.dims[1])
        {
            return Err(OpError::shape(
                "BatchNormalization",
                format!(
                    "parameter {} has dims {:?}, expected [{:?}] (the channel count)",
                    i + 1,
                    p.dims,
                    x.dims[1]
                ),
            ));
        }
    }
    Ok(x)
}
