//! The nodes of an ONNX graph in dependency order (files need not list them sorted), counting
//! the outer values a node's subgraphs read as its inputs too.

use std::collections::HashMap;

use super::control_flow::outer_references;
use crate::proto::{GraphProto, NodeProto};

/// The graph's nodes in an order where every value is produced before it is read.
pub(crate) fn topological_nodes(
    graph: &GraphProto,
) -> std::result::Result<Vec<&NodeProto>, String> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(out.as_str(), i).is_some() {
                return Err(format!("value {out:?} is produced by more than one node"));
            }
        }
    }
    let n = graph.node.len();
    // Subgraphs read outer values by name: those are dependencies too.
    let deps: Vec<Vec<String>> = graph
        .node
        .iter()
        .map(|node| {
            let mut d = node.input.clone();
            d.extend(outer_references(node));
            d
        })
        .collect();
    let mut state = vec![0u8; n]; // 0 new, 1 visiting, 2 done
    let mut order = Vec::with_capacity(n);
    for start in 0..n {
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (i, ref mut next)) = stack.last_mut() {
            if *next == 0 {
                if state[i] == 2 {
                    stack.pop();
                    continue;
                }
                state[i] = 1;
            }
            let inputs = &deps[i];
            if let Some(input) = inputs.get(*next) {
                *next += 1;
                if let Some(&p) = producer.get(input.as_str()) {
                    match state[p] {
                        0 => stack.push((p, 0)),
                        1 => return Err(format!("the graph has a cycle through value {input:?}")),
                        _ => {}
                    }
                }
            } else {
                state[i] = 2;
                order.push(&graph.node[i]);
                stack.pop();
            }
        }
    }
    Ok(order)
}
