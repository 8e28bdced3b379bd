//! strata-llm: decoder-only language models from GGUF files (L3, L4).
//!
//! `general.architecture` = `llama`, `mistral` or `qwen2` becomes a strata graph
//! ([`graph::build_graph`]) planned by strata's planner with a dynamic sequence dim, so prefill
//! chunks and decode steps run one plan. Weights stay in the mapped file. Each [`Session`] is an
//! execution context of that plan with its own paged KV cache (`KVCache` memory, grown in
//! blocks); many sessions share one [`LanguageModel`] concurrently.
//!
//! ```no_run
//! use strata_llm::{GenerateOptions, LanguageModel, LoadOptions};
//!
//! let model = LanguageModel::load("SmolLM2-135M-Instruct.Q4_1.gguf", LoadOptions::default())?;
//! let mut session = model.session()?;
//! let prompt = model.encode_prompt("The capital of France is")?;
//! for piece in model.generate(&mut session, &prompt, &GenerateOptions::default())? {
//!     print!("{}", piece?.text);
//! }
//! # Ok::<(), strata_llm::LlmError>(())
//! ```

pub mod config;
pub mod error;
pub mod generate;
pub mod graph;
pub mod model;
pub mod session;
pub mod vocabulary;

pub use config::{Architecture, ModelConfig};
pub use error::{LlmError, Result};
pub use generate::{GenerateOptions, Generation, GenerationStats, Piece};
pub use model::{LanguageModel, LoadOptions};
pub use session::Session;
pub use strata_tokenizer::sampling::SamplerConfig;
pub use strata_tokenizer::{ChatMessage, Tokenizer};
pub use vocabulary::{tokenizer_from_gguf, vocabulary_description};
