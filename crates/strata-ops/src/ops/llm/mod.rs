//! Language-model family (domain `strata.llm`): the operators a GGUF decoder-only model needs
//! beyond the ONNX ones it reuses (RMSNormalization, RotaryEmbedding, SwiGLU, Add, Slice):
//! embedding lookup and products with block-quantized weights read in place, and grouped-query
//! causal attention over a paged KV cache kept in each execution context.

mod cached_attention;
mod kv_cache;
mod quant_embedding;
mod quant_matmul;

use crate::OpTable;

pub use cached_attention::CachedAttention;
pub use kv_cache::{KvCache, KV_BLOCK_TOKENS};
pub use quant_embedding::QuantEmbedding;
pub use quant_matmul::QuantMatMul;

/// The domain these operators are registered under.
pub const DOMAIN: &str = "strata.llm";

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("QuantEmbedding", QuantEmbedding::build),
    ("QuantMatMul", QuantMatMul::build),
    ("CachedAttention", CachedAttention::build),
]];

/// A positive integer attribute that must be given.
fn positive_attr(ctx: &crate::OpContext, op: &str, name: &str) -> crate::OpResult<usize> {
    let v = ctx
        .attrs
        .int(name)?
        .ok_or_else(|| crate::OpError::attribute(op, name, "is required"))?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| crate::OpError::attribute(op, name, format!("must be positive, got {v}")))
}
