//! Attention family: Attention, RotaryEmbedding, LinearAttention, SwiGLU, CausalConvWithState.

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] = &[];
