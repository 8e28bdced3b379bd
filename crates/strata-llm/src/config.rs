//! The architecture's constants from a GGUF file's `{arch}.*` keys: what the graph is built
//! from. llama, mistral and qwen2 share one graph; they differ in constants, RoPE ordering and
//! (qwen2) biases on the q/k/v projections.

use strata_gguf::GgufFile;

use crate::error::{LlmError, Result};

/// The architectures strata builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
}

impl Architecture {
    pub fn from_name(name: &str) -> Result<Self> {
        Ok(match name {
            "llama" => Architecture::Llama,
            "mistral" => Architecture::Mistral,
            "qwen2" => Architecture::Qwen2,
            other => return Err(LlmError::UnsupportedArchitecture(other.to_string())),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
        }
    }

    /// Whether RoPE rotates the halves of each head (NeoX) instead of adjacent pairs: llama.cpp's
    /// `LLAMA_ROPE_TYPE_NEOX` for qwen2, `NORM` for llama and mistral (whose q/k weights the
    /// converter permuted for it).
    pub fn rope_neox(self) -> bool {
        matches!(self, Architecture::Qwen2)
    }
}

/// The constants of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    /// `{arch}.context_length`: positions the model was trained for.
    pub context_length: usize,
    pub embedding: usize,
    pub layers: usize,
    pub feed_forward: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Features of each head RoPE rotates (`{arch}.rope.dimension_count`, else all).
    pub rope_dims: usize,
    pub rope_base: f32,
    pub rms_epsilon: f32,
}

impl ModelConfig {
    /// Reads and checks the constants of `file`'s architecture.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let architecture = Architecture::from_name(file.architecture()?)?;
        let arch = architecture.name();
        let count = |key: &str| -> Result<usize> {
            let key = format!("{arch}.{key}");
            let v = file.get_u64(&key)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0 && v <= 1 << 24)
                .ok_or_else(|| LlmError::metadata(&key, format!("{v} is not a usable size")))
        };
        let optional_count = |key: &str| -> Result<Option<usize>> {
            if file.get(&format!("{arch}.{key}")).is_some() {
                count(key).map(Some)
            } else {
                Ok(None)
            }
        };
        let float = |key: &str, default: f32| -> Result<f32> {
            let key = format!("{arch}.{key}");
            if file.get(&key).is_none() {
                return Ok(default);
            }
            let v = file.get_f64(&key)? as f32;
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(LlmError::metadata(
                    &key,
                    format!("{v} must be finite and positive"),
                ))
            }
        };
        let embedding = count("embedding_length")?;
        let heads = count("attention.head_count")?;
        let kv_heads = optional_count("attention.head_count_kv")?.unwrap_or(heads);
        if !heads.is_multiple_of(kv_heads) {
            return Err(LlmError::metadata(
                &format!("{arch}.attention.head_count_kv"),
                format!("{kv_heads} does not divide the {heads} query heads"),
            ));
        }
        let head_dim = match optional_count("attention.key_length")? {
            Some(d) => d,
            None if embedding.is_multiple_of(heads) => embedding / heads,
            None => {
                return Err(LlmError::metadata(
                    &format!("{arch}.attention.head_count"),
                    format!("{heads} heads do not divide the embedding of {embedding}"),
                ))
            }
        };
        let rope_dims = optional_count("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
            return Err(LlmError::metadata(
                &format!("{arch}.rope.dimension_count"),
                format!("{rope_dims} must be even and at most the head size {head_dim}"),
            ));
        }
        Ok(ModelConfig {
            architecture,
            context_length: count("context_length")?,
            embedding,
            layers: count("block_count")?,
            feed_forward: count("feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            rope_dims,
            rope_base: float("rope.freq_base", 10_000.0)?,
            rms_epsilon: float("attention.layer_norm_rms_epsilon", 1e-5)?,
        })
    }
}
