//! The operator unit tests' harness: builds an op from the registry (op type, opset, attributes,
//! input and output counts), infers its outputs, allocates them, plans its scratch and runs the
//! kernel the way the runtime does, then returns the outputs. Optionally the inputs are seen as
//! plan-time constants, output 0 works in place over the op's in-place input, or the kernel runs
//! with one and with three threads over poisoned outputs (it must write every element itself).
//! Also: the float comparisons the tests share; the seeded PRNG is in `rng.rs`.

use strata_core::{DType, Device, MemoryKind, Tensor};

use crate::{build_operator, Attr, Attributes, Fact, KernelIo, OpContext, OpResult};

/// One operator run under test; [`OpRun::run`] executes it.
pub(crate) struct OpRun<'a> {
    op_type: &'a str,
    domain: &'a str,
    opset: i64,
    attrs: Vec<(&'a str, Attr)>,
    num_outputs: usize,
    constant_inputs: bool,
    in_place: bool,
    checked_writes: bool,
}

impl<'a> OpRun<'a> {
    /// `op_type` of the default domain at `opset`, no attributes, one output.
    pub(crate) fn new(op_type: &'a str, opset: i64) -> Self {
        OpRun {
            op_type,
            domain: "",
            opset,
            attrs: Vec::new(),
            num_outputs: 1,
            constant_inputs: false,
            in_place: false,
            checked_writes: false,
        }
    }

    /// The node's domain (the default ONNX domain unless set).
    pub(crate) fn domain(mut self, domain: &'a str) -> Self {
        self.domain = domain;
        self
    }

    /// Adds attributes.
    pub(crate) fn attrs(mut self, attrs: &[(&'a str, Attr)]) -> Self {
        self.attrs.extend(attrs.iter().cloned());
        self
    }

    /// Adds every attribute of `attributes`.
    pub(crate) fn attributes(mut self, attributes: &'a Attributes) -> Self {
        for name in attributes.names() {
            if let Some(value) = attributes.get(name) {
                self.attrs.push((name, value.clone()));
            }
        }
        self
    }

    /// How many outputs the node lists (the op's outputs beyond it are not allocated).
    pub(crate) fn outputs(mut self, num_outputs: usize) -> Self {
        self.num_outputs = num_outputs;
        self
    }

    /// The inputs' values are known at plan time (facts carry them), as for initializers.
    pub(crate) fn constant_inputs(mut self) -> Self {
        self.constant_inputs = true;
        self
    }

    /// Output 0 starts as a copy of the op's in-place input and the kernel is told to work in
    /// place (what the planner does when that input dies at the node).
    pub(crate) fn in_place(mut self) -> Self {
        self.in_place = true;
        self
    }

    /// Runs the kernel with 1 and then 3 threads, each time over outputs whose bytes are all ones
    /// (NaN for floats): a kernel that skips an element, or splits work wrongly, shows.
    pub(crate) fn checked_writes(mut self) -> Self {
        self.checked_writes = true;
        self
    }

    /// Runs the op on `inputs` (undefined tensors for omitted optional inputs).
    pub(crate) fn run(&self, inputs: &[Tensor]) -> OpResult<Vec<Tensor>> {
        let mut attributes = Attributes::new(self.op_type);
        for (name, value) in &self.attrs {
            attributes.insert(name, value.clone());
        }
        let op = build_operator(&OpContext {
            op_type: self.op_type,
            domain: self.domain,
            opset: self.opset,
            attrs: &attributes,
            num_inputs: inputs.len(),
            num_outputs: self.num_outputs,
        })?;
        let facts: Vec<Fact> = inputs
            .iter()
            .map(|t| match (t.is_defined(), self.constant_inputs) {
                (false, _) => Fact::absent(),
                (true, true) => Fact::constant(t.clone()),
                (true, false) => Fact::known(t.dtype(), t.dims()),
            })
            .collect();
        let fact_refs: Vec<&Fact> = facts.iter().collect();
        let mut out_facts = op.infer(&fact_refs)?;
        out_facts.truncate(self.num_outputs);
        let out_refs: Vec<&Fact> = out_facts.iter().collect();
        let kernel = op.kernel(&fact_refs, &out_refs, Device::Cpu)?;
        let in_place = if self.in_place {
            Some(op.in_place_input().expect("the op is not in-place capable"))
        } else {
            None
        };
        let mut outputs = Vec::with_capacity(out_facts.len());
        for (k, fact) in out_facts.iter().enumerate() {
            let t = Tensor::zeros(&fact.concrete_or_err(self.op_type)?, fact.dtype)?;
            if let (0, Some(index)) = (k, in_place) {
                // The planner shares bytes, whatever the dtypes: copy them as they are.
                let src = inputs[index].contiguous()?;
                let (r, mut w) = (src.read_bytes("test")?, t.write_bytes("test")?);
                let n = w.bytes().len().min(r.bytes().len());
                w.bytes()[..n].copy_from_slice(&r.bytes()[..n]);
            }
            outputs.push(t);
        }
        let scratch_bytes = op.scratch_bytes(&fact_refs, &out_refs)?;
        let scratch = (scratch_bytes > 0)
            .then(|| {
                Tensor::empty(
                    &[scratch_bytes],
                    DType::U8,
                    Device::Cpu,
                    MemoryKind::Workspace,
                )
            })
            .transpose()?;
        let input_refs: Vec<&Tensor> = inputs.iter().collect();
        let output_refs: Vec<&Tensor> = outputs.iter().collect();
        let thread_counts: &[usize] = if self.checked_writes { &[1, 3] } else { &[1] };
        for &threads in thread_counts {
            if self.checked_writes && in_place.is_none() {
                for t in &outputs {
                    t.write_bytes("test")?.bytes().fill(0xFF);
                }
            }
            kernel.run(&KernelIo {
                inputs: &input_refs,
                outputs: &output_refs,
                scratch: scratch.as_ref(),
                in_place,
                threads,
            })?;
        }
        Ok(outputs)
    }
}

/// Runs `op_type` at `opset` on `inputs` with one output.
pub(crate) fn run_op(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
) -> OpResult<Vec<Tensor>> {
    OpRun::new(op_type, opset).attrs(attrs).run(inputs)
}

/// As [`run_op`], working in place over the op's in-place input.
pub(crate) fn run_op_in_place(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
) -> OpResult<Vec<Tensor>> {
    OpRun::new(op_type, opset)
        .attrs(attrs)
        .in_place()
        .run(inputs)
}

/// Runs `op_type` at `opset` on `inputs` with `num_outputs` outputs.
pub(crate) fn run_outputs(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
    num_outputs: usize,
) -> OpResult<Vec<Tensor>> {
    OpRun::new(op_type, opset)
        .attrs(attrs)
        .outputs(num_outputs)
        .run(inputs)
}

/// Runs a one-output op with [`OpRun::checked_writes`], the inputs seen as plan-time constants
/// when `constant_inputs` is set; returns output 0.
pub(crate) fn run_checked(
    op_type: &str,
    opset: i64,
    attrs: &[(&str, Attr)],
    inputs: &[Tensor],
    constant_inputs: bool,
) -> OpResult<Tensor> {
    let run = OpRun::new(op_type, opset).attrs(attrs).checked_writes();
    let run = if constant_inputs {
        run.constant_inputs()
    } else {
        run
    };
    Ok(run.run(inputs)?.remove(0))
}

/// Runs a one-output op with every present input a plan-time constant (`None` for an omitted
/// optional input); returns output 0.
pub(crate) fn run_constant(
    op_type: &str,
    opset: i64,
    attrs: Attributes,
    inputs: &[Option<Tensor>],
) -> OpResult<Tensor> {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.clone().unwrap_or_else(Tensor::undefined))
        .collect();
    let out = OpRun::new(op_type, opset)
        .attributes(&attrs)
        .constant_inputs()
        .run(&inputs)?;
    Ok(out.into_iter().next().expect("one output"))
}

/// Asserts `actual ≈ expected` elementwise (relative tolerance 1e-5, absolute near zero).
#[track_caller]
pub(crate) fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_close_within(actual, expected, 1e-5, what);
}

/// Asserts `actual ≈ expected` elementwise within relative `tolerance` (absolute near zero);
/// NaN matches NaN.
#[track_caller]
pub(crate) fn assert_close_within(actual: &[f32], expected: &[f32], tolerance: f32, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok =
            (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= tolerance * e.abs().max(1.0);
        assert!(ok, "{what}: element {i}: got {a}, expected {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_multi_output_ops_with_planned_scratch() {
        // TopK has two outputs; Einsum asks for scratch and fails without it.
        let x = Tensor::from_slice(&[3.0f32, 1.0, 2.0], &[3]).unwrap();
        let k = Tensor::from_slice(&[2i64], &[1]).unwrap();
        let out = OpRun::new("TopK", 11)
            .outputs(2)
            .constant_inputs()
            .run(&[x, k])
            .unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [3.0, 2.0]);
        assert_eq!(out[1].to_vec::<i64>().unwrap(), [0, 2]);
        let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let trace = run_op(
            "Einsum",
            12,
            &[("equation", Attr::String("ii->".into()))],
            &[a],
        )
        .unwrap();
        assert_eq!(trace[0].to_vec::<f32>().unwrap(), [5.0]);
    }

    #[test]
    fn in_place_runs_over_the_input_and_errors_pass_through() {
        let x = Tensor::from_slice(&[-1.0f32, 2.0], &[2]).unwrap();
        let y = run_op_in_place("Relu", 14, &[], &[x]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [0.0, 2.0]);
        assert!(run_op("NoSuchOp", 14, &[], &[]).is_err());
    }
}
