//! The importer: one ONNX graph (the model's or a subgraph) into a strata graph — initializers,
//! inputs, nodes in dependency order with their operators built — plus the up-front check that
//! names every unsupported operator.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

use strata_ops::{build_operator, is_supported, OpContext};
use strata_runtime::Graph;

use super::attributes::attributes;
use super::context::{defined_names, input_type, node_domain, ImportContext, Scope};
use super::control_flow::{control_flow_op, is_control_flow};
use super::graph_builder::GraphBuilder;
use super::sequences::{is_sequence_op, lower_sequence_op};
use super::topological::topological_nodes;
use crate::proto::{GraphProto, NodeProto};
use crate::{tensor_from_proto, OnnxError, Result};

/// Imports one graph. A subgraph (`outer` set) reads outer values by name: each becomes an
/// extra graph input after its formal ones, and its name is returned among the captures, in
/// input order, for the node that runs the subgraph to pass in.
pub(crate) fn import_graph(
    graph_proto: &GraphProto,
    ctx: &ImportContext,
    outer: Option<&Scope>,
) -> Result<(Graph, Vec<String>)> {
    let mut b = GraphBuilder::new(outer);
    for tp in &graph_proto.initializer {
        let name = tp.name.clone().unwrap_or_default();
        let tensor = tensor_from_proto(tp, ctx.weights)?;
        let id = b
            .graph
            .add_initializer(&name, tensor)
            .map_err(|e| ctx.model_err(e.to_string()))?;
        b.bind(name, id);
    }
    for input in &graph_proto.input {
        let name = input.name.clone().unwrap_or_default();
        // Older IR versions list initializers among the inputs: they stay constants.
        if b.is_bound(&name) {
            continue;
        }
        // A subgraph's inputs get their types from the node that runs it.
        let (dtype, dims) = match outer {
            None => input_type(input).map_err(|m| ctx.model_err(m))?,
            Some(_) => (strata_core::DType::F32, Vec::new()),
        };
        let id = b
            .graph
            .add_input(&name, dtype, dims)
            .map_err(|e| ctx.model_err(e.to_string()))?;
        b.bind(name, id);
    }
    let scope = Scope {
        names: defined_names(graph_proto),
        parent: outer,
    };
    for node in topological_nodes(graph_proto).map_err(|m| ctx.model_err(m))? {
        add_node(&mut b, node, ctx, &scope)?;
    }
    let mut outputs = Vec::with_capacity(graph_proto.output.len());
    for o in &graph_proto.output {
        let name = o.name.clone().unwrap_or_default();
        let id = b
            .resolve(&name)
            .ok_or_else(|| ctx.model_err(format!("graph output {name:?} is never produced")))?;
        outputs.push(id);
    }
    if outer.is_some() {
        outputs = b
            .outputs_from_nodes(outputs)
            .map_err(|e| ctx.model_err(e.to_string()))?;
    }
    b.graph.set_outputs(&outputs);
    Ok(b.finish())
}

/// One error naming every unsupported op type with its nodes and opset (I4).
pub(crate) fn check_supported(graph: &GraphProto, opsets: &HashMap<String, i64>) -> Result<()> {
    let mut missing: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    collect_unsupported(graph, &mut missing);
    if missing.is_empty() {
        return Ok(());
    }
    let ops = missing
        .into_iter()
        .map(|((domain, op_type), nodes)| {
            let opset = opsets.get(&domain).copied().unwrap_or(1);
            let qualified = if domain.is_empty() {
                op_type
            } else {
                format!("{domain}::{op_type}")
            };
            format!("{qualified} (opset {opset}; nodes {})", nodes.join(", "))
        })
        .collect();
    Err(OnnxError::UnsupportedOperators { ops })
}

/// Unsupported (domain, op type) → node names, in `graph` and its subgraphs.
fn collect_unsupported(graph: &GraphProto, missing: &mut BTreeMap<(String, String), Vec<String>>) {
    for (i, node) in graph.node.iter().enumerate() {
        let op_type = node.op_type.as_deref().unwrap_or("");
        let domain = node_domain(node);
        for sub in node.attribute.iter().filter_map(|a| a.g.as_ref()) {
            collect_unsupported(sub, missing);
        }
        let control = domain.is_empty() && (is_control_flow(op_type) || is_sequence_op(op_type));
        if !control && !is_supported(domain, op_type) {
            let name = node
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("#{i}"));
            missing
                .entry((domain.to_string(), op_type.to_string()))
                .or_default()
                .push(name);
        }
    }
}

fn add_node(
    b: &mut GraphBuilder,
    node: &NodeProto,
    ctx: &ImportContext,
    scope: &Scope,
) -> Result<()> {
    let op_type = node.op_type.as_deref().unwrap_or("");
    let domain = node_domain(node);
    let name = node.name.clone().unwrap_or_default();
    let node_err = |message: String| OnnxError::Node {
        node: name.clone(),
        op: op_type.to_string(),
        message,
    };
    let attrs = attributes(node).map_err(node_err)?;
    let opset = ctx.opsets.get(domain).copied().unwrap_or(1);
    let op_err = |source| OnnxError::operator(&name, op_type, source);
    if domain.is_empty() && is_sequence_op(op_type) {
        return lower_sequence_op(b, node, &attrs);
    }
    if let Some(seq) = node.input.iter().find(|n| b.sequence(n).is_some()) {
        return Err(op_err(strata_ops::OpError::Unsupported {
            op_type: format!("{op_type} reading the sequence {seq:?}"),
            domain: domain.to_string(),
            opset,
        }));
    }
    let (op, captures): (Arc<dyn strata_ops::Operator>, Vec<String>) =
        if domain.is_empty() && is_control_flow(op_type) {
            let import_subgraph = |g: &GraphProto| import_graph(g, ctx, Some(scope));
            control_flow_op(node, opset, &attrs, &import_subgraph)?
        } else {
            let op = build_operator(&OpContext {
                op_type,
                domain,
                opset,
                attrs: &attrs,
                num_inputs: node.input.len(),
                num_outputs: node.output.len(),
            })
            .map_err(op_err)?;
            (Arc::from(op), Vec::new())
        };
    let inputs = node
        .input
        .iter()
        .chain(&captures)
        .map(|input| {
            if input.is_empty() {
                Ok(None)
            } else {
                b.resolve(input)
                    .map(Some)
                    .ok_or_else(|| node_err(format!("reads {input:?}, which nothing produces")))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let outputs: Vec<&str> = node.output.iter().map(String::as_str).collect();
    let out_ids = b
        .graph
        .add_node(&name, op, &inputs, &outputs)
        .map_err(|e| node_err(e.to_string()))?;
    for (out, id) in node.output.iter().zip(out_ids) {
        b.define(out, id);
    }
    Ok(())
}
