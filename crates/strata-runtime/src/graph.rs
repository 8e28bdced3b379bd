//! The graph IR: values (inputs, initializers, node outputs) and nodes in a validated
//! topological order.

use std::collections::HashMap;
use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_ops::{Dim, Fact, Operator};

use crate::{Result, RuntimeError};

/// Index of a value in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// Index of a node in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// Where a value comes from.
#[derive(Debug, Clone)]
pub enum ValueSource {
    /// Fed by the caller at run time.
    Input,
    /// A weight or folded constant.
    Initializer(Tensor),
    /// A weight every reader packed into its own layout when the plan was built: the original
    /// is freed, only its type and dims remain, and runs bind an undefined tensor in its place.
    Packed { dtype: DType, dims: Vec<usize> },
    /// Output `index` of a node.
    Node(NodeId, usize),
    /// Produced by a node that optimization removed, or an initializer nobody reads.
    Removed,
}

#[derive(Debug, Clone)]
pub struct Value {
    pub name: String,
    /// Declared dtype and dims (for inputs), or what inference last established.
    pub fact: Fact,
    pub source: ValueSource,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub op: Arc<dyn Operator>,
    /// `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

/// A dataflow graph. Build it with `add_*`, then `sort` puts the nodes in topological order
/// (rejecting cycles and undefined values).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    by_name: HashMap<String, ValueId>,
}

impl Graph {
    pub fn new() -> Self {
        Graph::default()
    }

    fn add_value(&mut self, name: &str, fact: Fact, source: ValueSource) -> Result<ValueId> {
        if !name.is_empty() && self.by_name.contains_key(name) {
            return Err(RuntimeError::DuplicateValue {
                name: name.to_string(),
            });
        }
        let id = ValueId(self.values.len());
        self.values.push(Value {
            name: name.to_string(),
            fact,
            source,
        });
        if !name.is_empty() {
            self.by_name.insert(name.to_string(), id);
        }
        Ok(id)
    }

    /// Declares a graph input; dims may be symbolic.
    pub fn add_input(
        &mut self,
        name: &str,
        dtype: strata_core::DType,
        dims: Vec<Dim>,
    ) -> Result<ValueId> {
        let id = self.add_value(name, Fact::new(dtype, dims), ValueSource::Input)?;
        self.inputs.push(id);
        Ok(id)
    }

    /// Adds a constant (weight).
    pub fn add_initializer(&mut self, name: &str, tensor: Tensor) -> Result<ValueId> {
        self.add_value(
            name,
            Fact::constant(tensor.clone()),
            ValueSource::Initializer(tensor),
        )
    }

    /// Adds a node reading `inputs` and defining new values named `outputs` (an empty name makes
    /// an anonymous, unused output).
    pub fn add_node(
        &mut self,
        name: &str,
        op: Arc<dyn Operator>,
        inputs: &[Option<ValueId>],
        outputs: &[&str],
    ) -> Result<Vec<ValueId>> {
        let node = NodeId(self.nodes.len());
        for input in inputs.iter().flatten() {
            if input.0 >= self.values.len() {
                return Err(RuntimeError::UndefinedValue {
                    node: name.to_string(),
                    value: input.0,
                });
            }
        }
        let mut ids = Vec::with_capacity(outputs.len());
        for (i, out) in outputs.iter().enumerate() {
            let unnamed = format!("{name}:{i}");
            let value_name = if out.is_empty() {
                unnamed.as_str()
            } else {
                out
            };
            ids.push(self.add_value(value_name, Fact::absent(), ValueSource::Node(node, i))?);
        }
        let name = if name.is_empty() {
            format!("{}_{}", op.op_type(), node.0)
        } else {
            name.to_string()
        };
        self.nodes.push(Node {
            name,
            op,
            inputs: inputs.to_vec(),
            outputs: ids.clone(),
        });
        Ok(ids)
    }

    pub fn set_outputs(&mut self, outputs: &[ValueId]) {
        self.outputs = outputs.to_vec();
    }

    pub fn value_id(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    /// Value ids of the inputs that are not initializers (old IR versions list weights as inputs).
    pub fn runtime_inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.inputs
            .iter()
            .copied()
            .filter(|&id| matches!(self.values[id.0].source, ValueSource::Input))
    }

    /// Puts nodes in topological order (stable for already-ordered graphs) and checks that every
    /// value read is defined and there are no cycles.
    pub fn sort(&mut self) -> Result<()> {
        let n = self.nodes.len();
        let mut indegree = vec![0usize; n];
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            for input in node.inputs.iter().flatten() {
                match &self.values[input.0].source {
                    ValueSource::Node(producer, _) => {
                        if producer.0 == i {
                            return Err(RuntimeError::ReadsOwnOutput {
                                node: node.name.clone(),
                            });
                        }
                        indegree[i] += 1;
                        consumers[producer.0].push(i);
                    }
                    ValueSource::Input
                    | ValueSource::Initializer(_)
                    | ValueSource::Packed { .. } => {}
                    ValueSource::Removed => {
                        return Err(RuntimeError::ReadsRemovedValue {
                            node: node.name.clone(),
                            value: self.values[input.0].name.clone(),
                        });
                    }
                }
            }
        }
        // Kahn's algorithm with a min-heap keeps the original order where possible.
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
            .filter(|&i| indegree[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &c in &consumers[i] {
                indegree[c] -= 1;
                if indegree[c] == 0 {
                    ready.push(std::cmp::Reverse(c));
                }
            }
        }
        if order.len() != n {
            let nodes: Vec<String> = (0..n)
                .filter(|&i| indegree[i] > 0)
                .map(|i| self.nodes[i].name.clone())
                .take(5)
                .collect();
            return Err(RuntimeError::Cycle { nodes });
        }
        self.reorder(&order);
        for &out in &self.outputs {
            if out.0 >= self.values.len() {
                return Err(RuntimeError::UndefinedOutput { value: out.0 });
            }
        }
        Ok(())
    }

    /// Keeps only the nodes listed (in that order) and renumbers them.
    pub(crate) fn reorder(&mut self, order: &[usize]) {
        let mut old: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        for (new_index, &old_index) in order.iter().enumerate() {
            if let Some(node) = old[old_index].take() {
                for (i, out) in node.outputs.iter().enumerate() {
                    self.values[out.0].source = ValueSource::Node(NodeId(new_index), i);
                }
                self.nodes.push(node);
            }
        }
    }

    /// For each value, the nodes that read it (in node order).
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut consumers = vec![Vec::new(); self.values.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for input in node.inputs.iter().flatten() {
                if consumers[input.0].last() != Some(&NodeId(i)) {
                    consumers[input.0].push(NodeId(i));
                }
            }
        }
        consumers
    }
}
