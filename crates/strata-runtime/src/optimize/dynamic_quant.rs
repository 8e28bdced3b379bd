//! Dynamic quantization's tail in one product: onnxruntime's dynamic quantizer writes
//! `MatMulInteger → Cast(float) → Mul(a_scale · b_scale) → Add(bias)` after each
//! DynamicQuantizeLinear; this pass makes the chain one `ScaledMatMulInteger`, whose write-back
//! does the conversion, scaling and bias in the same f32 operations (so the results are equal),
//! with the weights packed at plan time. The DynamicQuantizeLinear stays: one quantization of
//! the activations serves every product reading them (the Q, K and V projections).
//!
//! A chain qualifies when each intermediate value feeds only the next node and is no graph
//! output, the scale is one value or one per column (any producer: it is computed at run time
//! from the dynamic scale), and the bias is a constant float with one value per column.

use std::sync::Arc;

use strata_core::DType;
use strata_ops::ops::linalg::matmul_integer_scaled::ScaledMatMulInteger;
use strata_ops::Fact;

use crate::graph::{NodeId, ValueSource};
use crate::optimize::epilogue::value_facts;
use crate::{Graph, Result, ValueId};

/// The single node reading `value`, when it is no graph output.
fn only_reader(graph: &Graph, consumers: &[Vec<NodeId>], value: ValueId) -> Option<usize> {
    match consumers[value.0].as_slice() {
        [NodeId(next)] if !graph.outputs.contains(&value) => Some(*next),
        _ => None,
    }
}

/// The operand of binary node `node` that is not `value`, when `value` is exactly one operand.
fn other_operand(graph: &Graph, node: usize, value: ValueId) -> Option<ValueId> {
    match graph.nodes[node].inputs.as_slice() {
        [Some(a), Some(b)] if *a == value && *b != value => Some(*b),
        [Some(a), Some(b)] if *b == value && *a != value => Some(*a),
        _ => None,
    }
}

/// Whether `value` (f32) holds one value or one per column of an `n`-column product.
fn per_column(facts: &[Fact], value: ValueId, n: usize, allow_one: bool) -> bool {
    let Some(fact) = facts.get(value.0).filter(|f| f.is_defined()) else {
        return false;
    };
    let Some(dims) = fact.concrete() else {
        return false;
    };
    let numel: usize = dims.iter().product();
    fact.dtype == DType::F32
        && ((allow_one && numel == 1) || (numel == n && dims.last() == Some(&n) && dims.len() <= 2))
}

/// Fuses every qualifying chain; returns how many.
pub fn fuse_dynamic_quant(graph: &mut Graph, threads: usize) -> Result<usize> {
    let consumers = graph.consumers();
    let facts = value_facts(graph, threads);
    let mut dropped = Vec::new();
    let mut fused = 0;
    for i in 0..graph.nodes.len() {
        let node = &graph.nodes[i];
        if node.op.op_type() != "MatMulInteger" || node.outputs.len() != 1 {
            continue;
        }
        let Some(b) = node.inputs.get(1).copied().flatten() else {
            continue;
        };
        let Some(n) = facts
            .get(b.0)
            .and_then(|f| f.dims.last())
            .and_then(|d| d.known())
        else {
            continue;
        };
        let product = node.outputs[0];
        let Some(cast) = only_reader(graph, &consumers, product) else {
            continue;
        };
        let cast_node = &graph.nodes[cast];
        if cast_node.op.op_type() != "Cast"
            || cast_node.outputs.len() != 1
            || facts
                .get(cast_node.outputs[0].0)
                .filter(|f| f.is_defined())
                .map(|f| f.dtype)
                != Some(DType::F32)
        {
            continue;
        }
        let cast_out = cast_node.outputs[0];
        let Some(mul) = only_reader(graph, &consumers, cast_out) else {
            continue;
        };
        if graph.nodes[mul].op.op_type() != "Mul" || graph.nodes[mul].outputs.len() != 1 {
            continue;
        }
        let Some(scale) = other_operand(graph, mul, cast_out) else {
            continue;
        };
        if !per_column(&facts, scale, n, true) {
            continue;
        }
        let mul_out = graph.nodes[mul].outputs[0];
        // An Add of a constant bias, when there is one.
        let add = only_reader(graph, &consumers, mul_out).filter(|&add| {
            let a = &graph.nodes[add];
            a.op.op_type() == "Add"
                && a.outputs.len() == 1
                && other_operand(graph, add, mul_out).is_some_and(|b| {
                    matches!(graph.values[b.0].source, ValueSource::Initializer(_))
                        && per_column(&facts, b, n, false)
                })
        });
        let (last, bias) = match add {
            Some(add) => (add, other_operand(graph, add, mul_out)),
            None => (mul, None),
        };
        let mut inputs = graph.nodes[i].inputs.clone();
        inputs.resize(4, None);
        inputs.push(Some(scale));
        inputs.push(bias);
        // The fused node takes the last node's place: every input is defined by then.
        let out = graph.nodes[last].outputs[0];
        let last_node = &mut graph.nodes[last];
        last_node.op = Arc::new(ScaledMatMulInteger::new());
        last_node.inputs = inputs;
        graph.values[out.0].source = ValueSource::Node(NodeId(last), 0);
        for (node, value) in [(i, product), (cast, cast_out)]
            .into_iter()
            .chain((last != mul).then_some((mul, mul_out)))
        {
            graph.values[value.0].source = ValueSource::Removed;
            graph.nodes[node].outputs.clear();
            dropped.push(node);
        }
        fused += 1;
    }
    if !dropped.is_empty() {
        let keep: Vec<usize> = (0..graph.nodes.len())
            .filter(|i| !dropped.contains(i))
            .collect();
        graph.reorder(&keep);
    }
    Ok(fused)
}
