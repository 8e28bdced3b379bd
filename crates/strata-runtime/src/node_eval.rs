//! Runs one graph node outside the memory plan, through strata-ops' one "run this operator on
//! these tensors" path ([`strata_ops::eval`]), naming the node in any error. Used to fold
//! constants, to evaluate shape computations while specializing and for data-dependent nodes at
//! run time.

use strata_core::{Device, MemoryKind, Tensor};
use strata_ops::eval::{run_operator, EvalOptions};
use strata_ops::{Kernel, OpError};

use crate::{Node, Result, RuntimeError};

/// Runs `node` on `inputs` (undefined tensors for omitted optional inputs), with `kernel` when
/// the plan chose one; returns one fresh tensor per output the node lists.
pub fn eval_node(
    node: &Node,
    kernel: Option<&dyn Kernel>,
    inputs: &[&Tensor],
    options: &EvalOptions,
) -> Result<Vec<Tensor>> {
    let wrap = |source: OpError| {
        RuntimeError::node(
            &node.name,
            node.op.op_type(),
            inputs.iter().map(|t| t.dims().to_vec()).collect(),
            source,
        )
    };
    let op = node.op.as_ref();
    let outputs = run_operator(op, kernel, inputs, node.outputs.len(), options).map_err(wrap)?;
    if outputs.len() < node.outputs.len() {
        return Err(wrap(OpError::shape(
            op.op_type(),
            format!(
                "produced {} outputs but the node names {}",
                outputs.len(),
                node.outputs.len()
            ),
        )));
    }
    Ok(outputs)
}

/// How constants are evaluated at plan time: on the host, kept in `Persistent` memory, views of
/// weights kept as views (the weights outlive the plan).
pub fn constant_options(threads: usize) -> EvalOptions {
    EvalOptions {
        device: Device::Cpu,
        kind: MemoryKind::Persistent,
        threads,
        detach_views: false,
    }
}
