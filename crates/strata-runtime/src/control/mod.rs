//! Control flow (If, Loop, Scan): operators whose bodies are subgraphs run by this runtime,
//! each planned once as its own `InferencePlan` with its own arena.
//!
//! The importer turns every subgraph into a [`Subgraph`] whose inputs are its formal inputs
//! followed by the outer values it reads (captures); the node lists those captures as extra
//! inputs, so the outer plan sees every dependency and keeps the values alive.

mod if_op;
mod loop_op;
mod scan_op;
mod stack;
mod subgraph;

pub use if_op::If;
pub use loop_op::Loop;
pub use scan_op::Scan;
pub use subgraph::{Subgraph, SubgraphRunner};

use strata_core::{DType, Tensor};
use strata_ops::{Fact, KernelIo, OpError, OpResult};

/// The facts of the node inputs `range` (captures; constants keep their values), absent ones
/// rejected.
fn capture_facts(op: &str, inputs: &[&Fact], range: std::ops::Range<usize>) -> OpResult<Vec<Fact>> {
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
fn copy_into(io: &KernelIo<'_>, outputs: &[Tensor]) -> OpResult<()> {
    for (dst, src) in io.outputs.iter().zip(outputs) {
        dst.copy_from(src)?;
    }
    Ok(())
}

/// Reads a scalar (or one-element) bool or integer tensor, node input `index`, as a condition.
fn read_condition(op: &str, what: &str, index: usize, t: &Tensor) -> OpResult<bool> {
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
