//! Constant folding: every node whose inputs are all constants is evaluated once, at plan
//! time, and its outputs become initializers in `Persistent` memory.

use strata_core::Tensor;

use crate::graph::ValueSource;
use crate::node_eval::{constant_options, eval_node};
use crate::{Graph, Result};

/// Folds constant nodes in topological order; returns how many were folded.
pub fn fold_constants(graph: &mut Graph, threads: usize) -> Result<usize> {
    let mut keep = Vec::with_capacity(graph.nodes.len());
    let mut folded = 0;
    for (i, node) in graph.nodes.iter().enumerate() {
        let constant_inputs: Option<Vec<Tensor>> = node
            .inputs
            .iter()
            .map(|input| match input {
                None => Some(Tensor::undefined()),
                Some(id) => match &graph.values[id.0].source {
                    ValueSource::Initializer(t) => Some(t.clone()),
                    _ => None,
                },
            })
            .collect();
        let Some(inputs) = constant_inputs else {
            keep.push(i);
            continue;
        };
        if node.op.is_data_dependent() && inputs.iter().any(|t| !t.is_defined()) {
            keep.push(i);
            continue;
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outputs = eval_node(node, None, &refs, &constant_options(threads))?;
        for (&out, tensor) in node.outputs.iter().zip(outputs) {
            let value = &mut graph.values[out.0];
            value.fact = strata_ops::Fact::constant(tensor.clone());
            value.source = ValueSource::Initializer(tensor);
        }
        folded += 1;
    }
    graph.reorder(&keep);
    Ok(folded)
}
