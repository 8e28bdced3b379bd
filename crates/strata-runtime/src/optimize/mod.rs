//! Graph optimization passes, run once when a plan is built.

mod dce;
mod fold;
mod fuse;
mod qdq;

pub use dce::remove_dead_nodes;
pub use fold::fold_constants;
pub use fuse::{fold_batch_norms, fuse_activations};
pub use qdq::quantize_qdq;

use crate::{Graph, Result};

/// Runs every pass in order: QDQ patterns to integer operators (before folding turns quantized
/// weights into float ones), constant folding, dead-node removal, BatchNorm folding, then
/// activation fusion.
pub fn optimize(graph: &mut Graph, threads: usize) -> Result<OptimizeReport> {
    let quantized = quantize_qdq(graph)?;
    let folded = fold_constants(graph, threads)?;
    let removed = remove_dead_nodes(graph);
    let batch_norms = fold_batch_norms(graph)?;
    let activations = fuse_activations(graph);
    // Folding left the original weights of folded convolutions unread.
    remove_dead_nodes(graph);
    Ok(OptimizeReport {
        quantized,
        folded,
        removed,
        batch_norms,
        activations,
    })
}

/// What the passes changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    /// `DequantizeLinear → op → QuantizeLinear` groups now run as one QLinear operator.
    pub quantized: usize,
    /// Nodes evaluated at plan time.
    pub folded: usize,
    /// Nodes that did not contribute to any output.
    pub removed: usize,
    /// BatchNormalization nodes folded into convolutions.
    pub batch_norms: usize,
    /// Activations fused into their producer.
    pub activations: usize,
}
