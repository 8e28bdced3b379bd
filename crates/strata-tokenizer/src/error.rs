//! Typed errors for building a tokenizer from a vocabulary description, encoding, rendering a
//! chat template and sampling.

/// Everything that can go wrong in this crate, each naming what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unsupported tokenizer model `{0}` (supported: `gpt2` byte-level BPE, `llama` SentencePiece)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error("unsupported pre-tokenizer `{0}` (supported: default, gpt-2, smollm, llama-bpe/llama3, qwen2 and their aliases)")]
    UnsupportedPreTokenizer(String),
    /// The vocabulary has no tokens.
    #[error("the vocabulary is empty")]
    EmptyVocabulary,
    /// A per-token array (scores, token types) does not have one entry per token.
    #[error("`{field}` has {actual} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        field: &'static str,
        expected: usize,
        actual: usize,
    },
    /// A token type value outside the GGUF `llama_token_type` range.
    #[error("token {id} has type {value}, which is not a known token type (0..=6)")]
    InvalidTokenType { id: usize, value: i32 },
    /// A special-token id (bos, eos, …) that points past the vocabulary.
    #[error("special token `{role}` has id {id} but the vocabulary has {vocab_size} tokens")]
    SpecialIdOutOfRange {
        role: &'static str,
        id: u32,
        vocab_size: usize,
    },
    /// A merge rule that is not two space-separated parts.
    #[error("merge {index} (`{text}`) is not of the form `left right`")]
    MalformedMerge { index: usize, text: String },
    /// More tokens than a `u32` id can name.
    #[error("the vocabulary has {0} tokens, more than u32 ids can address")]
    VocabularyTooLarge(usize),
    /// An id given to decode that is not in the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    /// Encoding needs a token the vocabulary does not have (e.g. `add_bos` without a bos id).
    #[error("encoding needs the `{0}` token but the vocabulary does not define it")]
    MissingSpecialToken(&'static str),
    /// A pre-tokenizer regular expression failed to compile (a bug in this crate's patterns).
    #[error("pre-tokenizer pattern for `{pre}` failed to compile: {message}")]
    Pattern { pre: String, message: String },
    /// The chat template failed to parse or render (includes `raise_exception` from the template).
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// The vocabulary has no chat template.
    #[error("the vocabulary has no chat template (`tokenizer.chat_template`)")]
    NoChatTemplate,
    /// Sampler configuration out of range.
    #[error("sampler setting `{setting}` = {value} is out of range: {reason}")]
    SamplerConfig {
        setting: &'static str,
        value: String,
        reason: &'static str,
    },
    /// Logits slice of the wrong length given to the sampler.
    #[error("sampler was set up for {expected} logits but was given {actual}")]
    LogitsLength { expected: usize, actual: usize },
}

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, TokenizerError>;
