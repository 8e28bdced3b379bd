//! Small queries the pattern-matching passes (LayerNorm, RMS norm, GELU, skip LayerNorm) share:
//! who produces a value, who reads it, whether an operand is a given constant. Patterns are
//! matched by what the nodes compute (op types, constant operands, dims), never by names.

use std::sync::Arc;

use strata_core::DType;
use strata_ops::{build_operator, Attributes, Dim, Fact, OpContext, Operator};

use crate::graph::{NodeId, ValueSource};
use crate::{Graph, Result, ValueId};

/// The graph, its value facts and consumer lists, as one pass sees them.
pub(super) struct View<'g> {
    pub graph: &'g Graph,
    pub facts: &'g [Fact],
    pub consumers: &'g [Vec<NodeId>],
}

impl View<'_> {
    /// The node producing `value`, when its op type is `op` and it has one output.
    pub fn producer(&self, value: ValueId, op: &str) -> Option<usize> {
        match self.graph.values[value.0].source {
            ValueSource::Node(node, 0) => {
                let n = &self.graph.nodes[node.0];
                (n.op.op_type() == op && n.outputs.len() == 1).then_some(node.0)
            }
            _ => None,
        }
    }

    /// The output of node `node` (its only one).
    pub fn out(&self, node: usize) -> ValueId {
        self.graph.nodes[node].outputs[0]
    }

    /// The inputs of a two-input node.
    pub fn pair(&self, node: usize) -> Option<(ValueId, ValueId)> {
        match self.graph.nodes[node].inputs[..] {
            [Some(a), Some(b)] => Some((a, b)),
            _ => None,
        }
    }

    /// Node `node`'s operand other than `value`, for a two-input node reading `value` once.
    pub fn other(&self, node: usize, value: ValueId) -> Option<ValueId> {
        match self.pair(node)? {
            (a, b) if a == value && b != value => Some(b),
            (a, b) if b == value && a != value => Some(a),
            _ => None,
        }
    }

    /// The single reader of `value` (not a graph output), when its op type is `op`.
    pub fn sole_reader(&self, value: ValueId, op: &str) -> Option<usize> {
        match self.consumers[value.0].as_slice() {
            [only] if !self.graph.outputs.contains(&value) => {
                let n = &self.graph.nodes[only.0];
                (n.op.op_type() == op && n.outputs.len() == 1).then_some(only.0)
            }
            _ => None,
        }
    }

    /// Whether `value` is read by exactly the nodes `readers` (in any order) and is not a
    /// graph output: the pattern owns it.
    pub fn read_only_by(&self, value: ValueId, readers: &[usize]) -> bool {
        let c = &self.consumers[value.0];
        !self.graph.outputs.contains(&value)
            && c.len() == readers.len()
            && c.iter().all(|n| readers.contains(&n.0))
    }

    pub fn fact(&self, value: ValueId) -> Option<&Fact> {
        self.facts.get(value.0)
    }

    /// The value of a float constant holding one element (any rank), as f64.
    pub fn scalar(&self, value: ValueId) -> Option<f64> {
        let t = self.fact(value)?.value.as_ref()?;
        if t.numel() != 1 {
            return None;
        }
        match t.dtype() {
            DType::F32 => t.to_vec::<f32>().ok().map(|v| f64::from(v[0])),
            DType::F64 => t.to_vec::<f64>().ok().map(|v| v[0]),
            DType::F16 => t
                .to_vec::<strata_core::f16>()
                .ok()
                .map(|v| f64::from(v[0].to_f32())),
            _ => None,
        }
    }

    /// Whether `value` is a one-element constant within `rel` of `want`.
    pub fn is_const(&self, value: ValueId, want: f64, rel: f64) -> bool {
        self.scalar(value)
            .is_some_and(|v| (v - want).abs() <= rel * want.abs())
    }

    /// In a two-input node reading `value`, the other operand when it is a constant near
    /// `want`.
    pub fn with_const(&self, node: usize, value: ValueId, want: f64, rel: f64) -> bool {
        self.other(node, value)
            .is_some_and(|c| self.is_const(c, want, rel))
    }

    /// Whether `value` has float dims `[…, H]` with a known last dim; returns H.
    pub fn last_dim(&self, value: ValueId) -> Option<usize> {
        let f = self.fact(value)?;
        if !f.dtype.is_float() {
            return None;
        }
        match f.dims.last()? {
            Dim::Known(h) => Some(*h),
            _ => None,
        }
    }
}

/// Builds a standard or com.microsoft operator for a fused node.
pub(super) fn operator(
    op_type: &str,
    domain: &str,
    opset: i64,
    attrs: Attributes,
    num_inputs: usize,
    num_outputs: usize,
) -> Result<Arc<dyn Operator>> {
    let op = build_operator(&OpContext {
        op_type,
        domain,
        opset,
        attrs: &attrs,
        num_inputs,
        num_outputs,
    })?;
    Ok(Arc::from(op))
}

/// Makes node `keep` compute `op` on `inputs`, writing the value `output` (which another node
/// of the pattern produced), and marks the pattern's other nodes for removal.
pub(super) fn replace(
    graph: &mut Graph,
    keep: usize,
    op: Arc<dyn Operator>,
    inputs: Vec<Option<ValueId>>,
    output: ValueId,
    pattern: &[usize],
    dropped: &mut Vec<usize>,
) {
    let old = graph.nodes[keep].outputs.clone();
    for v in old {
        if v != output {
            graph.values[v.0].source = ValueSource::Removed;
        }
    }
    for &n in pattern {
        if n != keep {
            for v in std::mem::take(&mut graph.nodes[n].outputs) {
                if v != output {
                    graph.values[v.0].source = ValueSource::Removed;
                }
            }
            dropped.push(n);
        }
    }
    let node = &mut graph.nodes[keep];
    node.op = op;
    node.inputs = inputs;
    node.outputs = vec![output];
    graph.values[output.0].source = ValueSource::Node(NodeId(keep), 0);
}

/// A short description of a node for the fusion report: `"<op type> <name>"`.
pub(super) fn describe(graph: &Graph, node: usize) -> String {
    let n = &graph.nodes[node];
    format!("{} {}", n.op.op_type(), n.name)
}
