//! Attention family: Attention, RotaryEmbedding, LinearAttention, SwiGLU, CausalConvWithState,
//! and FusedAttention (made by the optimizer, not imported).

mod attention_bias;
mod attention_core;
mod attention_geometry;
mod attention_op;
mod causal_conv_with_state;
mod fused_sdpa;
mod linear_attention;
pub(crate) mod rotary_embedding;
mod swiglu;

use crate::OpTable;

pub use attention_op::Attention;
pub use causal_conv_with_state::CausalConvWithState;
pub use fused_sdpa::{Columns, FusedAttention, MaskStep, OperandLayout, OutputLayout};
pub use linear_attention::LinearAttention;
pub use rotary_embedding::RotaryEmbedding;
pub use swiglu::SwiGlu;

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("Attention", Attention::build),
    ("RotaryEmbedding", RotaryEmbedding::build),
    ("SwiGLU", SwiGlu::build),
    ("LinearAttention", LinearAttention::build),
    ("CausalConvWithState", CausalConvWithState::build),
]];
