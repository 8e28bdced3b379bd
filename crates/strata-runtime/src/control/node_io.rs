//! What the control-flow kernels share at their node's boundary: the facts of captured outer
//! values, a condition input read as a bool, and body outputs copied into planned outputs.

use strata_core::{DType, Tensor};
use strata_ops::{Fact, KernelIo, OpError, OpResult};

/// The facts of the node inputs `range` (captures; constants keep their values), absent ones
/// rejected.
pub(super) fn capture_facts(
    op: &str,
    inputs: &[&Fact],
    range: std::ops::Range<usize>,
) -> OpResult<Vec<Fact>> {
    range
        .map(|i| match inputs.get(i) {
            Some(f) if f.is_defined() => Ok((*f).clone()),
            _ => Err(OpError::shape(
                op,
                format!("captured outer value (input {i}) is missing"),
            )),
        })
        .collect()
}

/// Copies outputs computed by running a body into the node's planned outputs.
pub(super) fn copy_into(io: &KernelIo<'_>, outputs: &[Tensor]) -> OpResult<()> {
    for (dst, src) in io.outputs.iter().zip(outputs) {
        dst.copy_from(src)?;
    }
    Ok(())
}

/// Reads a scalar (or one-element) bool or integer tensor, node input `index`, as a condition.
pub(super) fn read_condition(op: &str, what: &str, index: usize, t: &Tensor) -> OpResult<bool> {
    if t.numel() != 1 {
        return Err(OpError::shape(
            op,
            format!("{what} must hold one element, got dims {:?}", t.dims()),
        ));
    }
    Ok(match t.dtype() {
        DType::Bool => t.to_bools()?[0],
        DType::U8 => t.to_vec::<u8>()?[0] != 0,
        DType::I32 => t.to_vec::<i32>()?[0] != 0,
        DType::I64 => t.to_vec::<i64>()?[0] != 0,
        other => {
            return Err(OpError::DType {
                op: op.to_string(),
                index,
                expected: "bool".into(),
                actual: other,
            })
        }
    })
}
