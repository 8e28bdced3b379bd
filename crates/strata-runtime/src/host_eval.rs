//! Evaluates one operator eagerly on host tensors, allocating its outputs. Used to fold
//! constants at plan time, to propagate shape computations when specializing, and for
//! data-dependent nodes at run time.

use strata_core::{DType, Device, MemoryKind, Tensor};
use strata_ops::{Fact, KernelIo, OpError, Operator};

use crate::{Result, RuntimeError};

/// Runs `op` on `inputs` (undefined tensors for omitted optional inputs); outputs are fresh
/// tensors of `kind`.
pub fn eval_on_host(
    node: &str,
    op: &dyn Operator,
    inputs: &[&Tensor],
    kind: MemoryKind,
    threads: usize,
) -> Result<Vec<Tensor>> {
    let wrap = |source: OpError| {
        RuntimeError::node(
            node,
            op.op_type(),
            inputs.iter().map(|t| t.dims().to_vec()).collect(),
            source,
        )
    };
    let facts: Vec<Fact> = inputs
        .iter()
        .map(|t| {
            if t.is_defined() {
                Fact::constant((*t).clone())
            } else {
                Fact::absent()
            }
        })
        .collect();
    let fact_refs: Vec<&Fact> = facts.iter().collect();
    let out_facts = op.infer(&fact_refs).map_err(wrap)?;
    // Ops that compute their value during inference (Shape, Constant, Reshape of a constant)
    // need no kernel run.
    if out_facts.iter().all(|f| f.value.is_some()) {
        return Ok(out_facts.into_iter().filter_map(|f| f.value).collect());
    }
    let out_refs: Vec<&Fact> = out_facts.iter().collect();
    if out_facts
        .iter()
        .any(|f| f.concrete().is_none() || f.dtype.is_string())
    {
        // Control flow: only running it tells the output dims. Text: it has no planned memory.
        let kernel = op
            .kernel(&fact_refs, &out_refs, Device::Cpu)
            .map_err(wrap)?;
        if let Some(maker) = kernel.capabilities().makes_outputs {
            return maker.make_outputs(inputs, threads).map_err(wrap);
        }
    }
    let mut outputs = Vec::with_capacity(out_facts.len());
    for f in &out_facts {
        let dims = f.concrete().ok_or_else(|| {
            wrap(OpError::shape(
                op.op_type(),
                format!("output dims {:?} are not known", f.dims),
            ))
        })?;
        outputs.push(Tensor::empty(&dims, f.dtype, Device::Cpu, kind)?);
    }
    let kernel = op
        .kernel(&fact_refs, &out_refs, Device::Cpu)
        .map_err(wrap)?;
    let scratch_bytes = op.scratch_bytes(&fact_refs, &out_refs).map_err(wrap)?;
    let scratch = if scratch_bytes > 0 {
        Some(Tensor::empty(
            &[scratch_bytes],
            DType::U8,
            Device::Cpu,
            MemoryKind::Workspace,
        )?)
    } else {
        None
    };
    let output_refs: Vec<&Tensor> = outputs.iter().collect();
    let io = KernelIo {
        inputs,
        outputs: &output_refs,
        scratch: scratch.as_ref(),
        in_place: None,
        threads,
    };
    kernel.run(&io).map_err(wrap)?;
    Ok(outputs)
}
