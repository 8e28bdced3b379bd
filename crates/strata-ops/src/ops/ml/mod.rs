//! The `ai.onnx.ml` domain: classic machine-learning operators (not implemented yet).

use crate::Constructor;

/// The domain's operators, registered in `registry::ML_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
