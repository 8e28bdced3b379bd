//! The strata graph a (sub)graph is imported into: values by name, sequences resolved while
//! importing, and outer values captured by name from enclosing graphs.

use std::collections::HashMap;
use std::sync::Arc;

use strata_ops::{build_operator, Attributes, OpContext};
use strata_runtime::{Graph, ValueId};

use super::context::Scope;

/// A graph being imported: its values by name, and (for subgraphs) the outer scope.
pub(crate) struct GraphBuilder<'s> {
    pub graph: Graph,
    ids: HashMap<String, ValueId>,
    /// Sequence values resolved while importing: the values of their tensors, in order.
    sequences: HashMap<String, Vec<ValueId>>,
    outer: Option<&'s Scope<'s>>,
    captures: Vec<String>,
}

impl<'s> GraphBuilder<'s> {
    /// An empty graph; `outer` is the enclosing graphs' scope for a subgraph.
    pub fn new(outer: Option<&'s Scope<'s>>) -> Self {
        GraphBuilder {
            graph: Graph::new(),
            ids: HashMap::new(),
            sequences: HashMap::new(),
            outer,
            captures: Vec::new(),
        }
    }

    /// Binds `name` to `id` (an initializer or input; even an empty name).
    pub fn bind(&mut self, name: String, id: ValueId) {
        self.ids.insert(name, id);
    }

    /// Whether `name` is bound in this graph (not counting outer values).
    pub fn is_bound(&self, name: &str) -> bool {
        self.ids.contains_key(name)
    }

    /// The graph and the outer names it captured, in input order.
    pub fn finish(self) -> (Graph, Vec<String>) {
        (self.graph, self.captures)
    }

    /// Names `id` (a node output) for the nodes that follow.
    pub fn define(&mut self, name: &str, id: ValueId) {
        if !name.is_empty() {
            self.ids.insert(name.to_string(), id);
        }
    }

    /// The tensors of the sequence value `name`, if it is one.
    pub fn sequence(&self, name: &str) -> Option<Vec<ValueId>> {
        self.sequences.get(name).cloned()
    }

    pub fn set_sequence(&mut self, name: &str, items: Vec<ValueId>) {
        self.sequences.insert(name.to_string(), items);
    }

    /// The value named `name`: defined here, or captured from an outer graph.
    pub fn resolve(&mut self, name: &str) -> Option<ValueId> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        if !self.outer.is_some_and(|s| s.defines(name)) {
            return None;
        }
        let id = self
            .graph
            .add_input(name, strata_core::DType::F32, Vec::new())
            .ok()?;
        self.ids.insert(name.to_string(), id);
        self.captures.push(name.to_string());
        Some(id)
    }

    /// Subgraph outputs must be node outputs, each listed once, for the runtime to bind them:
    /// an input, a constant or a repeated value goes through an Identity node.
    pub fn outputs_from_nodes(
        &mut self,
        outputs: Vec<ValueId>,
    ) -> strata_runtime::Result<Vec<ValueId>> {
        let mut seen = std::collections::HashSet::new();
        let mut result = Vec::with_capacity(outputs.len());
        for (k, id) in outputs.into_iter().enumerate() {
            let from_node = matches!(
                self.graph.value(id).source,
                strata_runtime::ValueSource::Node(..)
            );
            if from_node && seen.insert(id) {
                result.push(id);
                continue;
            }
            let identity = build_operator(&OpContext {
                op_type: "Identity",
                domain: "",
                opset: 1,
                attrs: &Attributes::new("Identity"),
                num_inputs: 1,
                num_outputs: 1,
            })?;
            let name = format!("{}:output{k}", self.graph.value(id).name);
            let out =
                self.graph
                    .add_node(&name, Arc::from(identity), &[Some(id)], &[name.as_str()])?;
            result.push(out[0]);
        }
        Ok(result)
    }
}
