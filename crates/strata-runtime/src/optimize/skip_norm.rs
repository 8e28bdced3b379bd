//! A residual Add followed by a LayerNorm (or RMS norm) over the last axis becomes one
//! com.microsoft SkipLayerNormalization (SkipSimplifiedLayerNormalization): the sum is taken,
//! normalized and, when something else reads it (the next residual), stored, all in one pass
//! over each row.
//!
//! The Add's operands must be float tensors of the norm's dtype: one of the sum's own dims,
//! the other the same or a suffix of them of rank >= 2 (a position table broadcast over the
//! batch). The norm must normalize the last axis only, with a scale (and bias) of `[H]`, and
//! no statistics output may be read.

use strata_core::DType;
use strata_ops::{Attr, Attributes, Dim, Fact};

use crate::graph::{NodeId, Value, ValueSource};
use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::fuse::remove_nodes;
use crate::optimize::pattern::{describe, operator, View};
use crate::{Graph, Result, ValueId};

/// One match: the norm node, the Add before it and the Add's operands as (input, skip).
struct Match {
    norm: usize,
    add: usize,
    input: ValueId,
    skip: ValueId,
    epsilon: f32,
    centered: bool,
    /// Whether the sum is read outside the pattern (then the fused node writes it too).
    keep_sum: bool,
}

/// Fuses every Add → LayerNorm pair; returns what was fused.
pub fn fuse_skip_layer_norms(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let consumers = graph.consumers();
    let mut found = Vec::new();
    {
        let view = View {
            graph,
            facts: &facts,
            consumers: &consumers,
        };
        for node in 0..graph.nodes.len() {
            found.extend(match_skip(&view, node));
        }
    }
    let mut fusions = Vec::new();
    let mut dropped = Vec::new();
    for m in found {
        if dropped.contains(&m.add) {
            continue;
        }
        let op_type = if m.centered {
            "SkipLayerNormalization"
        } else {
            "SkipSimplifiedLayerNormalization"
        };
        let sum = graph.nodes[m.add].outputs[0];
        let y = graph.nodes[m.norm].outputs[0];
        let node_inputs = graph.nodes[m.norm].inputs.clone();
        let (gamma, beta) = (node_inputs[1], node_inputs.get(2).copied().flatten());
        let mut inputs = vec![Some(m.input), Some(m.skip), gamma];
        if m.centered {
            inputs.push(beta);
        }
        let num_outputs = if m.keep_sum { 4 } else { 1 };
        let attrs = Attributes::new(op_type).with("epsilon", Attr::Float(m.epsilon));
        let op = operator(
            op_type,
            "com.microsoft",
            1,
            attrs,
            inputs.len(),
            num_outputs,
        )?;
        let mut outputs = vec![y];
        if m.keep_sum {
            // Statistics outputs nobody reads, then the sum (output 3).
            let name = graph.nodes[m.norm].name.clone();
            for (slot, what) in [(1, "mean"), (2, "inv_std")] {
                let id = ValueId(graph.values.len());
                graph.values.push(Value {
                    name: format!("{name}/{what}"),
                    fact: Fact::absent(),
                    source: ValueSource::Node(NodeId(m.norm), slot),
                });
                outputs.push(id);
            }
            outputs.push(sum);
            graph.values[sum.0].source = ValueSource::Node(NodeId(m.norm), 3);
        } else {
            graph.values[sum.0].source = ValueSource::Removed;
        }
        let absorbed = vec![describe(graph, m.add), describe(graph, m.norm)];
        let node = &mut graph.nodes[m.norm];
        node.op = op;
        node.inputs = inputs;
        node.outputs = outputs;
        graph.nodes[m.add].outputs.clear();
        dropped.push(m.add);
        fusions.push(Fusion {
            node: graph.nodes[m.norm].name.clone(),
            op_type: op_type.to_string(),
            absorbed,
        });
    }
    remove_nodes(graph, &dropped);
    // Other readers of the sum may sit between the Add and the norm.
    graph.sort()?;
    Ok(fusions)
}

fn match_skip(v: &View<'_>, norm: usize) -> Option<Match> {
    let node = &v.graph.nodes[norm];
    let params = node.op.capabilities().row_norm?;
    // Only Y may be read.
    if node.outputs.len() > 1
        && node.outputs[1..]
            .iter()
            .any(|o| !v.consumers[o.0].is_empty() || v.graph.outputs.contains(o))
    {
        return None;
    }
    let x = node.inputs.first().copied().flatten()?;
    let gamma = node.inputs.get(1).copied().flatten()?;
    let beta = node.inputs.get(2).copied().flatten();
    if node.inputs.len() > 3 {
        return None;
    }
    let fx = v.fact(x)?;
    let rank = fx.rank() as i64;
    let axis = if params.axis < 0 {
        params.axis + rank
    } else {
        params.axis
    };
    let h = v.last_dim(x)?;
    if rank < 2 || axis != rank - 1 || fx.dtype != DType::F32 {
        return None;
    }
    let vector = |value: ValueId| {
        v.fact(value)
            .is_some_and(|f| f.dtype == fx.dtype && f.dims == [Dim::Known(h)])
    };
    if !vector(gamma) || beta.is_some_and(|b| !vector(b)) || (!params.centered && beta.is_some()) {
        return None;
    }
    let add = v.producer(x, "Add")?;
    let (a, b) = v.pair(add)?;
    let (fa, fb) = (v.fact(a)?, v.fact(b)?);
    if fa.dtype != fx.dtype || fb.dtype != fx.dtype {
        return None;
    }
    let (input, skip) = if fa.dims == fx.dims && skip_fits(fb, fx) {
        (a, b)
    } else if fb.dims == fx.dims && skip_fits(fa, fx) {
        (b, a)
    } else {
        return None;
    };
    let keep_sum = v.graph.outputs.contains(&x) || v.consumers[x.0].len() > 1;
    Some(Match {
        norm,
        add,
        input,
        skip,
        epsilon: params.epsilon,
        centered: params.centered,
        keep_sum,
    })
}

/// A skip operand of the sum's dims, or of a suffix of them of rank >= 2 (leading ones
/// allowed), all known.
fn skip_fits(skip: &Fact, sum: &Fact) -> bool {
    let core: Vec<&Dim> = skip
        .dims
        .iter()
        .skip_while(|d| **d == Dim::Known(1))
        .collect();
    if skip.rank() < 2 || core.is_empty() || core.len() > sum.rank() {
        return false;
    }
    let suffix = &sum.dims[sum.rank() - core.len()..];
    core.iter().zip(suffix).all(|(a, b)| *a == b)
}
