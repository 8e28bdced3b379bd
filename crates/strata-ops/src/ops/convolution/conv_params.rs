//! Conv's attributes, resolved: what every convolution path reads.

use crate::kernels::activation::Activation;

/// Conv attributes. Empty vectors take the ONNX defaults: `kernel` from the weight's spatial
/// dims, strides and dilations 1, pads 0. `auto_pad` is resolved beforehand with
/// [`resolve_auto_pad`](super::resolve_auto_pad).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvParams {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads_begin: Vec<usize>,
    pub pads_end: Vec<usize>,
    pub dilations: Vec<usize>,
    pub groups: usize,
    /// Activation applied while the output is written (a fused Conv+Relu, say).
    pub post: Activation,
}

impl Default for ConvParams {
    fn default() -> Self {
        ConvParams {
            kernel: Vec::new(),
            strides: Vec::new(),
            pads_begin: Vec::new(),
            pads_end: Vec::new(),
            dilations: Vec::new(),
            groups: 1,
            post: Activation::None,
        }
    }
}
