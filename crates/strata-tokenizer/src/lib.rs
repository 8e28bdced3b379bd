//! strata's tokenizers for language models, built from the fields GGUF's `tokenizer.ggml.*` keys
//! hold (see [`VocabularyDescription`]) and knowing nothing of the file format:
//!
//! - byte-level BPE (`gpt2`) with llama.cpp's pre-tokenizers (`smollm`, `llama-bpe`, `qwen2`,
//!   `gpt-2`, `default` and their aliases) and SentencePiece (`llama`) with byte fallback;
//! - special tokens matched before tokenizing, `add_bos`/`add_eos`;
//! - decoding, including a streaming decoder that holds back UTF-8 split across tokens;
//! - chat templates (Jinja, via minijinja);
//! - sampling ([`sampling`]): greedy, temperature, top-k, top-p, min-p, repetition penalty,
//!   seeded, plus stop conditions.

mod bpe;
mod byte_level;
mod chat;
mod description;
mod error;
mod pretokenize;
pub mod sampling;
mod special;
mod spm;
mod stream;
mod symbols;
mod tokenizer;
mod vocab;

pub use chat::{ChatMessage, ChatTemplate};
pub use description::{ModelKind, TokenType, VocabularyDescription};
pub use error::{Result, TokenizerError};
pub use stream::{StreamDecoder, StreamState};
pub use tokenizer::{EncodeOptions, Tokenizer};
pub use vocab::SpecialTokens;
