//! Dead-node removal: drops nodes none of whose outputs reach a graph output, and the unread
//! trailing outputs of operators that can leave them out (Dropout's mask).

use crate::graph::ValueSource;
use crate::Graph;

/// Removes dead nodes; returns how many were removed.
pub fn remove_dead_nodes(graph: &mut Graph) -> usize {
    let mut live_value = vec![false; graph.values.len()];
    for &out in &graph.outputs {
        live_value[out.0] = true;
    }
    let mut live_node = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live_value[o.0]) {
            live_node[i] = true;
            for input in node.inputs.iter().flatten() {
                live_value[input.0] = true;
            }
        }
    }
    drop_unread_trailing_outputs(graph, &live_node, &live_value);
    let keep: Vec<usize> = (0..graph.nodes.len()).filter(|&i| live_node[i]).collect();
    let removed = graph.nodes.len() - keep.len();
    // Dead outputs of removed nodes no longer have a producer.
    for (i, node) in graph.nodes.iter().enumerate() {
        if !live_node[i] {
            for out in &node.outputs {
                graph.values[out.0].source = ValueSource::Removed;
                graph.values[out.0].fact = strata_ops::Fact::absent();
            }
        }
    }
    // Initializers nobody reads release their memory.
    for (id, value) in graph.values.iter_mut().enumerate() {
        if matches!(value.source, ValueSource::Initializer(_)) && !live_value[id] {
            value.source = ValueSource::Removed;
            value.fact = strata_ops::Fact::absent();
        }
    }
    graph.reorder(&keep);
    removed
}

/// Live nodes whose last outputs nobody reads get the operator without them, when it has such a
/// form (`OpCapabilities::trailing_outputs`); those values are removed.
fn drop_unread_trailing_outputs(graph: &mut Graph, live_node: &[bool], live_value: &[bool]) {
    for (i, node) in graph.nodes.iter_mut().enumerate() {
        if !live_node[i] {
            continue;
        }
        let keep = node
            .outputs
            .iter()
            .rposition(|o| live_value[o.0])
            .map_or(0, |p| p + 1);
        if keep == 0 || keep == node.outputs.len() {
            continue;
        }
        let Some(op) = node
            .op
            .capabilities()
            .trailing_outputs
            .and_then(|t| t.keep_outputs(keep))
        else {
            continue;
        };
        node.op = op;
        for out in node.outputs.drain(keep..) {
            graph.values[out.0].source = ValueSource::Removed;
            graph.values[out.0].fact = strata_ops::Fact::absent();
        }
    }
}
