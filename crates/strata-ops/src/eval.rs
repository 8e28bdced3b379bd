//! Running one operator on concrete tensors, outside any memory plan: the one path used by
//! constant folding and shape specialization (outputs kept as weights), by the runtime's
//! data-dependent nodes (outputs made as they run) and by text movement (ids moved by the int64
//! kernel). The outputs are fresh tensors, so this path allocates.

use strata_core::{DType, Device, MemoryKind, Tensor};

use crate::{Fact, Kernel, KernelIo, OpError, OpResult, Operator};

/// Where the outputs of [`run_operator`] live and how the kernel runs.
#[derive(Debug, Clone, Copy)]
pub struct EvalOptions {
    pub device: Device,
    /// Memory kind of the outputs made here (scratch is always `Workspace`).
    pub kind: MemoryKind,
    /// Intra-op threads the kernel may use.
    pub threads: usize,
    /// Copy outputs that inference computed from the inputs (Reshape, Squeeze: often views of an
    /// input) into memory of their own. Needed when the inputs live in memory that is reused
    /// later (an arena); not for constants, which would only be copied.
    pub detach_views: bool,
}

/// Runs `op` on `inputs` (undefined tensors for omitted optional inputs) and returns its first
/// `outputs` outputs (fewer only if a kernel that makes its own outputs returns fewer).
///
/// `kernel` is the one already chosen for these inputs (a planned node's); without it one is
/// chosen here. A kernel that makes its own outputs (control flow, text) is asked first; else
/// outputs inference computes need no run; else outputs are allocated at their inferred dims and
/// the kernel runs into them.
pub fn run_operator(
    op: &dyn Operator,
    kernel: Option<&dyn Kernel>,
    inputs: &[&Tensor],
    outputs: usize,
    options: &EvalOptions,
) -> OpResult<Vec<Tensor>> {
    if let Some(maker) = kernel.and_then(|k| k.capabilities().makes_outputs) {
        // Control flow: only running it tells the output dims, so it runs before inference.
        return maker.make_outputs(inputs, options.threads);
    }
    let facts: Vec<Fact> = inputs.iter().map(|t| input_fact(t)).collect();
    let fact_refs: Vec<&Fact> = facts.iter().collect();
    let mut out_facts = op.infer(&fact_refs)?;
    out_facts.truncate(outputs);
    if out_facts.iter().all(|f| f.value.is_some()) {
        // Shape, Constant, Reshape of known values: inference computed them.
        return out_facts
            .into_iter()
            .filter_map(|f| f.value)
            .map(|v| match options.detach_views {
                true => Ok(v.detached(options.device, options.kind)?),
                false => Ok(v),
            })
            .collect();
    }
    let out_refs: Vec<&Fact> = out_facts.iter().collect();
    let chosen;
    let kernel = match kernel {
        Some(k) => k,
        None => {
            chosen = op.kernel(&fact_refs, &out_refs, options.device)?;
            if let Some(maker) = chosen.capabilities().makes_outputs {
                return maker.make_outputs(inputs, options.threads);
            }
            chosen.as_ref()
        }
    };
    let made = out_facts
        .iter()
        .map(|f| {
            let dims = f.concrete().ok_or_else(|| {
                OpError::shape(
                    op.op_type(),
                    format!("output dims {:?} are not known from the inputs", f.dims),
                )
            })?;
            Ok(Tensor::empty(&dims, f.dtype, options.device, options.kind)?)
        })
        .collect::<OpResult<Vec<Tensor>>>()?;
    if outputs_are_empty(&made) {
        return Ok(made);
    }
    let scratch_bytes = op.scratch_bytes(&fact_refs, &out_refs)?;
    let scratch = (scratch_bytes > 0)
        .then(|| {
            Tensor::empty(
                &[scratch_bytes],
                DType::U8,
                options.device,
                MemoryKind::Workspace,
            )
        })
        .transpose()?;
    let made_refs: Vec<&Tensor> = made.iter().collect();
    kernel.run(&KernelIo {
        inputs,
        outputs: &made_refs,
        scratch: scratch.as_ref(),
        in_place: None,
        threads: options.threads,
    })?;
    Ok(made)
}

/// Whether a node has outputs and every one of them holds no elements: then there is nothing to
/// compute, and the kernel is not run (kernels need not guard against the zero-length rows and
/// chunks such nodes would hand them).
pub fn outputs_are_empty(outputs: &[Tensor]) -> bool {
    !outputs.is_empty() && outputs.iter().all(|t| t.is_defined() && t.numel() == 0)
}

/// The fact of a concrete input: its value, or absent for an omitted optional input.
pub fn input_fact(tensor: &Tensor) -> Fact {
    if tensor.is_defined() {
        Fact::constant(tensor.clone())
    } else {
        Fact::absent()
    }
}
