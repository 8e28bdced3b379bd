//! Graph optimization passes, run once when a plan is built.

mod dce;
mod epilogue;
mod fold;
mod fuse;
mod gelu;
mod layer_norm;
mod matmul_bias;
mod pattern;
mod qdq;
mod skip_norm;

pub use dce::remove_dead_nodes;
pub use epilogue::{fuse_epilogues, Fusion};
pub use fold::fold_constants;
pub use fuse::fold_batch_norms;
pub use gelu::fuse_gelu;
pub use layer_norm::fuse_layer_norms;
pub use matmul_bias::fuse_matmul_bias;
pub use qdq::quantize_qdq;
pub use skip_norm::fuse_skip_layer_norms;

use crate::{Graph, Result};

/// Runs every pass in order: constant folding, dead-node removal, BatchNorm folding, the
/// transformer patterns (decomposed LayerNorm / RMS norm, GELU, Add + LayerNorm), then
/// epilogue fusion (MatMul + bias into Gemm, then biases, residual Adds and activations into
/// their producers).
pub fn optimize(graph: &mut Graph, threads: usize) -> Result<OptimizeReport> {
    let quantized = quantize_qdq(graph)?;
    let folded = fold_constants(graph, threads)?;
    let removed = remove_dead_nodes(graph);
    let batch_norms = fold_batch_norms(graph)?;
    // Transformer patterns first: the GELU node they leave is a GEMM epilogue below.
    let mut fusions = fuse_layer_norms(graph, threads)?;
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
    /// `DequantizeLinear → op → QuantizeLinear` groups now run as one QLinear operator.
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
