//! Choosing elements by value: TopK, Unique, NonMaxSuppression.

mod non_max_suppression;
pub mod topk;
mod unique;

use crate::OpTable;

/// The family's operator tables, read by the registry.
pub const OPS: &[OpTable] = &[
    topk::OPS,
    &[("Unique", unique::Unique::build)],
    &[(
        "NonMaxSuppression",
        non_max_suppression::NonMaxSuppression::build,
    )],
];
