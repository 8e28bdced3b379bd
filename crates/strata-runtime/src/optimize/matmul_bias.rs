//! MatMul + Add of a constant bias row becomes one Gemm (`C` is the bias, broadcast over the
//! rows), so the bias is added as the product is finished and the Gemm can then fuse the
//! activation after it too (I3).

use std::sync::Arc;

use strata_core::DType;
use strata_ops::{build_operator, Attributes, Dim, Fact, OpContext};

use crate::graph::NodeId;
use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::fuse::{absorb, remove_nodes, sole_consumer};
use crate::{Graph, Result, ValueId};

/// Rewrites `Add(MatMul(A, B), bias)` — A a matrix, B a constant matrix, bias a constant `[N]`
/// or `[1, N]` of the same float type — into `Gemm(A, B, bias)`. Returns what it fused.
pub fn fuse_matmul_bias(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let consumers = graph.consumers();
    let mut dropped = Vec::new();
    let mut fusions = Vec::new();
    for producer in 0..graph.nodes.len() {
        let Some((add, bias)) = bias_add(graph, &consumers, &facts, producer) else {
            continue;
        };
        let gemm = build_operator(&OpContext {
            op_type: "Gemm",
            domain: "",
            opset: 13,
            attrs: &Attributes::new("Gemm"),
            num_inputs: 3,
            num_outputs: 1,
        })?;
        let node = &mut graph.nodes[producer];
        node.op = Arc::from(gemm);
        node.inputs.push(Some(bias));
        let absorbed = format!("Add {}", graph.nodes[add].name);
        absorb(graph, producer, add);
        dropped.push(add);
        fusions.push(Fusion {
            node: graph.nodes[producer].name.clone(),
            op_type: "MatMul -> Gemm".into(),
            absorbed: vec![absorbed],
        });
    }
    remove_nodes(graph, &dropped);
    Ok(fusions)
}

/// The Add to absorb and its bias operand, when `producer` is a MatMul that qualifies.
fn bias_add(
    graph: &Graph,
    consumers: &[Vec<NodeId>],
    facts: &[Fact],
    producer: usize,
) -> Option<(usize, ValueId)> {
    let node = &graph.nodes[producer];
    if node.op.op_type() != "MatMul" || node.outputs.len() != 1 {
        return None;
    }
    let [Some(a), Some(b)] = node.inputs[..] else {
        return None;
    };
    let out = node.outputs[0];
    let add = sole_consumer(graph, consumers, out)?;
    let next = &graph.nodes[add];
    if next.op.op_type() != "Add" || next.outputs.len() != 1 {
        return None;
    }
    let bias = match next.inputs[..] {
        [Some(x), Some(y)] if x == out && y != out => y,
        [Some(x), Some(y)] if y == out && x != out => x,
        _ => return None,
    };
    let (fa, fb, fc) = (facts.get(a.0)?, facts.get(b.0)?, facts.get(bias.0)?);
    let dtype_ok =
        matches!(fa.dtype, DType::F32 | DType::F64) && fb.dtype == fa.dtype && fc.dtype == fa.dtype;
    let n = match fb.dims[..] {
        [_, Dim::Known(n)] => n,
        _ => return None,
    };
    let bias_row =
        matches!(fc.dims[..], [Dim::Known(x)] | [Dim::Known(1), Dim::Known(x)] if x == n);
    let constants = fb.value.is_some() && fc.value.is_some();
    (dtype_ok && fa.rank() == 2 && bias_row && constants).then_some((add, bias))
}
