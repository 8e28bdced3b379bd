//! LayerNorm and RMS norm written out as element-wise ops and reductions become one
//! LayerNormalization or RMSNormalization node over the last axis (strata's vectorized row
//! kernel, at any opset).
//!
//! Matched from each Sqrt, by what the nodes compute:
//! - LayerNorm: `d = x - ReduceMean(x)`, `v = ReduceMean(d²)` (`Pow(d, 2)` or `d · d`),
//!   `n = d / Sqrt(v + eps)` (or `d · Reciprocal(Sqrt(v + eps))`), then `n · gamma`
//!   (either order) and optionally `+ beta`;
//! - RMS norm: the same without the centering: `v = ReduceMean(x²)`, `n = x / Sqrt(v + eps)`,
//!   `n · gamma`.
//!
//! Both ReduceMeans must keep dims and reduce the last axis only (checked on the dims: their
//! output is the input's dims with the last replaced by 1); eps, the exponent and gamma/beta
//! are checked too (gamma and beta `[H]`, or constants of H values). Every intermediate must be
//! read only inside the pattern.

use strata_core::{MemoryKind, Tensor};
use strata_ops::{Attr, Attributes, Dim};

use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::fuse::remove_nodes;
use crate::optimize::pattern::{describe, operator, replace, View};
use crate::{Graph, Result, ValueId};

/// One match.
struct Match {
    x: ValueId,
    gamma: ValueId,
    beta: Option<ValueId>,
    epsilon: f32,
    centered: bool,
    /// The nodes in order; the last writes the result.
    nodes: Vec<usize>,
}

/// Fuses every decomposed LayerNorm and RMS norm; returns what was fused.
pub fn fuse_layer_norms(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
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
            if graph.nodes[node].op.op_type() == "Sqrt" {
                found.extend(match_norm(&view, node));
            }
        }
    }
    let mut dropped = Vec::new();
    let mut fusions = Vec::new();
    for m in found {
        if m.nodes.iter().any(|n| dropped.contains(n)) {
            continue;
        }
        let gamma = vector_param(graph, &facts, m.gamma)?;
        let beta = match m.beta {
            Some(b) => Some(vector_param(graph, &facts, b)?),
            None => None,
        };
        let (op_type, opset) = if m.centered {
            ("LayerNormalization", 17)
        } else {
            ("RMSNormalization", 23)
        };
        let attrs = Attributes::new(op_type)
            .with("axis", Attr::Int(-1))
            .with("epsilon", Attr::Float(m.epsilon));
        let mut inputs = vec![Some(m.x), Some(gamma)];
        inputs.extend(beta.map(Some));
        let op = operator(op_type, "", opset, attrs, inputs.len(), 1)?;
        let last = *m.nodes.last().expect("a match spans nodes");
        let output = graph.nodes[last].outputs[0];
        let absorbed = m.nodes.iter().map(|&n| describe(graph, n)).collect();
        let name = graph.nodes[last].name.clone();
        replace(graph, last, op, inputs, output, &m.nodes, &mut dropped);
        fusions.push(Fusion {
            node: name,
            op_type: op_type.to_string(),
            absorbed,
        });
    }
    remove_nodes(graph, &dropped);
    graph.sort()?;
    Ok(fusions)
}

/// A gamma or beta as the fused node takes it: as is when its dims are `[H]`, else (a
/// constant of H values with leading ones) a new `[H]` initializer with the same values.
fn vector_param(graph: &mut Graph, facts: &[strata_ops::Fact], value: ValueId) -> Result<ValueId> {
    let fact = &facts[value.0];
    if fact.rank() == 1 {
        return Ok(value);
    }
    let t = fact
        .value
        .as_ref()
        .expect("vector_params_fit admits only constants of other ranks");
    let h = t.numel();
    let flat = Tensor::from_slice_in(&t.to_vec::<f32>()?, &[h], MemoryKind::Persistent)?;
    let name = format!("{}/vector", graph.values[value.0].name);
    graph.add_initializer(&name, flat)
}

/// Whether `value` can be a gamma or beta of `h` values: dims `[H]`, or a constant whose dims
/// are `[1, …, 1, H]`.
fn vector_params_fit(v: &View<'_>, value: ValueId, h: usize, dtype: strata_core::DType) -> bool {
    let Some(f) = v.fact(value) else {
        return false;
    };
    let Some((last, lead)) = f.dims.split_last() else {
        return false;
    };
    // Other ranks are flattened to a new f32 initializer.
    let flattenable = f.value.is_some()
        && f.dtype == strata_core::DType::F32
        && lead.iter().all(|d| *d == Dim::Known(1));
    let shape_ok = *last == Dim::Known(h) && (f.rank() == 1 || flattenable);
    shape_ok && f.dtype == dtype
}

/// A keepdims ReduceMean over the last axis only: its output dims are its input's with the
/// last replaced by 1. Returns its input.
fn mean_over_last(v: &View<'_>, node: usize) -> Option<ValueId> {
    let n = &v.graph.nodes[node];
    if n.op.op_type() != "ReduceMean" || n.outputs.len() != 1 {
        return None;
    }
    let input = n.inputs.first().copied().flatten()?;
    let (i, o) = (v.fact(input)?, v.fact(n.outputs[0])?);
    let (Some((last, lead)), Some((out_last, out_lead))) =
        (i.dims.split_last(), o.dims.split_last())
    else {
        return None;
    };
    let fits = matches!(last, Dim::Known(h) if *h > 0)
        && *out_last == Dim::Known(1)
        && lead == out_lead
        && lead.iter().all(|d| !matches!(d, Dim::Unknown));
    fits.then_some(input)
}

fn match_norm(v: &View<'_>, sqrt: usize) -> Option<Match> {
    // Sqrt(var + eps)
    let ve = v.graph.nodes[sqrt].inputs.first().copied().flatten()?;
    let add_eps = v.producer(ve, "Add")?;
    let (a, b) = v.pair(add_eps)?;
    let (var, eps) = match (v.scalar(a), v.scalar(b)) {
        (None, Some(e)) => (a, e),
        (Some(e), None) => (b, e),
        _ => return None,
    };
    if !(0.0..1.0).contains(&eps) {
        return None;
    }
    // var = ReduceMean(d²)
    let var_node = v.producer(var, "ReduceMean")?;
    let square = mean_over_last(v, var_node)?;
    let (d, square_node) = squared(v, square)?;
    // d = x - ReduceMean(x) for LayerNorm, else d is x (RMS norm).
    let centering = v.producer(d, "Sub").and_then(|sub| {
        let (x, mean) = v.pair(sub)?;
        let mean_node = v.producer(mean, "ReduceMean")?;
        (mean_over_last(v, mean_node)? == x).then_some((x, mean_node, sub))
    });
    // n = d / sd, or d · (1 / sd)
    let sd = v.out(sqrt);
    let (normalize, recip) = match v.consumers[sd.0].as_slice() {
        [only] if !v.graph.outputs.contains(&sd) => {
            let node = only.0;
            match v.graph.nodes[node].op.op_type() {
                "Div" if v.pair(node)? == (d, sd) => (node, None),
                "Reciprocal" => {
                    let r = v.out(node);
                    let mul = v.sole_reader(r, "Mul")?;
                    (v.other(mul, r)? == d).then_some((mul, Some(node)))?
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    // n · gamma
    let n = v.out(normalize);
    let scale = v.sole_reader(n, "Mul")?;
    let gamma = v.other(scale, n)?;
    let h = v.last_dim(d)?;
    let dtype = v.fact(d)?.dtype;
    if !vector_params_fit(v, gamma, h, dtype) {
        return None;
    }
    let mut nodes = Vec::new();
    let x = match centering {
        Some((x, mean_node, sub)) => {
            nodes.extend([mean_node, sub]);
            x
        }
        None => d,
    };
    nodes.extend([square_node, var_node, add_eps, sqrt]);
    nodes.extend(recip);
    nodes.extend([normalize, scale]);
    // What only the pattern may read.
    let mut owned = vec![
        (square, vec![var_node]),
        (var, vec![add_eps]),
        (ve, vec![sqrt]),
        (n, vec![scale]),
    ];
    if let Some((_, mean_node, sub)) = centering {
        owned.push((v.out(mean_node), vec![sub]));
        owned.push((d, vec![square_node, normalize]));
    }
    if owned
        .iter()
        .any(|(value, readers)| !v.read_only_by(*value, readers))
    {
        return None;
    }
    // + beta (LayerNorm only).
    let scaled = v.out(scale);
    let mut beta = None;
    if centering.is_some() {
        if let Some(add) = v.sole_reader(scaled, "Add") {
            let b = v.other(add, scaled)?;
            if vector_params_fit(v, b, h, dtype) {
                beta = Some(b);
                nodes.push(add);
            }
        }
    }
    Some(Match {
        x,
        gamma,
        beta,
        epsilon: eps as f32,
        centered: centering.is_some(),
        nodes,
    })
}

/// `value = d²` as `Pow(d, 2)` or `d · d`: returns d and the node.
fn squared(v: &View<'_>, value: ValueId) -> Option<(ValueId, usize)> {
    if let Some(pow) = v.producer(value, "Pow") {
        let (d, e) = v.pair(pow)?;
        return v.is_const(e, 2.0, 0.0).then_some((d, pow));
    }
    let mul = v.producer(value, "Mul")?;
    let (a, b) = v.pair(mul)?;
    (a == b).then_some((a, mul))
}
