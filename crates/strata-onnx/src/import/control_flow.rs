//! Import of the control-flow nodes (If, Loop, Scan): their graph attributes become
//! [`Subgraph`]s imported with the enclosing graph as outer scope, and the outer values they
//! read become extra node inputs after the formal ones.

use std::collections::HashSet;
use std::sync::Arc;

use strata_ops::{Attributes, Dim, Fact, OpError, Operator};
use strata_runtime::control::{If, Loop, Scan, Subgraph};

use strata_runtime::Graph;

use super::context::input_type;
use crate::proto::{GraphProto, NodeProto};
use crate::{OnnxError, Result};

/// Op types of the default domain that run subgraphs.
pub(crate) fn is_control_flow(op_type: &str) -> bool {
    matches!(op_type, "If" | "Loop" | "Scan")
}

/// Names the node's subgraphs read from enclosing graphs (its implicit inputs).
pub(crate) fn outer_references(node: &NodeProto) -> Vec<String> {
    let mut refs = Vec::new();
    for g in node.attribute.iter().filter_map(|a| a.g.as_ref()) {
        let mut defined = HashSet::new();
        let mut used = Vec::new();
        walk(g, &mut defined, &mut used);
        for name in used {
            if !name.is_empty() && !defined.contains(&name) && !refs.contains(&name) {
                refs.push(name);
            }
        }
    }
    refs
}

/// Every name defined in `g` (recursively) and every name read in it.
fn walk(g: &GraphProto, defined: &mut HashSet<String>, used: &mut Vec<String>) {
    defined.extend(g.input.iter().filter_map(|i| i.name.clone()));
    defined.extend(g.initializer.iter().filter_map(|t| t.name.clone()));
    for node in &g.node {
        defined.extend(node.output.iter().cloned());
        used.extend(node.input.iter().cloned());
        for sub in node.attribute.iter().filter_map(|a| a.g.as_ref()) {
            walk(sub, defined, used);
        }
    }
    used.extend(g.output.iter().filter_map(|o| o.name.clone()));
}

/// Imports a body graph in the enclosing node's scope: the graph and the outer names it captures.
pub(crate) type ImportSubgraph<'a> = dyn Fn(&GraphProto) -> Result<(Graph, Vec<String>)> + 'a;

/// Builds the operator of an If/Loop/Scan node, its bodies imported by `import_subgraph` (the
/// importer, in the node's scope), and returns the outer names its subgraphs capture, which the
/// caller appends to the node's inputs.
pub(crate) fn control_flow_op(
    node: &NodeProto,
    opset: i64,
    attrs: &Attributes,
    import_subgraph: &ImportSubgraph,
) -> Result<(Arc<dyn Operator>, Vec<String>)> {
    let op_type = node.op_type.as_deref().unwrap_or("");
    let name = node.name.clone().unwrap_or_default();
    let op_err = |source: OpError| OnnxError::operator(&name, op_type, source);
    let subgraph = |attr: &str| -> Result<(Subgraph, Vec<String>)> {
        let g = node
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(attr))
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| {
                op_err(OpError::attribute(
                    op_type,
                    attr,
                    "required graph attribute is missing",
                ))
            })?;
        let (graph, captures) = import_subgraph(g)?;
        let declared = g
            .output
            .iter()
            .map(|o| {
                input_type(o).ok().map(|(dtype, dims)| {
                    Fact::new(dtype, dims.into_iter().map(unnamed_unknown).collect())
                })
            })
            .collect();
        Ok((
            Subgraph::new(attr, graph).with_declared_outputs(declared),
            captures,
        ))
    };
    match op_type {
        "If" => {
            let (then_branch, mut captures) = subgraph("then_branch")?;
            let (else_branch, else_captures) = subgraph("else_branch")?;
            captures.extend(else_captures);
            let op = If::new(then_branch, else_branch).map_err(op_err)?;
            Ok((Arc::new(op), captures))
        }
        "Loop" => {
            let (body, captures) = subgraph("body")?;
            let carried = node.input.len().checked_sub(2).ok_or_else(|| {
                op_err(OpError::shape(
                    "Loop",
                    "needs at least the M and cond inputs",
                ))
            })?;
            let op = Loop::new(body, carried).map_err(op_err)?;
            Ok((Arc::new(op), captures))
        }
        "Scan" => {
            let (body, captures) = subgraph("body")?;
            let op = Scan::new(body, node.input.len(), opset, attrs).map_err(op_err)?;
            Ok((Arc::new(op), captures))
        }
        other => Err(op_err(OpError::Unsupported {
            op_type: other.to_string(),
            domain: String::new(),
            opset,
        })),
    }
}

/// Declared dims: fixed sizes stay, symbols (which name nothing outside the body) become unknown.
fn unnamed_unknown(d: Dim) -> Dim {
    match d {
        Dim::Known(n) => Dim::Known(n),
        _ => Dim::Unknown,
    }
}
