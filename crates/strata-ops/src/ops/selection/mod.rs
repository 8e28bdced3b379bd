//! Selection and reordering: Unique, NonMaxSuppression, ReverseSequence, TensorScatter.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
