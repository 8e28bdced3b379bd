//! Spatial operators beyond Conv and pools: ConvTranspose (with its col2im fold), RoiAlign
//! (bilinear region pooling), MaxUnpool and DeformConv.

mod col2im;
pub mod conv_transpose;
pub mod deform_conv;
pub mod max_unpool;
pub mod roi_align;
#[cfg(test)]
mod test_util;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[
    ("ConvTranspose", conv_transpose::ConvTranspose::build),
    ("RoiAlign", roi_align::RoiAlign::build),
    ("MaxUnpool", max_unpool::MaxUnpool::build),
    ("DeformConv", deform_conv::DeformConv::build),
];
