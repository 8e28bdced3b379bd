//! Spatial operators beyond Conv and pools: ConvTranspose, DeformConv, MaxUnpool, RoiAlign, Einsum.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
