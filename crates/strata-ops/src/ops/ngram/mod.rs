//! N-gram features: TfIdfVectorizer (not implemented yet).

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
