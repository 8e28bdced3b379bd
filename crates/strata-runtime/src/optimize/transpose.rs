//! Transpose elimination: a Transpose that only swaps the last two axes of a MatMul operand
//! becomes the `transA`/`transB` of a FusedMatMul, which reads the operand through strides; a
//! Transpose of a Transpose becomes one Transpose, or none when the two cancel. (A Transpose of a
//! constant was already folded into the constant at plan time.) Permutations are read from what
//! the nodes infer, never from names.

use std::sync::Arc;

use strata_core::DType;
use strata_ops::{build_operator, Attr, Attributes, OpContext};

use crate::graph::{NodeId, ValueSource};
use crate::optimize::attention::permutation_of;
use crate::optimize::epilogue::{value_facts, Fusion};
use crate::optimize::remove_dead_nodes;
use crate::{Graph, Result, ValueId};

/// Removes cancelling Transpose pairs, merges other pairs and folds last-two-axes transposes
/// into the MatMul reading them; returns the rewrites.
pub fn eliminate_transposes(graph: &mut Graph, threads: usize) -> Result<Vec<Fusion>> {
    let facts = value_facts(graph, threads);
    let rank = |v: ValueId| facts.get(v.0).filter(|f| f.is_defined()).map(|f| f.rank());
    let mut rewrites = Vec::new();
    for i in 0..graph.nodes.len() {
        match graph.nodes[i].op.op_type() {
            "Transpose" => {
                if let Some(r) = merge_pair(graph, i, &rank)? {
                    rewrites.push(r);
                }
            }
            "MatMul" => {
                let f32_in = graph.nodes[i].inputs.iter().all(|v| {
                    v.and_then(|v| facts.get(v.0))
                        .is_some_and(|f| f.dtype == DType::F32)
                });
                if f32_in {
                    if let Some(r) = fold_into_matmul(graph, i, &rank)? {
                        rewrites.push(r);
                    }
                }
            }
            _ => {}
        }
    }
    if !rewrites.is_empty() {
        remove_dead_nodes(graph);
    }
    Ok(rewrites)
}

/// The Transpose node producing `v` and its input, if `v` is a Transpose's output.
fn transpose_of(graph: &Graph, v: ValueId) -> Option<(usize, ValueId)> {
    let ValueSource::Node(NodeId(n), 0) = graph.values[v.0].source else {
        return None;
    };
    let node = &graph.nodes[n];
    (node.op.op_type() == "Transpose" && node.outputs.len() == 1)
        .then_some(())
        .and(node.inputs.first().copied().flatten())
        .map(|x| (n, x))
}

fn transpose_op(perm: &[usize]) -> Result<Arc<dyn strata_ops::Operator>> {
    let attrs = Attributes::new("Transpose")
        .with("perm", Attr::Ints(perm.iter().map(|&p| p as i64).collect()));
    Ok(Arc::from(build_operator(&OpContext {
        op_type: "Transpose",
        domain: "",
        opset: 13,
        attrs: &attrs,
        num_inputs: 1,
        num_outputs: 1,
    })?))
}

/// `Transpose(Transpose(x, p1), p2)`: reads x with the composed permutation, or (when that is
/// the identity) its readers read x itself.
fn merge_pair(
    graph: &mut Graph,
    outer: usize,
    rank: &impl Fn(ValueId) -> Option<usize>,
) -> Result<Option<Fusion>> {
    let Some(y) = graph.nodes[outer].inputs.first().copied().flatten() else {
        return Ok(None);
    };
    let Some((inner, x)) = transpose_of(graph, y) else {
        return Ok(None);
    };
    let Some(r) = rank(x) else {
        return Ok(None);
    };
    let (Some(p1), Some(p2)) = (
        permutation_of(graph.nodes[inner].op.as_ref(), r),
        permutation_of(graph.nodes[outer].op.as_ref(), r),
    ) else {
        return Ok(None);
    };
    // Output axis i of the pair is axis p2[i] of the inner output, which is x's axis p1[p2[i]].
    let composed: Vec<usize> = p2.iter().map(|&i| p1[i]).collect();
    let absorbed = vec![format!("Transpose {}", graph.nodes[inner].name)];
    let out = graph.nodes[outer].outputs[0];
    let identity = composed.iter().enumerate().all(|(i, &p)| i == p);
    if identity && !graph.outputs.contains(&out) {
        // Every reader of the pair's output reads x.
        for node in &mut graph.nodes {
            for input in node.inputs.iter_mut().flatten() {
                if *input == out {
                    *input = x;
                }
            }
        }
        return Ok(Some(Fusion {
            node: graph.nodes[outer].name.clone(),
            op_type: "Transpose pair (cancels)".into(),
            absorbed,
        }));
    }
    graph.nodes[outer].op = transpose_op(&composed)?;
    graph.nodes[outer].inputs[0] = Some(x);
    Ok(Some(Fusion {
        node: graph.nodes[outer].name.clone(),
        op_type: "Transpose pair -> Transpose".into(),
        absorbed,
    }))
}

/// `MatMul(Transpose(A), Transpose(B))` where a Transpose swaps only the last two axes of an
/// operand of rank at least 2: a FusedMatMul with `transA`/`transB` reading A and B.
fn fold_into_matmul(
    graph: &mut Graph,
    matmul: usize,
    rank: &impl Fn(ValueId) -> Option<usize>,
) -> Result<Option<Fusion>> {
    let node = &graph.nodes[matmul];
    let [Some(a), Some(b)] = node.inputs[..] else {
        return Ok(None);
    };
    let swapped = |v: ValueId| -> Option<(usize, ValueId)> {
        let (t, x) = transpose_of(graph, v)?;
        let r = rank(x).filter(|&r| r >= 2)?;
        let perm = permutation_of(graph.nodes[t].op.as_ref(), r)?;
        let mut want: Vec<usize> = (0..r).collect();
        want.swap(r - 2, r - 1);
        (perm == want).then_some((t, x))
    };
    let (ta, tb) = (swapped(a), swapped(b));
    if ta.is_none() && tb.is_none() {
        return Ok(None);
    }
    let flag = |t: &Option<(usize, ValueId)>| Attr::Int(i64::from(t.is_some()));
    let attrs = Attributes::new("FusedMatMul")
        .with("transA", flag(&ta))
        .with("transB", flag(&tb));
    let op = build_operator(&OpContext {
        op_type: "FusedMatMul",
        domain: "com.microsoft",
        opset: 1,
        attrs: &attrs,
        num_inputs: 2,
        num_outputs: 1,
    })?;
    let absorbed = [ta, tb]
        .iter()
        .flatten()
        .map(|(t, _)| format!("Transpose {}", graph.nodes[*t].name))
        .collect();
    let node = &mut graph.nodes[matmul];
    node.op = Arc::from(op);
    node.inputs = vec![
        Some(ta.map_or(a, |(_, x)| x)),
        Some(tb.map_or(b, |(_, x)| x)),
    ];
    Ok(Some(Fusion {
        node: node.name.clone(),
        op_type: "MatMul -> FusedMatMul".into(),
        absorbed,
    }))
}
