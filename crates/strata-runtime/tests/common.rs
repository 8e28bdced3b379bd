//! Helpers for building graphs in tests.
#![allow(dead_code)]

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_ops::{build_operator, Attr, Attributes, Dim, OpContext};
use strata_runtime::{Graph, ValueId};

pub fn op(
    graph: &mut Graph,
    op_type: &str,
    inputs: &[ValueId],
    outputs: &[&str],
    attrs: &[(&str, Attr)],
) -> Vec<ValueId> {
    let mut a = Attributes::new(op_type);
    for (k, v) in attrs {
        a.insert(k, v.clone());
    }
    let operator = build_operator(&OpContext {
        op_type,
        domain: "",
        opset: 17,
        attrs: &a,
        num_inputs: inputs.len(),
        num_outputs: outputs.len(),
    })
    .unwrap();
    let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
    graph
        .add_node("", Arc::from(operator), &ins, outputs)
        .unwrap()
}

pub fn input(graph: &mut Graph, name: &str, dims: &[Dim]) -> ValueId {
    graph.add_input(name, DType::F32, dims.to_vec()).unwrap()
}

pub fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

pub fn tensor(data: &[f32], dims: &[usize]) -> Tensor {
    Tensor::from_slice(data, dims).unwrap()
}

/// A deterministic pseudo-random sequence in [-1, 1).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
