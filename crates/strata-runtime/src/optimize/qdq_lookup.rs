//! QDQ element-wise chains as lookup tables: `DequantizeLinear → element-wise float ops with
//! constant operands → QuantizeLinear` maps each 8-bit input value (per channel, when an
//! operand varies along axis 1) to one 8-bit output value, so the chain becomes a
//! `QuantizedLookup` whose tables are computed at plan time by running the chain's own nodes on
//! every byte value. Results are the float chain's exactly. This covers what the QLinear
//! rewrite (`qdq.rs`) does not: BatchNormalization left between two QDQ pairs (a model
//! quantized without pre-processing), activations (Relu, Clip, Sigmoid, HardSwish, ...),
//! constant scalings, a plain requantization (`DequantizeLinear → QuantizeLinear`).
//!
//! Runs after constant folding (a chain's constants are often DequantizeLinear nodes of
//! constants, folded by then). A chain qualifies when each float value in it feeds only the
//! next node (and is no graph output), the shape never grows by broadcasting, and every
//! constant (including the Q/DQ parameters) is one value or varies only along axis 1.

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_ops::ops::quantization::lookup::{QuantizedLookup, TABLE_LEN};
use strata_ops::{Dim, Fact};

use crate::graph::{Node, NodeId, ValueSource};
use crate::node_eval::{constant_options, eval_node};
use crate::optimize::epilogue::value_facts;
use crate::{Graph, Result, ValueId};

/// Element-wise ops a chain may hold (with their other inputs constant).
const ELEMENT_WISE: &[&str] = &[
    "Abs",
    "Add",
    "BatchNormalization",
    "Clip",
    "Div",
    "Elu",
    "Erf",
    "Exp",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "Max",
    "Min",
    "Mul",
    "Neg",
    "Pow",
    "PRelu",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Tanh",
];

/// Float nodes a chain may hold at most.
const MAX_CHAIN: usize = 4;

fn initializer(graph: &Graph, value: ValueId) -> Option<&Tensor> {
    match &graph.values[value.0].source {
        ValueSource::Initializer(t) => Some(t),
        _ => None,
    }
}

fn producer(graph: &Graph, value: ValueId) -> Option<usize> {
    match graph.values[value.0].source {
        ValueSource::Node(NodeId(i), 0) => Some(i),
        _ => None,
    }
}

/// How a constant of dims `dims` spreads over an input of rank `rank`: `Some(false)` one value,
/// `Some(true)` one per channel of axis 1 (`channels`), `None` anything else.
fn broadcast_kind(dims: &[usize], rank: usize, channels: Option<usize>) -> Option<bool> {
    if dims.iter().product::<usize>() == 1 {
        return Some(false);
    }
    if dims.len() > rank || rank < 2 {
        return None;
    }
    let offset = rank - dims.len();
    let mut per_channel = false;
    for (i, &d) in dims.iter().enumerate() {
        if offset + i == 1 && Some(d) == channels {
            per_channel = true;
        } else if d != 1 {
            return None;
        }
    }
    Some(per_channel)
}

/// A Q/DQ node's parameters: `Some(false)` per tensor, `Some(true)` per channel of axis 1.
fn qdq_params_kind(
    graph: &Graph,
    node: &Node,
    rank: usize,
    channels: Option<usize>,
) -> Option<bool> {
    let q = node.op.capabilities().linear_quantization?;
    if q.block_size != 0 {
        return None;
    }
    let mut per_channel = false;
    for k in 1..node.inputs.len() {
        let Some(id) = node.inputs[k] else { continue };
        let t = initializer(graph, id)?;
        if t.numel() == 1 {
            continue;
        }
        let axis = if q.axis < 0 {
            q.axis + rank as i64
        } else {
            q.axis
        };
        if t.rank() != 1 || axis != 1 || Some(t.numel()) != channels {
            return None;
        }
        per_channel = true;
    }
    Some(per_channel)
}

/// A qualifying chain ending at QuantizeLinear node `q`: the DequantizeLinear and the float
/// nodes from it to `q` (in order), and whether a table per channel is needed.
fn chain(
    graph: &Graph,
    facts: &[Fact],
    consumers: &[Vec<NodeId>],
    q: usize,
) -> Option<(usize, Vec<usize>, bool)> {
    let q_node = &graph.nodes[q];
    if q_node.op.op_type() != "QuantizeLinear" || q_node.outputs.len() != 1 {
        return None;
    }
    let out_dtype = facts
        .get(q_node.outputs[0].0)
        .filter(|f| f.is_defined())?
        .dtype;
    if !matches!(out_dtype, DType::U8 | DType::I8) {
        return None;
    }
    let mut nodes = Vec::new();
    let mut value = q_node.inputs.first().copied().flatten()?;
    let dq = loop {
        let p = producer(graph, value)?;
        let node = &graph.nodes[p];
        if node.op.op_type() == "DequantizeLinear" {
            break p;
        }
        // Every float value of the chain feeds only the next node.
        let next = nodes.last().copied().unwrap_or(q);
        if consumers[value.0].as_slice() != [NodeId(next)]
            || graph.outputs.contains(&value)
            || nodes.len() == MAX_CHAIN
            || node.outputs.len() != 1
            || !ELEMENT_WISE.contains(&node.op.op_type())
        {
            return None;
        }
        // Exactly one input is not a constant: the chain's value.
        let mut data = None;
        for id in node.inputs.iter().flatten() {
            if initializer(graph, *id).is_none() {
                if data.is_some() {
                    return None;
                }
                data = Some(*id);
            }
        }
        nodes.push(p);
        value = data?;
    };
    nodes.reverse();
    let dq_node = &graph.nodes[dq];
    let x = dq_node.inputs.first().copied().flatten()?;
    let x_fact = facts.get(x.0).filter(|f| f.is_defined())?;
    if !matches!(x_fact.dtype, DType::U8 | DType::I8) || x_fact.rank() == 0 {
        return None;
    }
    // No broadcast may grow the shape.
    let q_dims = &facts.get(q_node.inputs[0]?.0)?.dims;
    if q_dims != &x_fact.dims || q_dims.iter().any(|d| matches!(d, Dim::Unknown)) {
        return None;
    }
    let rank = x_fact.rank();
    let channels = x_fact.dims.get(1).and_then(|d| d.known());
    let mut per_channel = qdq_params_kind(graph, dq_node, rank, channels)?
        | qdq_params_kind(graph, q_node, rank, channels)?;
    for &p in &nodes {
        // BatchNormalization's parameters run along axis 1 whatever their rank; the other
        // ops broadcast numpy-style.
        let batch_norm = graph.nodes[p].op.op_type() == "BatchNormalization";
        for id in graph.nodes[p].inputs.iter().flatten() {
            if let Some(t) = initializer(graph, *id) {
                per_channel |= if batch_norm {
                    match t.numel() {
                        1 => false,
                        len if t.rank() == 1 && Some(len) == channels && rank >= 2 => true,
                        _ => return None,
                    }
                } else {
                    broadcast_kind(t.dims(), rank, channels)?
                };
            }
        }
    }
    Some((dq, nodes, per_channel))
}

/// Runs `node` with its chain input replaced by `value` (its other inputs are constants).
fn run_with(graph: &Graph, node: &Node, value: Tensor, threads: usize) -> Result<Tensor> {
    let mut replaced = Some(value);
    let inputs: Vec<Tensor> = node
        .inputs
        .iter()
        .map(|input| match input.and_then(|id| initializer(graph, id)) {
            Some(t) => t.clone(),
            None if input.is_some() => replaced.take().unwrap_or_else(Tensor::undefined),
            None => Tensor::undefined(),
        })
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let mut outputs = eval_node(node, None, &refs, &constant_options(threads))?;
    Ok(outputs.swap_remove(0))
}

/// The tables of a chain: every byte value (per channel) through its nodes.
fn tables(
    graph: &Graph,
    facts: &[Fact],
    (dq, nodes, per_channel): (usize, &[usize], bool),
    q: usize,
    threads: usize,
) -> Result<Option<(DType, DType, Vec<u8>)>> {
    let x = graph.nodes[dq].inputs[0].expect("checked by `chain`");
    let fact = &facts[x.0];
    let channels = if per_channel {
        match fact.dims.get(1).and_then(|d| d.known()) {
            Some(c) => c,
            None => return Ok(None),
        }
    } else {
        1
    };
    // Dims [256, C, 1, ...] of the input's rank: byte value v of channel c at v * C + c.
    let mut dims = vec![1usize; fact.rank()];
    dims[0] = TABLE_LEN;
    if fact.rank() > 1 {
        dims[1] = channels;
    }
    let bytes: Vec<u8> = (0..TABLE_LEN * channels)
        .map(|i| (i / channels) as u8)
        .collect();
    let input = match fact.dtype {
        DType::U8 => Tensor::from_slice(&bytes, &dims)?,
        DType::I8 => {
            let signed: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
            Tensor::from_slice(&signed, &dims)?
        }
        _ => return Ok(None),
    };
    let mut value = run_with(graph, &graph.nodes[dq], input, threads)?;
    for &p in nodes {
        value = run_with(graph, &graph.nodes[p], value, threads)?;
    }
    let out = run_with(graph, &graph.nodes[q], value, threads)?;
    let raw: Vec<u8> = match out.dtype() {
        DType::U8 => out.to_vec::<u8>()?,
        DType::I8 => out.to_vec::<i8>()?.into_iter().map(|v| v as u8).collect(),
        _ => return Ok(None),
    };
    if raw.len() != TABLE_LEN * channels {
        return Ok(None);
    }
    let mut table = vec![0u8; TABLE_LEN * channels];
    for (i, &b) in raw.iter().enumerate() {
        let (v, c) = (i / channels, i % channels);
        table[c * TABLE_LEN + v] = b;
    }
    Ok(Some((fact.dtype, out.dtype(), table)))
}

/// Rewrites every qualifying chain's QuantizeLinear into a lookup of the DequantizeLinear's
/// 8-bit input; the chain's float nodes are left for dead-node removal. Returns how many.
pub fn lookup_qdq(graph: &mut Graph, threads: usize) -> Result<usize> {
    let consumers = graph.consumers();
    let facts = value_facts(graph, threads);
    let mut rewritten = 0;
    for q in 0..graph.nodes.len() {
        let Some((dq, nodes, per_channel)) = chain(graph, &facts, &consumers, q) else {
            continue;
        };
        let Some((input, output, table)) =
            tables(graph, &facts, (dq, &nodes, per_channel), q, threads)?
        else {
            continue;
        };
        let Ok(op) = QuantizedLookup::new(input, output, table) else {
            continue;
        };
        let x = graph.nodes[dq].inputs[0];
        let node = &mut graph.nodes[q];
        node.op = Arc::new(op);
        node.inputs = vec![x];
        rewritten += 1;
    }
    Ok(rewritten)
}
