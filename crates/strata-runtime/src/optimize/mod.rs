//! Graph optimization passes, run once when a plan is built.

mod dce;
mod fold;

pub use dce::remove_dead_nodes;
pub use fold::fold_constants;

use crate::{Graph, Result};

/// Runs every pass in order: constant folding, then dead-node removal.
pub fn optimize(graph: &mut Graph, threads: usize) -> Result<OptimizeReport> {
    let folded = fold_constants(graph, threads)?;
    let removed = remove_dead_nodes(graph);
    Ok(OptimizeReport { folded, removed })
}

/// What the passes changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    pub folded: usize,
    pub removed: usize,
}
