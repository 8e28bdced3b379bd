//! A language model loaded once and shared (`Arc<LanguageModel>`): its constants, tokenizer,
//! chat template and the one inference plan every session runs.

use std::path::Path;
use std::sync::Arc;

use strata_gguf::GgufFile;
use strata_runtime::{InferencePlan, OptimizationProfile, PlanConfig};
use strata_tokenizer::{ChatMessage, ChatTemplate, EncodeOptions, Tokenizer};

use crate::config::ModelConfig;
use crate::error::{LlmError, Result};
use crate::graph::{build_graph, GraphOptions, IDS, POSITIONS};
use crate::vocabulary::tokenizer_from_gguf;

/// How a model is loaded.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Intra-op threads.
    pub threads: usize,
    /// Positions a session holds; `None` takes the model's context length.
    pub context: Option<usize>,
    /// Most tokens one prefill step runs; longer prompts run in chunks of this size.
    pub prefill_chunk: usize,
    /// Logits for every prompt position (scoring, tests) instead of the last one only.
    pub all_logits: bool,
    /// Most bytes the model's plan may hold (mapped weights, arenas, KV caches of every
    /// session); see `PlanConfig::memory_limit`. Default: the machine's memory.
    pub memory_limit: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            context: None,
            prefill_chunk: 256,
            all_logits: false,
            memory_limit: strata_core::default_memory_limit(),
        }
    }
}

/// A loaded model: weights in place in the mapped file, one plan shared by every session.
#[derive(Debug)]
pub struct LanguageModel {
    config: ModelConfig,
    tokenizer: Tokenizer,
    chat_template: Option<ChatTemplate>,
    plan: Arc<InferencePlan>,
    vocab: usize,
    context: usize,
    options: LoadOptions,
}

impl LanguageModel {
    /// Maps `path` and builds the model.
    pub fn load(path: impl AsRef<Path>, options: LoadOptions) -> Result<Arc<LanguageModel>> {
        LanguageModel::from_gguf(&GgufFile::open(path)?, options)
    }

    /// Builds the model of an opened file (the plan's weights keep the mapping alive).
    pub fn from_gguf(file: &GgufFile, options: LoadOptions) -> Result<Arc<LanguageModel>> {
        let config = ModelConfig::from_gguf(file)?;
        let tokenizer = tokenizer_from_gguf(file)?;
        let chat_template = match file.get("tokenizer.chat_template") {
            Some(_) => Some(tokenizer.chat_template()?),
            None => None,
        };
        let context = options.context.unwrap_or(config.context_length);
        if context == 0 || options.prefill_chunk == 0 || options.threads == 0 {
            return Err(LlmError::Usage {
                what: "load options",
                reason: format!(
                    "context ({context}), prefill chunk ({}) and threads ({}) must be positive",
                    options.prefill_chunk, options.threads
                ),
            });
        }
        let chunk = options.prefill_chunk.min(context);
        let graph = build_graph(
            file,
            &config,
            GraphOptions {
                context,
                all_logits: options.all_logits,
            },
        )?;
        let vocab = file.tensor_info("token_embd.weight")?.dims[0];
        if vocab != tokenizer.vocab_size() {
            return Err(LlmError::tensor(
                "token_embd.weight",
                format!(
                    "has {vocab} rows but the tokenizer has {} tokens",
                    tokenizer.vocab_size()
                ),
            ));
        }
        let profile = OptimizationProfile::new()
            .with_input(IDS, &[1, 1], &[1, 1], &[1, chunk])?
            .with_input(POSITIONS, &[1, 1], &[1, 1], &[1, chunk])?;
        let plan_config = PlanConfig::default()
            .with_threads(options.threads)
            .with_profile(profile)
            .with_memory_limit(options.memory_limit);
        let plan = InferencePlan::build(graph, plan_config)?;
        Ok(Arc::new(LanguageModel {
            config,
            tokenizer,
            chat_template,
            plan,
            vocab,
            context,
            options: LoadOptions {
                prefill_chunk: chunk,
                context: Some(context),
                ..options
            },
        }))
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn plan(&self) -> &Arc<InferencePlan> {
        &self.plan
    }

    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// Positions a session holds.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Token ids of `text` as llama.cpp makes them for a prompt: BOS when the model adds it,
    /// special tokens in the text recognized.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.tokenizer.encode(
            text,
            EncodeOptions {
                add_special: true,
                parse_special: true,
            },
        )?)
    }

    /// `messages` through the model's chat template, opening the assistant's turn.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String> {
        let template = self.chat_template.as_ref().ok_or_else(|| LlmError::Usage {
            what: "chat",
            reason: "the model has no tokenizer.chat_template".into(),
        })?;
        Ok(template.render(messages, true)?)
    }
}
