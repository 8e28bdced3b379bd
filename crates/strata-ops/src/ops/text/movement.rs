//! String tensors through the operators that only move elements (Identity, Reshape, Transpose,
//! Gather, Concat, Slice, Where, …). Pad is not among them: its default fill value for text,
//! the empty string, is not an element of any input.
//!
//! Such an operator never looks at an element's value, only at where it goes. So instead of a
//! text kernel per operator, [`TextMovement`] wraps the operator: each string input is replaced by
//! an int64 tensor of element ids (unique across all string inputs), the operator's own int64
//! kernel moves the ids, and the ids in its outputs are turned back into text. Numeric inputs pass
//! straight through, and so does the whole node when no input is a string.

use std::sync::Arc;

use strata_core::{DType, Device, MemoryKind, Tensor};

use crate::eval::{input_fact, run_operator, EvalOptions};
use crate::{
    Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpError, OpResult, Operator,
};

/// Which inputs of a movement operator carry data (and may be text); the others are indices,
/// shapes, axes or conditions.
#[derive(Debug, Clone, Copy)]
pub enum DataInputs {
    All,
    Only(&'static [usize]),
}

impl DataInputs {
    fn contains(self, index: usize) -> bool {
        match self {
            DataInputs::All => true,
            DataInputs::Only(list) => list.contains(&index),
        }
    }
}

/// The default-domain operators that move elements without reading them, with their data inputs.
pub const MOVEMENT_OPS: &[(&str, DataInputs)] = &[
    ("Identity", DataInputs::All),
    ("Reshape", DataInputs::Only(&[0])),
    ("Flatten", DataInputs::Only(&[0])),
    ("Squeeze", DataInputs::Only(&[0])),
    ("Unsqueeze", DataInputs::Only(&[0])),
    ("Transpose", DataInputs::Only(&[0])),
    ("Gather", DataInputs::Only(&[0])),
    ("GatherElements", DataInputs::Only(&[0])),
    ("GatherND", DataInputs::Only(&[0])),
    ("Concat", DataInputs::All),
    ("Split", DataInputs::Only(&[0])),
    ("Slice", DataInputs::Only(&[0])),
    ("Expand", DataInputs::Only(&[0])),
    ("Tile", DataInputs::Only(&[0])),
    ("Where", DataInputs::Only(&[1, 2])),
    ("Compress", DataInputs::Only(&[0])),
    ("Scatter", DataInputs::Only(&[0, 2])),
    ("ScatterElements", DataInputs::Only(&[0, 2])),
    ("ScatterND", DataInputs::Only(&[0, 2])),
    ("ReverseSequence", DataInputs::Only(&[0])),
    ("DepthToSpace", DataInputs::Only(&[0])),
    ("SpaceToDepth", DataInputs::Only(&[0])),
];

/// The data inputs of `op_type` if it is a movement operator.
pub fn movement_inputs(op_type: &str) -> Option<DataInputs> {
    MOVEMENT_OPS
        .iter()
        .find(|(name, _)| *name == op_type)
        .map(|(_, data)| *data)
}

/// A movement operator that also accepts string tensors in its data inputs.
#[derive(Debug)]
pub struct TextMovement {
    inner: Arc<dyn Operator>,
    data: DataInputs,
}

impl TextMovement {
    pub fn wrap(inner: Box<dyn Operator>, data: DataInputs) -> Box<dyn Operator> {
        Box::new(TextMovement {
            inner: inner.into(),
            data,
        })
    }
}

/// True when any input is text; then every data input must be text (ONNX gives them one type).
fn carries_text(op: &str, data: DataInputs, dtypes: &[Option<DType>]) -> OpResult<bool> {
    let text = dtypes.iter().any(|d| d.is_some_and(DType::is_string));
    if !text {
        return Ok(false);
    }
    for (index, dtype) in dtypes.iter().enumerate() {
        let Some(dtype) = *dtype else { continue };
        if data.contains(index) != dtype.is_string() {
            let expected = if data.contains(index) {
                "string (like the other data inputs)"
            } else {
                "a numeric or bool type (it is not a data input)"
            };
            return Err(OpError::DType {
                op: op.to_string(),
                index,
                expected: expected.to_string(),
                actual: dtype,
            });
        }
    }
    Ok(true)
}

/// Int64 stand-ins for the string inputs, and the text their ids index.
struct IdSubstitution {
    facts: Vec<Fact>,
    text: Vec<Box<str>>,
}

/// Replaces string facts by int64 facts; constant text becomes constant ids.
fn substitute(inputs: &[&Fact]) -> OpResult<IdSubstitution> {
    let mut text: Vec<Box<str>> = Vec::new();
    let mut facts = Vec::with_capacity(inputs.len());
    for fact in inputs {
        if !fact.is_defined() || !fact.dtype.is_string() {
            facts.push((*fact).clone());
            continue;
        }
        match &fact.value {
            Some(value) => facts.push(Fact::constant(ids_for(value, &mut text)?)),
            None => facts.push(Fact::new(DType::I64, fact.dims.clone())),
        }
    }
    Ok(IdSubstitution { facts, text })
}

/// An int64 tensor of `tensor`'s dims numbering its elements after those already in `text`.
fn ids_for(tensor: &Tensor, text: &mut Vec<Box<str>>) -> OpResult<Tensor> {
    let base = text.len() as i64;
    let ids: Vec<i64> = (base..base + tensor.numel() as i64).collect();
    text.extend(tensor.strings()?.into_iter().map(Box::from));
    Ok(Tensor::from_slice(&ids, tensor.dims())?)
}

/// Output facts: the inner op's, with int64 turned back into text.
fn outputs_as_text(op: &str, outputs: Vec<Fact>, text: &[Box<str>]) -> OpResult<Vec<Fact>> {
    outputs
        .into_iter()
        .map(|mut fact| {
            if !fact.is_defined() {
                return Ok(fact);
            }
            if fact.dtype != DType::I64 {
                return Err(OpError::kernel(
                    op,
                    format!("moving text produced a {} output", fact.dtype),
                ));
            }
            fact.value = match fact.value.take() {
                Some(ids) => Some(text_tensor(op, &ids, text)?),
                None => None,
            };
            fact.dtype = DType::String;
            Ok(fact)
        })
        .collect()
}

/// The text an id tensor stands for, with the id tensor's dims.
fn text_tensor(op: &str, ids: &Tensor, text: &[Box<str>]) -> OpResult<Tensor> {
    let elements = ids
        .to_vec::<i64>()?
        .into_iter()
        .map(|id| {
            usize::try_from(id)
                .ok()
                .and_then(|i| text.get(i))
                .map(|s| &**s)
                .ok_or_else(|| OpError::kernel(op, format!("moved element id {id} is unknown")))
        })
        .collect::<OpResult<Vec<&str>>>()?;
    Ok(Tensor::from_strings(ids.dims(), elements)?)
}

impl Operator for TextMovement {
    fn op_type(&self) -> &str {
        self.inner.op_type()
    }

    fn capabilities(&self) -> crate::OpCapabilities<'_> {
        // The numeric op's QLinear form (Concat: QLinearConcat) stays visible to the QDQ
        // pass; its inputs are then 8-bit tensors, never text.
        crate::OpCapabilities {
            qlinear: self.inner.capabilities().qlinear,
            ..crate::OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let dtypes: Vec<Option<DType>> = inputs
            .iter()
            .map(|f| f.is_defined().then_some(f.dtype))
            .collect();
        if !carries_text(self.op_type(), self.data, &dtypes)? {
            return self.inner.infer(inputs);
        }
        let sub = substitute(inputs)?;
        let refs: Vec<&Fact> = sub.facts.iter().collect();
        let outputs = self.inner.infer(&refs)?;
        outputs_as_text(self.op_type(), outputs, &sub.text)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtypes: Vec<Option<DType>> = inputs
            .iter()
            .map(|f| f.is_defined().then_some(f.dtype))
            .collect();
        if !carries_text(self.op_type(), self.data, &dtypes)? {
            return self.inner.kernel(inputs, outputs, device);
        }
        Ok(Box::new(TextMovementKernel {
            inner: self.inner.clone(),
        }))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        if inputs.iter().any(|f| f.is_defined() && f.dtype.is_string()) {
            return Ok(0); // text nodes run on the dynamic path and plan nothing
        }
        self.inner.scratch_bytes(inputs, outputs)
    }

    fn in_place_input(&self) -> Option<usize> {
        self.inner.in_place_input()
    }

    fn places_inputs_in_output(&self, inputs: &[&Fact], output: &Fact) -> Option<Vec<usize>> {
        // Text is never planned: only numeric Concats place their inputs.
        if output.dtype.is_string() {
            return None;
        }
        self.inner.places_inputs_in_output(inputs, output)
    }

    fn is_data_dependent(&self) -> bool {
        self.inner.is_data_dependent()
    }
}

/// Runs the inner operator on ids, at run time (text never lives in the arena).
#[derive(Debug)]
struct TextMovementKernel {
    inner: Arc<dyn Operator>,
}

impl Kernel for TextMovementKernel {
    fn run(&self, _io: &KernelIo<'_>) -> OpResult<()> {
        Err(OpError::kernel(
            self.inner.op_type(),
            "string outputs are made by `MakesOutputs`, not into planned memory",
        ))
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            makes_outputs: Some(self),
            ..Default::default()
        }
    }
}

impl MakesOutputs for TextMovementKernel {
    fn make_outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        self.move_text(inputs, threads)
    }
}

impl TextMovementKernel {
    fn move_text(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        let op = self.inner.op_type();
        let facts: Vec<Fact> = inputs.iter().map(|t| input_fact(t)).collect();
        let fact_refs: Vec<&Fact> = facts.iter().collect();
        let sub = substitute(&fact_refs)?;
        let id_inputs: Vec<Tensor> = sub
            .facts
            .iter()
            .map(|f| f.value.clone().unwrap_or_else(Tensor::undefined))
            .collect();
        let input_refs: Vec<&Tensor> = id_inputs.iter().collect();
        let options = EvalOptions {
            device: Device::Cpu,
            kind: MemoryKind::Workspace,
            threads,
            detach_views: false,
        };
        // Every output of the inner operator (a movement node names them all).
        let id_outputs = run_operator(&*self.inner, None, &input_refs, usize::MAX, &options)?;
        id_outputs
            .iter()
            .map(|ids| text_tensor(op, ids, &sub.text))
            .collect()
    }
}
