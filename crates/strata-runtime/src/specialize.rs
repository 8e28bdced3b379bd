//! Shape specialization: given the dims of every runtime input, establishes the facts of every
//! value. Shape computations (Shape → Gather → Concat → Reshape, …) are evaluated on the way,
//! so their consumers get concrete dims and the nodes themselves need not run. Values whose
//! dims still are not known depend on data (e.g. NonZero) and take the dynamic path, as do
//! string values (text has no size before it exists).

use strata_core::Tensor;
use strata_ops::{Dim, Fact};

use crate::graph::ValueSource;
use crate::node_eval::{constant_options, eval_node};
use crate::{Graph, Result, RuntimeError};

/// What one set of input dims implies for every value and node.
#[derive(Debug, Clone)]
pub struct Specialization {
    /// Per value: dtype, dims (concrete for static values) and constant value if known.
    pub facts: Vec<Fact>,
    /// Per node: every output is a constant here, so the node is not run.
    pub skip: Vec<bool>,
    /// Per node: output dims depend on data; outputs are allocated when the node runs.
    pub dynamic: Vec<bool>,
    /// Dims of each runtime input, in `Graph::runtime_inputs` order.
    pub input_dims: Vec<Vec<Dim>>,
}

impl Specialization {
    /// True when every runtime input dim is known.
    pub fn is_concrete(&self) -> bool {
        self.input_dims
            .iter()
            .all(|d| d.iter().all(|d| d.known().is_some()))
    }

    /// The concrete dims of a value, if static.
    pub fn dims(&self, value: usize) -> Option<Vec<usize>> {
        self.facts[value].concrete()
    }
}

/// Specializes `graph` for `input_dims` (one entry per runtime input; symbolic dims allowed, in
/// which case dependent values stay symbolic).
pub fn specialize(
    graph: &Graph,
    input_dims: &[Vec<Dim>],
    threads: usize,
) -> Result<Specialization> {
    let mut facts: Vec<Fact> = graph.values.iter().map(|v| v.fact.clone()).collect();
    for (id, dims) in graph.runtime_inputs().zip(input_dims) {
        let declared = &graph.values[id.0].fact;
        facts[id.0] = Fact::new(declared.dtype, dims.clone());
    }
    for (id, value) in graph.values.iter().enumerate() {
        if let ValueSource::Initializer(t) = &value.source {
            facts[id] = Fact::constant(t.clone());
        }
    }
    let mut skip = vec![false; graph.nodes.len()];
    let mut dynamic = vec![false; graph.nodes.len()];
    let absent = Fact::absent();
    for (i, node) in graph.nodes.iter().enumerate() {
        let inputs: Vec<&Fact> = node
            .inputs
            .iter()
            .map(|input| input.map_or(&absent, |id| &facts[id.0]))
            .collect();
        let wrap = |source| {
            RuntimeError::node(
                &node.name,
                node.op.op_type(),
                inputs.iter().filter_map(|f| f.concrete()).collect(),
                source,
            )
        };
        let mut outputs = node.op.infer(&inputs).map_err(wrap)?;
        if outputs.len() < node.outputs.len() {
            return Err(wrap(strata_ops::OpError::shape(
                node.op.op_type(),
                format!(
                    "produces {} outputs but the node names {}",
                    outputs.len(),
                    node.outputs.len()
                ),
            )));
        }
        let all_inputs_known = inputs.iter().all(|f| !f.is_defined() || f.value.is_some());
        if outputs.iter().any(|f| f.value.is_none()) && all_inputs_known && !inputs.is_empty() {
            let tensors: Vec<Tensor> = inputs
                .iter()
                .map(|f| f.value.clone().unwrap_or_else(Tensor::undefined))
                .collect();
            let refs: Vec<&Tensor> = tensors.iter().collect();
            let values = eval_node(node, None, &refs, &constant_options(threads))?;
            outputs = values.into_iter().map(Fact::constant).collect();
        }
        skip[i] = node
            .outputs
            .iter()
            .zip(&outputs)
            .all(|(_, f)| f.value.is_some());
        // Data-dependent ops (NonZero, control flow) run on the dynamic path even when their
        // dims look known: only running them tells (a branch may even change the rank).
        // Text has no fixed size and never lives in the arena: it is made when the node runs.
        dynamic[i] = !skip[i]
            && (node.op.is_data_dependent()
                || outputs
                    .iter()
                    .any(|f| f.concrete().is_none() || f.dtype.is_string()));
        for (&out, fact) in node.outputs.iter().zip(outputs) {
            facts[out.0] = fact;
        }
    }
    Ok(Specialization {
        facts,
        skip,
        dynamic,
        input_dims: input_dims.to_vec(),
    })
}
