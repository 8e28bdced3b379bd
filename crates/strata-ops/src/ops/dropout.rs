//! Dropout.

use crate::Constructor;

/// Dropout's constructors, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
