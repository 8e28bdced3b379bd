//! Selection and reordering: Unique, NonMaxSuppression, ReverseSequence, TensorScatter.

mod non_max_suppression;
mod reverse_sequence;
mod tensor_scatter;
mod unique;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    (
        "NonMaxSuppression",
        non_max_suppression::NonMaxSuppression::build,
    ),
    ("ReverseSequence", reverse_sequence::ReverseSequence::build),
    ("TensorScatter", tensor_scatter::TensorScatter::build),
    ("Unique", unique::Unique::build),
];
