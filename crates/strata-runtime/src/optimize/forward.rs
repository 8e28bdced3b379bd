//! Nodes that only pass an input through (Identity, Dropout outside training): their readers
//! read that input instead, and dead-node removal drops them. Inside a plan such a node would
//! copy its input whenever it cannot reuse its memory (a Dropout after a Concat whose inputs
//! were placed in its output, as in SqueezeNet).

use crate::Graph;

/// Rewires the readers of every forwarding node's output to its input; returns how many nodes
/// were bypassed. A node stays when its output is a graph output, or when another of its
/// outputs (Dropout's mask) is read.
pub fn bypass_forwarding_nodes(graph: &mut Graph) -> usize {
    let mut read = vec![false; graph.values.len()];
    for node in &graph.nodes {
        for input in node.inputs.iter().flatten() {
            read[input.0] = true;
        }
    }
    for out in &graph.outputs {
        read[out.0] = true;
    }
    let mut bypassed = 0;
    for i in 0..graph.nodes.len() {
        let node = &graph.nodes[i];
        let Some(from) = node.op.capabilities().forwards_input else {
            continue;
        };
        let (Some(&out), Some(Some(source))) = (node.outputs.first(), node.inputs.get(from)) else {
            continue;
        };
        let source = *source;
        if graph.outputs.contains(&out) || node.outputs[1..].iter().any(|o| read[o.0]) {
            continue;
        }
        for reader in &mut graph.nodes {
            for input in reader.inputs.iter_mut().flatten() {
                if *input == out {
                    *input = source;
                }
            }
        }
        bypassed += 1;
    }
    bypassed
}
