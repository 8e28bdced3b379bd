//! onnxruntime's `com.microsoft` operators, the ones its quantizer and transformer optimizer
//! write into models: the fused GELUs, the fused normalizations, the fused products and
//! convolutions, the attention family (Attention, MultiHeadAttention, GroupQueryAttention on one
//! per-head core) and the 4/8-bit weight-only product MatMulNBits. One
//! operator per file; `biased_activation.rs`, `norm_rows.rs`, `attention_heads.rs`, `head_copy.rs`
//! and `access.rs` are their shared kernels and helpers.

mod access;
mod attention;
mod attention_heads;
mod bias_gelu;
mod biased_activation;
mod embed_layer_norm;
mod fast_gelu;
mod fused_conv;
mod fused_matmul;
mod gelu;
mod group_query_attention;
mod head_copy;
mod matmul_nbits;
mod multi_head_attention;
mod nbits_layout;
mod norm_rows;
mod quick_gelu;
mod rotary_embedding;
mod simplified_layer_norm;
mod skip_layer_norm;

use crate::OpTable;
use skip_layer_norm::SkipLayerNorm;

/// The family's operators in the `com.microsoft` domain, read by the registry.
pub const OPS: &[OpTable] = &[&[
    ("Gelu", gelu::build),
    ("FastGelu", fast_gelu::build),
    ("BiasGelu", bias_gelu::build),
    ("QuickGelu", quick_gelu::build),
    ("SkipLayerNormalization", SkipLayerNorm::build_layer),
    (
        "SkipSimplifiedLayerNormalization",
        SkipLayerNorm::build_simplified,
    ),
    ("SimplifiedLayerNormalization", simplified_layer_norm::build),
    ("MatMulNBits", matmul_nbits::build),
    ("FusedMatMul", fused_matmul::build),
    ("FusedConv", fused_conv::build),
    ("EmbedLayerNormalization", embed_layer_norm::build),
    ("RotaryEmbedding", rotary_embedding::build),
    ("Attention", attention::build),
    ("MultiHeadAttention", multi_head_attention::build),
    ("GroupQueryAttention", group_query_attention::build),
]];

/// onnxruntime operators that its tools write in the default ONNX domain.
pub const ONNX_DOMAIN_OPS: &[OpTable] =
    &[&[("SimplifiedLayerNormalization", simplified_layer_norm::build)]];
