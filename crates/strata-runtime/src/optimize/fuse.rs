//! BatchNormalization folded into the weights and bias of the convolution before it (I3), and
//! the graph edits the fusions share.

use strata_core::{DType, MemoryKind, Tensor};
use strata_ops::InferenceBatchNorm;

use crate::graph::{NodeId, ValueSource};
use crate::{Graph, Result, ValueId};

/// The only consumer of `value`, if it has exactly one and is not a graph output.
pub(super) fn sole_consumer(
    graph: &Graph,
    consumers: &[Vec<NodeId>],
    value: ValueId,
) -> Option<usize> {
    match consumers[value.0].as_slice() {
        [only] if !graph.outputs.contains(&value) => Some(only.0),
        _ => None,
    }
}

fn initializer(graph: &Graph, value: Option<ValueId>) -> Option<&Tensor> {
    match &graph.values[value?.0].source {
        ValueSource::Initializer(t) if t.dtype() == DType::F32 => Some(t),
        _ => None,
    }
}

/// Makes `consumer`'s output the output of `producer` and drops `consumer`.
pub(super) fn absorb(graph: &mut Graph, producer: usize, consumer: usize) {
    let old = graph.nodes[producer].outputs[0];
    let new = graph.nodes[consumer].outputs[0];
    graph.nodes[producer].outputs[0] = new;
    graph.values[new.0].source = ValueSource::Node(NodeId(producer), 0);
    graph.values[old.0].source = ValueSource::Removed;
    graph.nodes[consumer].outputs.clear();
}

/// Conv → BatchNormalization with constant parameters becomes one Conv with scaled weights and a
/// shifted bias. Returns how many were folded.
pub fn fold_batch_norms(graph: &mut Graph) -> Result<usize> {
    let consumers = graph.consumers();
    let mut dropped = Vec::new();
    for conv in 0..graph.nodes.len() {
        if graph.nodes[conv].op.op_type() != "Conv" || graph.nodes[conv].outputs.len() != 1 {
            continue;
        }
        let Some(bn) = sole_consumer(graph, &consumers, graph.nodes[conv].outputs[0]) else {
            continue;
        };
        let Some(InferenceBatchNorm { epsilon }) = graph.nodes[bn].op.capabilities().batch_norm
        else {
            continue;
        };
        let bn_inputs = &graph.nodes[bn].inputs;
        if bn_inputs.len() < 5 || graph.nodes[bn].outputs.len() != 1 {
            continue;
        }
        let params: Option<Vec<Vec<f32>>> = bn_inputs[1..5]
            .iter()
            .map(|v| initializer(graph, *v).and_then(|t| t.to_vec::<f32>().ok()))
            .collect();
        let (Some(params), Some(weight)) = (
            params,
            initializer(graph, graph.nodes[conv].inputs.get(1).copied().flatten()),
        ) else {
            continue;
        };
        let out_channels = weight.dims()[0];
        if params.iter().any(|p| p.len() != out_channels) {
            continue;
        }
        let bias = match graph.nodes[conv].inputs.get(2).copied().flatten() {
            Some(b) => match initializer(graph, Some(b)).and_then(|t| t.to_vec::<f32>().ok()) {
                Some(b) => b,
                None => continue,
            },
            None => vec![0.0; out_channels],
        };
        let (scale, shift, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
        let factor: Vec<f32> = (0..out_channels)
            .map(|c| scale[c] / (var[c] + epsilon).sqrt())
            .collect();
        let mut w = weight.to_vec::<f32>()?;
        let per_channel = w.len() / out_channels.max(1);
        for (c, chunk) in w
            .chunks_mut(per_channel.max(1))
            .enumerate()
            .take(out_channels)
        {
            chunk.iter_mut().for_each(|v| *v *= factor[c]);
        }
        let b: Vec<f32> = (0..out_channels)
            .map(|c| (bias[c] - mean[c]) * factor[c] + shift[c])
            .collect();
        let name = graph.nodes[conv].name.clone();
        let w_id = graph.add_initializer(
            &format!("{name}/bn_folded_weight"),
            Tensor::from_slice_in(&w, weight.dims(), MemoryKind::Persistent)?,
        )?;
        let b_id = graph.add_initializer(
            &format!("{name}/bn_folded_bias"),
            Tensor::from_slice_in(&b, &[out_channels], MemoryKind::Persistent)?,
        )?;
        let x = graph.nodes[conv].inputs[0];
        graph.nodes[conv].inputs = vec![x, Some(w_id), Some(b_id)];
        absorb(graph, conv, bn);
        dropped.push(bn);
    }
    remove_nodes(graph, &dropped);
    Ok(dropped.len())
}

pub(super) fn remove_nodes(graph: &mut Graph, dropped: &[usize]) {
    if dropped.is_empty() {
        return;
    }
    let keep: Vec<usize> = (0..graph.nodes.len())
        .filter(|i| !dropped.contains(i))
        .collect();
    graph.reorder(&keep);
}
