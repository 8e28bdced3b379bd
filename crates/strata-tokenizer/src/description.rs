//! The plain description a tokenizer is built from: the fields GGUF's `tokenizer.ggml.*` keys hold,
//! so a file reader fills it in directly and this crate never sees the file format.

use crate::error::{Result, TokenizerError};

/// The tokenizer family (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// `gpt2`: byte-level BPE with ranked merges and a regex pre-tokenizer.
    BytePairEncoding,
    /// `llama`: SentencePiece BPE over UTF-8 by token score, with `<0xXX>` byte fallback.
    SentencePiece,
}

impl ModelKind {
    /// Parses the `tokenizer.ggml.model` string.
    pub fn from_gguf_name(name: &str) -> Result<Self> {
        match name {
            "gpt2" => Ok(Self::BytePairEncoding),
            "llama" => Ok(Self::SentencePiece),
            other => Err(TokenizerError::UnsupportedModel(other.to_string())),
        }
    }
}

/// A token's type (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// Parses the GGUF integer; `id` is only used to name the token in the error.
    pub fn from_gguf(value: i32, id: usize) -> Result<Self> {
        Ok(match value {
            0 => Self::Undefined,
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => return Err(TokenizerError::InvalidTokenType { id, value }),
        })
    }

    /// Control and unknown tokens: matched in text only when special parsing is on, and left out
    /// of decoded text unless asked for.
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::Unknown)
    }
}

/// Everything a tokenizer is built from, named after the GGUF keys that hold it.
#[derive(Clone, Debug, Default)]
pub struct VocabularyDescription {
    /// `tokenizer.ggml.model`: `gpt2` or `llama`.
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer type (byte-level BPE only); `None` means `default`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: the text of each token, indexed by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`: one per token (SentencePiece merge priority); empty if absent.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type`: one per token; empty means all normal.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges`: `"left right"` pairs, rank = index (byte-level BPE).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot_id: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`; `None` takes the model's default (as llama.cpp does).
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`; `None` takes the model's default.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`; `None` takes the model's default (SentencePiece: true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`: a Jinja template.
    pub chat_template: Option<String>,
}
