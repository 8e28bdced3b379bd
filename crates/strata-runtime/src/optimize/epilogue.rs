//! Epilogue fusion (I3): a producer whose kernel can apply more work to its output while
//! writing it (`OpCapabilities::epilogue`) absorbs the nodes after it that would do that work in
//! a second pass over memory — a residual Add (Conv + Add), then an element-wise activation
//! (Relu, Clip/Relu6, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh). Every fusion is
//! recorded, so `strata inspect` can list them.

use std::sync::Arc;

use strata_core::DType;
use strata_ops::{Dim, EpilogueStep, Fact, Fused};

use crate::graph::{NodeId, ValueSource};
use crate::optimize::fuse::{absorb, remove_nodes, sole_consumer};
use crate::specialize::specialize;
use crate::{Graph, Result, ValueId};

/// One producer and the nodes fused into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fusion {
    /// The producer's node name.
    pub node: String,
    /// The producer's op type.
    pub op_type: String,
    /// What it absorbed, in order: `"<op type> <node name>"`.
    pub absorbed: Vec<String>,
}

/// Fuses residual Adds and activations into the producers that can apply them; returns what
/// was fused.
pub fn fuse_epilogues(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let consumers = graph.consumers();
    let mut dropped = Vec::new();
    let mut fusions = Vec::new();
    for producer in 0..graph.nodes.len() {
        let mut absorbed = Vec::new();
        while let Some((consumer, step, operand)) = next_step(graph, &consumers, &facts, producer) {
            let fused = graph.nodes[producer]
                .op
                .capabilities()
                .epilogue
                .and_then(|e| e.fuse(step));
            let Some(Fused { op, operand_slot }) = fused else {
                break;
            };
            match (operand_slot, operand) {
                (Some(slot), Some(value)) => {
                    let inputs = &mut graph.nodes[producer].inputs;
                    if inputs.len() <= slot {
                        inputs.resize(slot + 1, None);
                    }
                    inputs[slot] = Some(value);
                }
                (None, None) => {}
                // A fused operator that wants an operand for a step without one, or the reverse:
                // not a fusion this pass understands.
                _ => break,
            }
            graph.nodes[producer].op = Arc::from(op);
            let node = &graph.nodes[consumer];
            absorbed.push(format!("{} {}", node.op.op_type(), node.name));
            absorb(graph, producer, consumer);
            dropped.push(consumer);
        }
        if !absorbed.is_empty() {
            let node = &graph.nodes[producer];
            fusions.push(Fusion {
                node: node.name.clone(),
                op_type: node.op.op_type().to_string(),
                absorbed,
            });
        }
    }
    remove_nodes(graph, &dropped);
    // A residual may come from a node listed after its new reader.
    graph.sort()?;
    Ok(fusions)
}

/// The step the sole consumer of `producer`'s output would add, with the node to drop and the
/// tensor the step reads: a same-shape f32 Add (residual), or an activation.
fn next_step(
    graph: &Graph,
    consumers: &[Vec<NodeId>],
    facts: &[Fact],
    producer: usize,
) -> Option<(usize, EpilogueStep, Option<ValueId>)> {
    let node = &graph.nodes[producer];
    if node.outputs.len() != 1 || node.op.capabilities().epilogue.is_none() {
        return None;
    }
    let out = node.outputs[0];
    let consumer = sole_consumer(graph, consumers, out)?;
    let next = &graph.nodes[consumer];
    if next.outputs.len() != 1 {
        return None;
    }
    let fact = |v: Option<ValueId>| v.and_then(|v| facts.get(v.0));
    // A two-input Sum is an Add too (older exporters write residuals that way).
    if matches!(next.op.op_type(), "Add" | "Sum") {
        let [Some(a), Some(b)] = next.inputs[..] else {
            return None;
        };
        let other = match (a == out, b == out) {
            (true, false) => b,
            (false, true) => a,
            _ => return None,
        };
        let (mine, theirs, sum) = (
            fact(Some(out))?,
            fact(Some(other))?,
            fact(Some(next.outputs[0]))?,
        );
        // Same dtype and the very same dims (known or the same symbol): no broadcasting.
        let same = |f: &Fact| f.dtype == DType::F32 && f.dims == mine.dims;
        if mine.dtype == DType::F32 && same(sum) && is_bias_row(theirs, mine) {
            return Some((consumer, EpilogueStep::Bias, Some(other)));
        }
        let fits = mine.dtype == DType::F32 && same(theirs) && same(sum);
        return fits.then_some((consumer, EpilogueStep::Residual, Some(other)));
    }
    let activation = next.op.capabilities().activation?;
    let absent = Fact::absent();
    let inputs: Vec<&Fact> = next
        .inputs
        .iter()
        .map(|v| fact(*v).unwrap_or(&absent))
        .collect();
    let act = activation.activation(&inputs)?;
    Some((consumer, EpilogueStep::Activation(act), None))
}

/// Whether `bias` is a constant vector along the last axis of `out` (dims `[N]` or
/// `[1, …, 1, N]`, not more than `out`'s rank and not `out`'s own dims), the form a
/// Gemm-style bias takes.
fn is_bias_row(bias: &Fact, out: &Fact) -> bool {
    let Some((Dim::Known(n), lead)) = bias.dims.split_last() else {
        return false;
    };
    bias.value.is_some()
        && bias.dtype == out.dtype
        && bias.rank() <= out.rank()
        && bias.dims != out.dims
        && lead.iter().all(|d| *d == Dim::Known(1))
        && out.dims.last() == Some(&Dim::Known(*n))
}

/// Facts of every value for the graph's declared input dims (symbolic ones stay symbols), or
/// the graph's own facts if inference fails (then only fusions needing no dims are found).
pub(super) fn value_facts(graph: &Graph, threads: usize) -> Vec<Fact> {
    let declared: Vec<_> = graph
        .runtime_inputs()
        .map(|id| graph.values[id.0].fact.dims.clone())
        .collect();
    match specialize(graph, &declared, threads) {
        Ok(spec) => spec.facts,
        Err(_) => graph
            .values
            .iter()
            .map(|v| match &v.source {
                ValueSource::Initializer(t) => Fact::constant(t.clone()),
                _ => v.fact.clone(),
            })
            .collect(),
    }
}
