//! Linear algebra beyond MatMul/Gemm: Einsum, Det.

pub mod det;
pub mod einsum;
mod einsum_plan;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] =
    &[("Det", det::Det::build), ("Einsum", einsum::Einsum::build)];
