//! Language-model family (domain `strata.llm`): the operators a GGUF decoder-only model needs
//! beyond the ONNX ones it reuses (Add, Slice): embedding lookup and products with
//! block-quantized weights read in place, grouped-query causal attention over a paged KV cache
//! kept in each execution context, and RMSNorm, RoPE and SwiGLU with ggml's rounding
//! (`ggml_math`), so a GGUF model's logits are llama.cpp's bit for bit.

#[cfg(target_arch = "x86_64")]
mod attention_avx2;
mod cached_attention;
pub mod ggml_math;
mod kv_cache;
mod quant_embedding;
mod quant_matmul;
mod rms_norm;
mod rope;
mod swiglu;

use crate::OpTable;

pub use cached_attention::CachedAttention;
pub use kv_cache::{KvCache, KV_BLOCK_TOKENS};
pub use quant_embedding::QuantEmbedding;
pub use quant_matmul::QuantMatMul;
pub use rms_norm::RmsNorm;
pub use rope::Rope;
pub use swiglu::SwiGlu;

/// The domain these operators are registered under.
pub const DOMAIN: &str = "strata.llm";

/// The family's operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("QuantEmbedding", QuantEmbedding::build),
    ("QuantMatMul", QuantMatMul::build),
    ("CachedAttention", CachedAttention::build),
    ("RmsNorm", RmsNorm::build),
    ("Rope", Rope::build),
    ("SwiGlu", SwiGlu::build),
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

/// Checks that input `index` is f32.
fn check_f32(op: &str, fact: &crate::Fact, index: usize) -> crate::OpResult<()> {
    if fact.dtype == strata_core::DType::F32 {
        Ok(())
    } else {
        Err(crate::OpError::DType {
            op: op.into(),
            index,
            expected: "float32".into(),
            actual: fact.dtype,
        })
    }
}

/// The values of a contiguous f32 tensor.
fn contiguous_f32<'a>(
    op: &str,
    guard: &'a strata_core::ReadGuard<'_, f32>,
) -> crate::OpResult<&'a [f32]> {
    guard
        .as_slice()
        .ok_or_else(|| crate::OpError::kernel(op, "an input is not contiguous"))
}

/// The values of a contiguous f32 output.
fn contiguous_f32_mut<'a>(
    op: &str,
    guard: &'a mut strata_core::WriteGuard<'_, f32>,
) -> crate::OpResult<&'a mut [f32]> {
    guard
        .as_mut_slice()
        .ok_or_else(|| crate::OpError::kernel(op, "the output is not contiguous"))
}
