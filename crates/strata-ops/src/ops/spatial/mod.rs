//! Spatial operators beyond Conv and pools: ConvTranspose (with its col2im fold); DeformConv,
//! MaxUnpool and RoiAlign are not implemented yet.

mod col2im;
pub mod conv_transpose;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[("ConvTranspose", conv_transpose::ConvTranspose::build)];
