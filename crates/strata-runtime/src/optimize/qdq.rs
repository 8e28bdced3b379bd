//! QDQ graphs run as integer graphs: `DequantizeLinear → op → QuantizeLinear`, the form
//! onnxruntime's static quantizer writes, becomes the QLinear operator that computes `op` on
//! the 8-bit tensors directly (as onnxruntime's own QDQ transformer does):
//!
//! | float op | becomes |
//! | --- | --- |
//! | Conv (weights per tensor or per output channel, optional int32 bias through a DequantizeLinear) | QLinearConv |
//! | MatMul (B per tensor or per column) | QLinearMatMul |
//! | Add, Mul | com.microsoft QLinearAdd, QLinearMul |
//! | GlobalAveragePool, AveragePool | com.microsoft QLinearGlobalAveragePool, QLinearAveragePool |
//! | Gemm (alpha, beta 1; B per tensor or per column; optional int32 bias at a_scale · b_scale) | com.microsoft QGemm |
//! | Concat (every input per tensor) | com.microsoft QLinearConcat |
//! | MaxPool, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity (same Q and DQ parameters) | the same op on the 8-bit tensor |
//!
//! A node is rewritten only when every data input comes from a DequantizeLinear of an 8-bit
//! tensor with constant scale and zero point, its one output feeds only a QuantizeLinear with
//! constant scalar parameters (and is not a graph output). The QuantizeLinear goes away; the
//! DequantizeLinear nodes stay for any other reader and dead-node removal drops the rest. Runs
//! before constant folding, which would otherwise turn the weights' DequantizeLinear into float
//! initializers.

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_ops::{build_operator, Attributes, OpContext, Operator};

use crate::graph::{Node, NodeId, ValueSource};
use crate::{Graph, Result, ValueId};

/// A constant input of a Q/DQ node.
fn constant(graph: &Graph, value: Option<ValueId>) -> Option<&Tensor> {
    match &graph.values[value?.0].source {
        ValueSource::Initializer(t) => Some(t),
        _ => None,
    }
}

/// The quantized side of a DequantizeLinear feeding an op: its 8-bit input and the constant
/// scale and zero point (value ids), and how many scales it has.
#[derive(Debug, Clone, Copy)]
struct Dequantized {
    x: ValueId,
    scale: ValueId,
    zero: ValueId,
    dtype: DType,
    scales: usize,
    axis: i64,
}

fn dequantized(graph: &Graph, value: ValueId) -> Option<Dequantized> {
    let ValueSource::Node(NodeId(producer), 0) = graph.values[value.0].source else {
        return None;
    };
    let node = &graph.nodes[producer];
    let q = node.op.capabilities().linear_quantization?;
    if node.op.op_type() != "DequantizeLinear" || q.block_size != 0 || node.inputs.len() < 3 {
        return None;
    }
    let (x, scale_id, zero_id) = (node.inputs[0]?, node.inputs[1]?, node.inputs[2]?);
    let scale = constant(graph, Some(scale_id))?;
    let zero = constant(graph, Some(zero_id))?;
    let dtype = zero.dtype();
    let ok = scale.dtype() == DType::F32
        && matches!(dtype, DType::U8 | DType::I8 | DType::I32)
        && scale.numel() == zero.numel()
        && scale.rank() <= 1;
    ok.then_some(Dequantized {
        x,
        scale: scale_id,
        zero: zero_id,
        dtype,
        scales: scale.numel(),
        axis: q.axis,
    })
}

/// The QuantizeLinear that alone reads `value`: its output and scalar scale and zero point.
fn quantized_by(
    graph: &Graph,
    consumers: &[Vec<NodeId>],
    value: ValueId,
) -> Option<(usize, ValueId, ValueId, ValueId, DType)> {
    let [NodeId(q)] = consumers[value.0].as_slice() else {
        return None;
    };
    if graph.outputs.contains(&value) {
        return None;
    }
    let node = &graph.nodes[*q];
    if node.op.op_type() != "QuantizeLinear" || node.inputs.len() < 3 || node.outputs.len() != 1 {
        return None;
    }
    node.op.capabilities().linear_quantization?;
    let (scale_id, zero_id) = (node.inputs[1]?, node.inputs[2]?);
    let (scale, zero) = (
        constant(graph, Some(scale_id))?,
        constant(graph, Some(zero_id))?,
    );
    let ok = scale.dtype() == DType::F32
        && scale.numel() == 1
        && zero.numel() == 1
        && matches!(zero.dtype(), DType::U8 | DType::I8);
    ok.then_some((*q, node.outputs[0], scale_id, zero_id, zero.dtype()))
}

fn microsoft(op_type: &str) -> Option<Box<dyn Operator>> {
    let attrs = Attributes::new(op_type);
    build_operator(&OpContext {
        op_type,
        domain: "com.microsoft",
        opset: 1,
        attrs: &attrs,
        num_inputs: 8,
        num_outputs: 1,
    })
    .ok()
}

fn onnx(op_type: &str) -> Option<Box<dyn Operator>> {
    let attrs = Attributes::new(op_type);
    build_operator(&OpContext {
        op_type,
        domain: "",
        opset: 21,
        attrs: &attrs,
        num_inputs: 8,
        num_outputs: 1,
    })
    .ok()
}

/// A QLinear operator and the inputs it reads.
type Replacement = (Box<dyn Operator>, Vec<Option<ValueId>>);

/// The QLinear replacement of node `i` and its inputs, or `None` when it does not qualify.
fn rewrite(graph: &Graph, i: usize, output: (ValueId, ValueId, DType)) -> Option<Replacement> {
    let node = &graph.nodes[i];
    let (out_scale, out_zero, out_dtype) = output;
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    let data = |k: usize| dequantized(graph, input(k)?).filter(|d| d.dtype != DType::I32);
    let scalar = |d: &Dequantized| d.scales == 1;
    let triple = |d: &Dequantized| [Some(d.x), Some(d.scale), Some(d.zero)];
    let (op, data_inputs): (Box<dyn Operator>, Vec<Dequantized>) = match node.op.op_type() {
        "Conv" => {
            let (x, w) = (data(0).filter(scalar)?, data(1)?);
            // Per-channel weights must run along the output channels.
            if !scalar(&w) && w.axis != 0 {
                return None;
            }
            (node.op.capabilities().qlinear?.qlinear()?, vec![x, w])
        }
        "MatMul" => {
            let (a, b) = (data(0).filter(scalar)?, data(1)?);
            let b_rank = graph.values[b.x.0].fact.rank();
            if !scalar(&b) && !(b_rank == 2 && (b.axis == 1 || b.axis == -1)) {
                return None;
            }
            (onnx("QLinearMatMul")?, vec![a, b])
        }
        "Add" | "Mul" => {
            let (a, b) = (data(0).filter(scalar)?, data(1).filter(scalar)?);
            if a.dtype != out_dtype || b.dtype != out_dtype {
                return None;
            }
            let name = if node.op.op_type() == "Add" {
                "QLinearAdd"
            } else {
                "QLinearMul"
            };
            (microsoft(name)?, vec![a, b])
        }
        "GlobalAveragePool" => {
            let x = data(0).filter(scalar)?;
            if x.dtype != out_dtype {
                return None;
            }
            (microsoft("QLinearGlobalAveragePool")?, vec![x])
        }
        "AveragePool" => {
            let x = data(0).filter(scalar)?;
            if x.dtype != out_dtype {
                return None;
            }
            (node.op.capabilities().qlinear?.qlinear()?, vec![x])
        }
        "Gemm" => return gemm(graph, node, output),
        "Concat" => return concat(graph, node, output),
        _ => return None,
    };
    let mut inputs: Vec<Option<ValueId>> = data_inputs.iter().flat_map(triple).collect();
    inputs.extend([Some(out_scale), Some(out_zero)]);
    if node.op.op_type() == "Conv" {
        if let Some(bias) = input(2) {
            // Only an int32 bias already quantized at x_scale * w_scale (what the quantizer
            // writes) carries over; a float bias keeps the float graph.
            let b = dequantized(graph, bias).filter(|b| b.dtype == DType::I32)?;
            let zero = constant(graph, Some(b.zero))?;
            if zero.to_vec::<i32>().ok()?.iter().any(|&z| z != 0) {
                return None;
            }
            inputs.push(Some(b.x));
        }
    } else if node.inputs.len() > data_inputs.len() {
        return None;
    }
    Some((op, inputs))
}

/// Gemm → com.microsoft QGemm: inputs (A, a_scale, a_zero, B, b_scale, b_zero, C, y_scale,
/// y_zero). A per tensor; B per tensor or per column (along N); C, if any, an int32 constant at
/// `a_scale · b_scale` with zero point 0, as the quantizer writes it.
fn gemm(graph: &Graph, node: &Node, output: (ValueId, ValueId, DType)) -> Option<Replacement> {
    let form = node.op.capabilities().qlinear?;
    let input = |k: usize| node.inputs.get(k).copied().flatten();
    let data = |k: usize| dequantized(graph, input(k)?).filter(|d| d.dtype != DType::I32);
    let (a, b) = (data(0).filter(|d| d.scales == 1)?, data(1)?);
    if b.scales != 1 {
        let axis = form.weight_channel_axis()?;
        let rank = graph.values[b.x.0].fact.rank();
        if rank != 2 || normalized(b.axis, rank)? != axis {
            return None;
        }
    }
    let bias = match input(2) {
        None => None,
        Some(c) => {
            let c = dequantized(graph, c).filter(|c| c.dtype == DType::I32)?;
            bias_at_product_scale(graph, &c, &a, &b)?;
            Some(c.x)
        }
    };
    if node.inputs.len() > 3 {
        return None;
    }
    let (out_scale, out_zero, _) = output;
    let inputs = vec![
        Some(a.x),
        Some(a.scale),
        Some(a.zero),
        Some(b.x),
        Some(b.scale),
        Some(b.zero),
        bias,
        Some(out_scale),
        Some(out_zero),
    ];
    Some((form.qlinear()?, inputs))
}

/// `axis` of a rank-`rank` tensor as an index.
fn normalized(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    (-r..r).contains(&axis).then(|| axis.rem_euclid(r) as usize)
}

/// Whether an int32 bias is quantized at `a_scale · b_scale` (per element of a per-column b)
/// with zero points 0: then adding it to the integer product is exactly the float bias.
fn bias_at_product_scale(
    graph: &Graph,
    c: &Dequantized,
    a: &Dequantized,
    b: &Dequantized,
) -> Option<()> {
    let zero = constant(graph, Some(c.zero))?.to_vec::<i32>().ok()?;
    let scale = constant(graph, Some(c.scale))?.to_vec::<f32>().ok()?;
    let a_scale = constant(graph, Some(a.scale))?.to_vec::<f32>().ok()?;
    let b_scale = constant(graph, Some(b.scale))?.to_vec::<f32>().ok()?;
    if zero.iter().any(|&z| z != 0) || (scale.len() != 1 && scale.len() != b_scale.len()) {
        return None;
    }
    let close = |x: f32, y: f32| (x - y).abs() <= 1e-5 * y.abs().max(f32::MIN_POSITIVE);
    let ok = (0..scale.len().max(b_scale.len())).all(|j| {
        let s = scale[j.min(scale.len() - 1)];
        close(s, a_scale[0] * b_scale[j.min(b_scale.len() - 1)])
    });
    ok.then_some(())
}

/// Concat → com.microsoft QLinearConcat: inputs (y_scale, y_zero, then (X, scale, zero) per
/// input); each input is per tensor and of the output's 8-bit type.
fn concat(graph: &Graph, node: &Node, output: (ValueId, ValueId, DType)) -> Option<Replacement> {
    let (out_scale, out_zero, out_dtype) = output;
    let mut inputs = vec![Some(out_scale), Some(out_zero)];
    for value in &node.inputs {
        let d = dequantized(graph, (*value)?)?;
        if d.dtype != out_dtype || d.scales != 1 {
            return None;
        }
        inputs.extend([Some(d.x), Some(d.scale), Some(d.zero)]);
    }
    Some((node.op.capabilities().qlinear?.qlinear()?, inputs))
}

/// Ops that only select or move elements: between a DequantizeLinear and a QuantizeLinear of
/// the same scale and zero point they run on the 8-bit tensor itself (MaxPool's maximum
/// commutes with the monotone quantization; its padding is ignored, as for integer MaxPool).
const PASSTHROUGH: &[&str] = &[
    "Flatten",
    "Identity",
    "MaxPool",
    "Reshape",
    "Squeeze",
    "Transpose",
    "Unsqueeze",
];

/// Whether two constant parameter tensors hold the same values.
fn same_constant(graph: &Graph, a: ValueId, b: ValueId) -> bool {
    if a == b {
        return true;
    }
    match (constant(graph, Some(a)), constant(graph, Some(b))) {
        (Some(x), Some(y)) => {
            x.dtype() == y.dtype()
                && x.numel() == y.numel()
                && match x.dtype() {
                    DType::F32 => x.to_vec::<f32>().ok() == y.to_vec::<f32>().ok(),
                    DType::U8 => x.to_vec::<u8>().ok() == y.to_vec::<u8>().ok(),
                    DType::I8 => x.to_vec::<i8>().ok() == y.to_vec::<i8>().ok(),
                    _ => false,
                }
        }
        _ => false,
    }
}

/// The inputs of passthrough node `i` run on the 8-bit tensor, when its data input is
/// dequantized with the parameters its output is quantized with.
fn passthrough(
    graph: &Graph,
    i: usize,
    output: (ValueId, ValueId, DType),
) -> Option<Vec<Option<ValueId>>> {
    let node = &graph.nodes[i];
    if !PASSTHROUGH.contains(&node.op.op_type()) || node.outputs.len() != 1 {
        return None;
    }
    let d = dequantized(graph, node.inputs.first().copied().flatten()?)?;
    let (scale, zero, dtype) = output;
    if d.dtype != dtype || d.scales != 1 {
        return None;
    }
    if !same_constant(graph, d.scale, scale) || !same_constant(graph, d.zero, zero) {
        return None;
    }
    // Other inputs (Reshape's shape, Squeeze's axes) must not be dequantized values.
    if node.inputs[1..]
        .iter()
        .flatten()
        .any(|&v| dequantized(graph, v).is_some())
    {
        return None;
    }
    let mut inputs = node.inputs.clone();
    inputs[0] = Some(d.x);
    Some(inputs)
}

/// Rewrites every qualifying `DequantizeLinear → op → QuantizeLinear`; returns how many.
pub fn quantize_qdq(graph: &mut Graph) -> Result<usize> {
    let consumers = graph.consumers();
    let mut dropped = Vec::new();
    for i in 0..graph.nodes.len() {
        if graph.nodes[i].outputs.len() != 1 {
            continue;
        }
        let out = graph.nodes[i].outputs[0];
        let Some((q, q_out, scale, zero, dtype)) = quantized_by(graph, &consumers, out) else {
            continue;
        };
        let (op, inputs) = match rewrite(graph, i, (scale, zero, dtype)) {
            Some((op, inputs)) => (Arc::from(op), inputs),
            None => match passthrough(graph, i, (scale, zero, dtype)) {
                Some(inputs) => (graph.nodes[i].op.clone(), inputs),
                None => continue,
            },
        };
        let node = &mut graph.nodes[i];
        node.op = op;
        node.inputs = inputs;
        node.outputs[0] = q_out;
        graph.values[q_out.0].source = ValueSource::Node(NodeId(i), 0);
        graph.values[out.0].source = ValueSource::Removed;
        graph.nodes[q].outputs.clear();
        dropped.push(q);
    }
    if !dropped.is_empty() {
        let keep: Vec<usize> = (0..graph.nodes.len())
            .filter(|i| !dropped.contains(i))
            .collect();
        graph.reorder(&keep);
    }
    Ok(dropped.len())
}
