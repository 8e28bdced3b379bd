//! Linear algebra beyond MatMul/Gemm: Einsum, Det.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
