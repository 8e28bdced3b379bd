//! Static sequences: the sequence operators (SequenceEmpty, SequenceConstruct, SequenceInsert,
//! SequenceErase, SequenceAt, SequenceLength, ConcatFromSequence, SplitToSequence) are resolved
//! while importing, when every position and length is known then (constant positions, split
//! sizes and dims declared by the model). A sequence value becomes the list of its tensors'
//! values, and the operators become plain tensor nodes (Identity, Concat, Unsqueeze, Split,
//! Squeeze, Constant), so the plan stays fully static. Sequences whose structure depends on run
//! time data (a loop growing one, a computed position) are reported as unsupported.

use std::sync::Arc;

use strata_core::Tensor;
use strata_ops::{build_operator, Attr, Attributes, Dim, OpContext, OpError};
use strata_runtime::{ValueId, ValueSource};

use super::graph_builder::GraphBuilder;
use crate::proto::NodeProto;
use crate::{OnnxError, Result};

/// The most tensors one sequence value may unroll into.
const MAX_SEQUENCE_PARTS: usize = 4096;

/// Sequence op types of the default domain resolved here.
pub(crate) fn is_sequence_op(op_type: &str) -> bool {
    matches!(
        op_type,
        "SequenceEmpty"
            | "SequenceConstruct"
            | "SequenceInsert"
            | "SequenceErase"
            | "SequenceAt"
            | "SequenceLength"
            | "ConcatFromSequence"
            | "SplitToSequence"
    )
}

/// Resolves one sequence node into the builder: new sequence values, or tensor nodes.
pub(crate) fn lower_sequence_op(
    b: &mut GraphBuilder,
    node: &NodeProto,
    attrs: &Attributes,
) -> Result<()> {
    let op_type = node.op_type.as_deref().unwrap_or("");
    let name = node.name.clone().unwrap_or_default();
    let err =
        |message: String| OnnxError::operator(&name, op_type, OpError::shape(op_type, message));
    let unsupported = |why: &str| {
        let source = OpError::Unsupported {
            op_type: format!("{op_type} ({why})"),
            domain: String::new(),
            opset: 0,
        };
        OnnxError::operator(&name, op_type, source)
    };
    let input = |k: usize| node.input.get(k).filter(|s| !s.is_empty());
    let output = node
        .output
        .first()
        .ok_or_else(|| err("the node has no output".into()))?
        .clone();
    let sequence = |b: &GraphBuilder, k: usize| -> Result<Vec<ValueId>> {
        let n = input(k).ok_or_else(|| err(format!("input {k} (a sequence) is missing")))?;
        b.sequence(n)
            .ok_or_else(|| unsupported("its sequence input is not built by sequence operators"))
    };
    let position = |b: &mut GraphBuilder, k: usize, len: usize, insert: bool| -> Result<usize> {
        let Some(n) = input(k) else {
            return Ok(if insert { len } else { len.saturating_sub(1) });
        };
        let t = b
            .constant(n)
            .ok_or_else(|| unsupported("a position computed at run time"))?;
        let p = t
            .to_vec::<i64>()
            .or_else(|_| {
                t.to_vec::<i32>()
                    .map(|v| v.into_iter().map(i64::from).collect())
            })
            .map_err(|e| err(format!("position: {e}")))?;
        let p = *p
            .first()
            .ok_or_else(|| err("the position is empty".into()))?;
        let bound = len as i64 + i64::from(insert);
        let q = if p < 0 { p + len as i64 } else { p };
        if !(0..bound).contains(&q) {
            return Err(err(format!(
                "position {p} out of range for a sequence of {len}"
            )));
        }
        Ok(q as usize)
    };
    match op_type {
        "SequenceEmpty" => b.set_sequence(&output, Vec::new()),
        "SequenceConstruct" => {
            let items = node
                .input
                .iter()
                .map(|n| {
                    b.resolve(n)
                        .ok_or_else(|| err(format!("reads {n:?}, which nothing produces")))
                })
                .collect::<Result<Vec<_>>>()?;
            b.set_sequence(&output, items);
        }
        "SequenceInsert" => {
            let mut items = sequence(b, 0)?;
            let t = input(1).ok_or_else(|| err("the tensor to insert is missing".into()))?;
            let t = b
                .resolve(t)
                .ok_or_else(|| err(format!("reads {t:?}, which nothing produces")))?;
            let at = position(b, 2, items.len(), true)?;
            items.insert(at, t);
            b.set_sequence(&output, items);
        }
        "SequenceErase" => {
            let mut items = sequence(b, 0)?;
            if items.is_empty() {
                return Err(err("erasing from an empty sequence".into()));
            }
            let at = position(b, 1, items.len(), false)?;
            items.remove(at);
            b.set_sequence(&output, items);
        }
        "SequenceAt" => {
            let items = sequence(b, 0)?;
            let at = position(b, 1, items.len(), false)?;
            if items.is_empty() {
                return Err(err("reading from an empty sequence".into()));
            }
            b.add_tensor_node(
                &name,
                "Identity",
                Attributes::new("Identity"),
                &[items[at]],
                &[&output],
            )
            .map_err(|e| err(e.to_string()))?;
        }
        "SequenceLength" => {
            let len = sequence(b, 0)?.len() as i64;
            let value = Tensor::scalar(len).map_err(|e| err(e.to_string()))?;
            let attrs = Attributes::new("Constant").with("value", Attr::Tensor(value));
            b.add_tensor_node(&name, "Constant", attrs, &[], &[&output])
                .map_err(|e| err(e.to_string()))?;
        }
        "ConcatFromSequence" => {
            let items = sequence(b, 0)?;
            if items.is_empty() {
                return Err(err("concatenating an empty sequence".into()));
            }
            let axis = attrs
                .int("axis")
                .map_err(|e| err(e.to_string()))?
                .ok_or_else(|| err("attribute `axis` is required".into()))?;
            let new_axis = attrs
                .int_or("new_axis", 0)
                .map_err(|e| err(e.to_string()))?
                == 1;
            let (parts, concat_axis) = if new_axis {
                // The new axis counts in the output's rank: -1 appends.
                let rank = b
                    .rank(items[0])
                    .ok_or_else(|| unsupported("new_axis over tensors of unknown rank"))?;
                let at = if axis < 0 {
                    axis + rank as i64 + 1
                } else {
                    axis
                };
                let parts = items
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| {
                        let out = format!("{output}:unsqueezed{k}");
                        let attrs = Attributes::new("Unsqueeze").with("axes", Attr::Ints(vec![at]));
                        b.add_tensor_node(&out, "Unsqueeze", attrs, &[v], &[&out])
                            .map(|ids| ids[0])
                            .map_err(|e| err(e.to_string()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                (parts, at)
            } else {
                (items, axis)
            };
            let attrs = Attributes::new("Concat").with("axis", Attr::Int(concat_axis));
            b.add_tensor_node(&name, "Concat", attrs, &parts, &[&output])
                .map_err(|e| err(e.to_string()))?;
        }
        "SplitToSequence" => {
            let x_name = input(0).ok_or_else(|| err("input 0 is missing".into()))?;
            let x = b
                .resolve(x_name)
                .ok_or_else(|| err(format!("reads {x_name:?}, which nothing produces")))?;
            let rank = b
                .rank(x)
                .ok_or_else(|| unsupported("an input of unknown rank"))?;
            let axis = attrs.int_or("axis", 0).map_err(|e| err(e.to_string()))?;
            let axis = if axis < 0 { axis + rank as i64 } else { axis };
            if !(0..rank as i64).contains(&axis) {
                return Err(err(format!("axis out of range for rank {rank}")));
            }
            let keepdims = attrs
                .int_or("keepdims", 1)
                .map_err(|e| err(e.to_string()))?
                == 1;
            let dim = b.dim(x, axis as usize);
            let split = input(1);
            // Every part becomes a value of the graph: bound the count before sizing by it.
            let bounded = |n: usize| {
                if n > MAX_SEQUENCE_PARTS {
                    Err(err(format!(
                        "splits into {n} parts; sequences are unrolled while importing, into at \
                         most {MAX_SEQUENCE_PARTS} tensors"
                    )))
                } else {
                    Ok(n)
                }
            };
            let (count, sizes, split_input): (usize, Option<Vec<i64>>, Option<ValueId>) =
                match split {
                    None => {
                        let d = dim.ok_or_else(|| {
                            unsupported("splitting along a dim known only at run time")
                        })?;
                        let d = bounded(d)?;
                        (d, Some(vec![1; d]), None)
                    }
                    Some(s) => match b.constant(s) {
                        Some(t) => {
                            let v = t
                                .to_vec::<i64>()
                                .or_else(|_| {
                                    t.to_vec::<i32>()
                                        .map(|v| v.into_iter().map(i64::from).collect())
                                })
                                .map_err(|e| err(format!("split: {e}")))?;
                            if t.rank() == 0 {
                                let d = dim.ok_or_else(|| {
                                    unsupported("splitting along a dim known only at run time")
                                })?;
                                let chunk =
                                    usize::try_from(v[0]).ok().filter(|&c| c > 0).ok_or_else(
                                        || err(format!("split size {} is not positive", v[0])),
                                    )?;
                                let n = bounded(d.div_ceil(chunk))?;
                                let sizes =
                                    (0..n).map(|i| chunk.min(d - i * chunk) as i64).collect();
                                (n, Some(sizes), None)
                            } else {
                                (v.len(), Some(v), None)
                            }
                        }
                        None => {
                            let id = b.resolve(s).ok_or_else(|| {
                                err(format!("reads {s:?}, which nothing produces"))
                            })?;
                            let n = match b.graph.value(id).fact.dims.as_slice() {
                                [Dim::Known(n)] => bounded(*n)?,
                                _ => {
                                    return Err(unsupported(
                                        "a run-time split whose length is not declared",
                                    ))
                                }
                            };
                            (n, None, Some(id))
                        }
                    },
                };
            let outs: Vec<String> = (0..count).map(|k| format!("{output}:part{k}")).collect();
            let out_refs: Vec<&str> = outs.iter().map(String::as_str).collect();
            let mut split_attrs = Attributes::new("Split").with("axis", Attr::Int(axis));
            let mut inputs = vec![x];
            match (sizes, split_input) {
                (Some(sizes), _) => split_attrs.insert("split", Attr::Ints(sizes)),
                (None, Some(id)) => inputs.push(id),
                (None, None) => {}
            }
            let opset = if split_input.is_some() { 13 } else { 11 };
            let mut parts = b
                .add_tensor_node_at(
                    &format!("{output}:split"),
                    "Split",
                    opset,
                    split_attrs,
                    &inputs,
                    &out_refs,
                )
                .map_err(|e| err(e.to_string()))?;
            if !keepdims && split.is_none() {
                parts = parts
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| {
                        let out = format!("{output}:squeezed{k}");
                        let attrs = Attributes::new("Squeeze").with("axes", Attr::Ints(vec![axis]));
                        b.add_tensor_node(&out, "Squeeze", attrs, &[v], &[&out])
                            .map(|ids| ids[0])
                            .map_err(|e| err(e.to_string()))
                    })
                    .collect::<Result<Vec<_>>>()?;
            }
            b.set_sequence(&output, parts);
        }
        other => return Err(unsupported(&format!("{other} is not a sequence operator"))),
    }
    Ok(())
}

impl GraphBuilder<'_> {
    /// Adds a tensor node built with opset 11 forms (axes and split as attributes).
    fn add_tensor_node(
        &mut self,
        name: &str,
        op_type: &str,
        attrs: Attributes,
        inputs: &[ValueId],
        outputs: &[&str],
    ) -> strata_runtime::Result<Vec<ValueId>> {
        self.add_tensor_node_at(name, op_type, 11, attrs, inputs, outputs)
    }

    fn add_tensor_node_at(
        &mut self,
        name: &str,
        op_type: &str,
        opset: i64,
        attrs: Attributes,
        inputs: &[ValueId],
        outputs: &[&str],
    ) -> strata_runtime::Result<Vec<ValueId>> {
        let op = build_operator(&OpContext {
            op_type,
            domain: "",
            opset,
            attrs: &attrs,
            num_inputs: inputs.len(),
            num_outputs: outputs.len(),
        })?;
        let ins: Vec<Option<ValueId>> = inputs.iter().copied().map(Some).collect();
        let ids = self.graph.add_node(name, Arc::from(op), &ins, outputs)?;
        for (out, &id) in outputs.iter().zip(&ids) {
            self.define(out, id);
        }
        Ok(ids)
    }

    /// The value of `name` when it is known while importing: an initializer or a Constant.
    fn constant(&mut self, name: &str) -> Option<Tensor> {
        let id = self.resolve(name)?;
        match &self.graph.value(id).source {
            ValueSource::Initializer(t) => Some(t.clone()),
            ValueSource::Node(node, 0) => {
                let op = self.graph.nodes[node.0].op.clone();
                if !self.graph.nodes[node.0].inputs.is_empty() {
                    return None;
                }
                op.infer(&[]).ok()?.into_iter().next()?.value
            }
            _ => None,
        }
    }

    /// The rank of a value, when known while importing (inputs, constants, nodes built here).
    fn rank(&self, id: ValueId) -> Option<usize> {
        let v = self.graph.value(id);
        match &v.source {
            ValueSource::Initializer(t) => Some(t.rank()),
            ValueSource::Input => Some(v.fact.rank()),
            _ => v.fact.is_defined().then(|| v.fact.rank()),
        }
    }

    /// A dim of a value, when known while importing.
    fn dim(&self, id: ValueId, axis: usize) -> Option<usize> {
        let v = self.graph.value(id);
        match &v.source {
            ValueSource::Initializer(t) => t.dims().get(axis).copied(),
            _ => v.fact.dims.get(axis).and_then(Dim::known),
        }
    }
}
