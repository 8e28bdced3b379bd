//! Reductions: ReduceSum / Mean / Max / Min / Prod / L1 / L2 / LogSum / LogSumExp / SumSquare,
//! and ArgMax / ArgMin.

pub mod argminmax;
pub mod reduce;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[reduce::OPS, argminmax::OPS];
