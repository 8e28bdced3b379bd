//! Graph optimization passes, run once when a plan is built.

mod attention;
mod dce;
mod dynamic_quant;
mod epilogue;
mod fold;
mod forward;
mod fuse;
mod gelu;
mod layer_norm;
mod matmul_bias;
mod pattern;
mod qdq;
mod qdq_lookup;
mod qkv_projection;
mod skip_norm;
mod transpose;

pub use attention::fuse_attention;
pub use dce::remove_dead_nodes;
pub use dynamic_quant::fuse_dynamic_quant;
pub use epilogue::{fuse_epilogues, Fusion};
pub use fold::fold_constants;
pub use forward::bypass_forwarding_nodes;
pub use fuse::fold_batch_norms;
pub use gelu::fuse_gelu;
pub use layer_norm::fuse_layer_norms;
pub use matmul_bias::fuse_matmul_bias;
pub use qdq::quantize_qdq;
pub use qdq_lookup::lookup_qdq;
pub use skip_norm::fuse_skip_layer_norms;
pub use transpose::eliminate_transposes;

use crate::{Graph, Result};

/// Runs every pass in order: constant folding, dead-node removal, BatchNorm folding, the
/// transformer patterns (decomposed LayerNorm / RMS norm, GELU, Add + LayerNorm), then
/// epilogue fusion (MatMul + bias into Gemm, then biases, residual Adds and activations into
/// their producers).
pub fn optimize(graph: &mut Graph, threads: usize) -> Result<OptimizeReport> {
    let quantized = quantize_qdq(graph)?;
    let folded = fold_constants(graph, threads)?;
    let quantized = quantized + lookup_qdq(graph, threads)? + fuse_dynamic_quant(graph, threads)?;
    // Bypassed nodes are dead, and go with the rest.
    bypass_forwarding_nodes(graph);
    let removed = remove_dead_nodes(graph);
    let batch_norms = fold_batch_norms(graph)?;
    // Transformer patterns first: the GELU node they leave is a GEMM epilogue below.
    let mut fusions = fuse_attention(graph, threads)?;
    fusions.extend(eliminate_transposes(graph, threads)?);
    fusions.extend(fuse_layer_norms(graph, threads)?);
    fusions.extend(fuse_gelu(graph, threads)?);
    fusions.extend(fuse_skip_layer_norms(graph, threads)?);
    fusions.extend(fuse_matmul_bias(graph, threads)?);
    fusions.extend(fuse_epilogues(graph, threads)?);
    let activations = fusions.iter().map(|f| f.absorbed.len()).sum();
    // Folding left the original weights of folded convolutions unread.
    remove_dead_nodes(graph);
    Ok(OptimizeReport {
        quantized,
        folded,
        removed,
        batch_norms,
        activations,
        fusions,
    })
}

/// What the passes changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    /// `DequantizeLinear → op → QuantizeLinear` groups now run as one QLinear operator, or
    /// as one lookup table (element-wise chains); dynamic quantization's `MatMulInteger → Cast
    /// → Mul → Add` tails fused into one product.
    pub quantized: usize,
    /// Nodes evaluated at plan time.
    pub folded: usize,
    /// Nodes that did not contribute to any output.
    pub removed: usize,
    /// BatchNormalization nodes folded into convolutions.
    pub batch_norms: usize,
    /// Nodes (activations, residual Adds) fused into their producer.
    pub activations: usize,
    /// Every fusion made: the producer and what it absorbed.
    pub fusions: Vec<Fusion>,
}
