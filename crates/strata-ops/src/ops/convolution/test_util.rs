//! Test harness for the spatial family: builds an operator through the registry, infers from the
//! inputs (as constants when asked, like the runtime's dynamic path), plans scratch and runs.

use strata_core::{Device, Tensor};

use crate::{build_operator, Attr, Attributes, Fact, KernelIo, OpContext, OpResult};

/// Runs `op_type` at `opset` on `inputs` (undefined tensors stand for omitted optional inputs).
/// With `as_constants`, inputs are given to `infer` with their values (value-dependent dims).
pub(crate) fn run_op(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
    as_constants: bool,
) -> OpResult<Tensor> {
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
        .map(|t| match (t.is_defined(), as_constants) {
            (false, _) => Fact::absent(),
            (true, true) => Fact::constant(t.clone()),
            (true, false) => Fact::known(t.dtype(), t.dims()),
        })
        .collect();
    let fact_refs: Vec<&Fact> = facts.iter().collect();
    let out_fact = op.infer(&fact_refs)?.remove(0);
    let dims = out_fact.concrete().expect("known output dims");
    let out = Tensor::zeros(&dims, out_fact.dtype)?;
    let scratch_len = op.scratch_bytes(&fact_refs, &[&out_fact])?;
    let scratch = Tensor::zeros(&[scratch_len], strata_core::DType::U8)?;
    let kernel = op.kernel(&fact_refs, &[&out_fact], Device::Cpu)?;
    let input_refs: Vec<&Tensor> = inputs.iter().collect();
    // Run single- and multi-threaded over an all-ones-bits output (NaN for floats): the kernel
    // must write every element itself.
    for threads in [1, 3] {
        out.write_bytes("test")?.bytes().fill(0xFF);
        kernel.run(&KernelIo {
            inputs: &input_refs,
            outputs: &[&out],
            scratch: (scratch_len > 0).then_some(&scratch),
            in_place: None,
            threads,
        })?;
    }
    Ok(out)
}

/// Asserts `actual ≈ expected` (relative 1e-5, absolute near zero).
#[track_caller]
pub(crate) fn assert_close(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len(), "length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = a == e || (a - e).abs() <= 1e-5 * e.abs().max(1.0);
        assert!(ok, "element {i}: got {a}, expected {e}");
    }
}
