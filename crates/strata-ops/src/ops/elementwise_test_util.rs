//! Test helper for the element-wise operators: builds an op from the registry, infers its
//! outputs, allocates them and runs the kernel, optionally in place over input 0.

use strata_core::{Device, MemoryKind, Tensor};

use crate::{build_operator, Attr, Attributes, Fact, KernelIo, OpContext, OpResult};

/// Runs `op_type` at `opset` on `inputs` (undefined tensors for omitted optional inputs).
pub fn run_op(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
) -> OpResult<Vec<Tensor>> {
    run(op_type, opset, attrs, inputs, false)
}

/// As [`run_op`], but output 0 starts as a copy of the op's in-place input and the kernel is
/// told to work in place (what the planner does when that input dies at the node).
pub fn run_op_in_place(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
) -> OpResult<Vec<Tensor>> {
    run(op_type, opset, attrs, inputs, true)
}

fn run(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
    in_place: bool,
) -> OpResult<Vec<Tensor>> {
    let mut attributes = Attributes::new(op_type);
    for (name, value) in attrs {
        attributes.insert(name, value.clone());
    }
    let op = build_operator(&OpContext {
        op_type,
        domain: "",
        opset,
        attrs: &attributes,
        num_inputs: inputs.len(),
        num_outputs: 1,
    })?;
    let facts: Vec<Fact> = inputs
        .iter()
        .map(|t| {
            if t.is_defined() {
                Fact::known(t.dtype(), t.dims())
            } else {
                Fact::absent()
            }
        })
        .collect();
    let fact_refs: Vec<&Fact> = facts.iter().collect();
    let out_facts = op.infer(&fact_refs)?;
    let out_refs: Vec<&Fact> = out_facts.iter().collect();
    let kernel = op.kernel(&fact_refs, &out_refs, Device::Cpu)?;
    let mut outputs = Vec::new();
    for (k, f) in out_facts.iter().enumerate() {
        let dims = f.concrete_or_err(op_type)?;
        let t = Tensor::empty(&dims, f.dtype, Device::Cpu, MemoryKind::Workspace)?;
        if k == 0 && in_place {
            let index = op.in_place_input().expect("the op is not in-place capable");
            // The planner shares bytes, whatever the dtypes: copy them as they are.
            let src = inputs[index].contiguous()?;
            let (r, mut w) = (src.read_bytes("test")?, t.write_bytes("test")?);
            let n = w.bytes().len().min(r.bytes().len());
            w.bytes()[..n].copy_from_slice(&r.bytes()[..n]);
        }
        outputs.push(t);
    }
    let input_refs: Vec<&Tensor> = inputs.iter().collect();
    let output_refs: Vec<&Tensor> = outputs.iter().collect();
    kernel.run(&KernelIo {
        inputs: &input_refs,
        outputs: &output_refs,
        scratch: None,
        in_place: if in_place { op.in_place_input() } else { None },
        threads: 1,
    })?;
    Ok(outputs)
}
