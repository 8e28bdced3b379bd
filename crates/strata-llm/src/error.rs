//! The error type of language models: every variant names the key, tensor or value at fault.

use strata_gguf::GgufError;
use strata_runtime::RuntimeError;
use strata_tokenizer::TokenizerError;

pub type Result<T, E = LlmError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(transparent)]
    Gguf(#[from] GgufError),

    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),

    #[error(transparent)]
    Core(#[from] strata_core::CoreError),

    #[error("architecture {0:?} is not supported (llama, mistral and qwen2 are)")]
    UnsupportedArchitecture(String),

    #[error("metadata key {key:?}: {reason}")]
    BadMetadata { key: String, reason: String },

    #[error("tensor {tensor:?}: {reason}")]
    BadTensor { tensor: String, reason: String },

    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },

    #[error("{what}: {reason}")]
    Usage { what: &'static str, reason: String },

    #[error("the context is full: {held} positions held, {asked} more asked for, at most {max}")]
    ContextFull {
        held: usize,
        asked: usize,
        max: usize,
    },
}

impl LlmError {
    /// Whether a run stopped because its session was cancelled ([`crate::Session::cancel_flag`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, LlmError::Runtime(e) if e.is_cancelled())
    }

    /// Whether a run stopped at its session's timeout ([`crate::Session::set_timeout`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, LlmError::Runtime(e) if e.is_timeout())
    }

    pub(crate) fn metadata(key: &str, reason: impl Into<String>) -> Self {
        LlmError::BadMetadata {
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn tensor(tensor: &str, reason: impl Into<String>) -> Self {
        LlmError::BadTensor {
            tensor: tensor.to_string(),
            reason: reason.into(),
        }
    }
}
