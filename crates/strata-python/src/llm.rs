//! The native half of `strata.LanguageModel`: a GGUF model shared by a pool of sessions (one
//! KV cache per generation in flight), tokenizing, chat templates, and generation that releases
//! the GIL for every token it computes. Argument checking and the Python-shaped API live in
//! `python/strata/_llm.py`.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use strata_gguf::{GgufFile, Value};
use strata_llm::{
    ChatMessage, GenerateOptions, Generation, GenerationStats, LanguageModel, LlmError,
    LoadOptions, SamplerConfig, Session,
};
use strata_tokenizer::EncodeOptions;

use crate::errors::{self, raise, Kind};

/// Idle sessions of one model: a generation takes one (or makes one when all are busy) and gives
/// it back emptied, so a steady stream of calls reuses the same execution context.
struct SessionPool {
    model: Arc<LanguageModel>,
    idle: Mutex<Vec<Session>>,
}

impl SessionPool {
    fn take(&self) -> Result<Session, LlmError> {
        match self.idle.lock().pop() {
            Some(session) => Ok(session),
            None => self.model.session(),
        }
    }

    /// Returns a session whose generation ended without error (a failed one is dropped).
    fn give(&self, mut session: Session) {
        session.reset();
        self.idle.lock().push(session);
    }
}

/// A loaded GGUF language model.
#[pyclass(module = "strata._strata", name = "LanguageModel", frozen)]
pub struct PyLanguageModel {
    pool: Arc<SessionPool>,
    /// The file's scalar metadata (arrays such as the vocabulary are left out).
    metadata: Vec<(String, Value)>,
    chat_template: Option<String>,
}

#[pymethods]
impl PyLanguageModel {
    /// Maps `path` and builds the model. `threads` 0 means one per core; `context` None takes
    /// the model's context length.
    #[new]
    #[pyo3(signature = (path, threads=0, context=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        threads: usize,
        context: Option<usize>,
    ) -> PyResult<Self> {
        if !path.is_file() {
            return Err(raise(
                Kind::NoSuchFile,
                format!("{}: no such model file", path.display()),
            ));
        }
        let mut options = LoadOptions {
            context,
            ..LoadOptions::default()
        };
        if threads > 0 {
            options.threads = threads;
        }
        let fail = |e: LlmError| errors::llm_at(&path, &e);
        let (model, metadata, chat_template) = py
            .detach(|| -> Result<_, LlmError> {
                let file = GgufFile::open(&path)?;
                let model = LanguageModel::from_gguf(&file, options)?;
                let metadata: Vec<(String, Value)> = file
                    .metadata()
                    .iter()
                    .filter(|(_, v)| !matches!(v, Value::Array(_)))
                    .cloned()
                    .collect();
                let template = file
                    .get("tokenizer.chat_template")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Ok((model, metadata, template))
            })
            .map_err(fail)?;
        Ok(PyLanguageModel {
            pool: Arc::new(SessionPool {
                model,
                idle: Mutex::new(Vec::new()),
            }),
            metadata,
            chat_template,
        })
    }

    /// Token ids of `text`: `add_special` adds BOS/EOS as the model asks, `parse_special`
    /// recognizes special tokens (`<|im_start|>` …) written in the text.
    #[pyo3(signature = (text, add_special=true, parse_special=true))]
    fn tokenize(
        &self,
        py: Python<'_>,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> PyResult<Vec<u32>> {
        let options = EncodeOptions {
            add_special,
            parse_special,
        };
        let model = &self.pool.model;
        py.detach(|| model.tokenizer().encode(text, options))
            .map_err(|e| errors::llm(&e.into()))
    }

    /// The text of `ids`; special tokens are left out unless `render_special`.
    #[pyo3(signature = (ids, render_special=false))]
    fn detokenize(&self, ids: Vec<i64>, render_special: bool) -> PyResult<String> {
        let ids = self.check_ids(&ids)?;
        self.pool
            .model
            .tokenizer()
            .decode(&ids, render_special)
            .map_err(|e| errors::llm(&e.into()))
    }

    /// `(role, content)` messages through the file's chat template, opening the assistant's
    /// turn when `add_generation_prompt`.
    #[pyo3(signature = (messages, add_generation_prompt=true))]
    fn render_chat(
        &self,
        messages: Vec<(String, String)>,
        add_generation_prompt: bool,
    ) -> PyResult<String> {
        let messages: Vec<ChatMessage> = messages
            .into_iter()
            .map(|(role, content)| ChatMessage::new(role, content))
            .collect();
        let model = &self.pool.model;
        let rendered = if add_generation_prompt {
            model.render_chat(&messages)
        } else {
            // The model keeps its template for generation prompts only; parse one for this.
            model
                .tokenizer()
                .chat_template()
                .and_then(|t| t.render(&messages, false))
                .map_err(LlmError::from)
        };
        rendered.map_err(|e| errors::llm(&e))
    }

    /// The model's shape and special tokens as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let model = &self.pool.model;
        let config = model.config();
        let tokenizer = model.tokenizer();
        let special = tokenizer.special_tokens();
        let dict = PyDict::new(py);
        dict.set_item("architecture", config.architecture.name())?;
        dict.set_item("context_length", config.context_length)?;
        dict.set_item("n_ctx", model.context())?;
        dict.set_item("vocab_size", model.vocab_size())?;
        dict.set_item("n_layers", config.layers)?;
        dict.set_item("n_embd", config.embedding)?;
        dict.set_item("n_ff", config.feed_forward)?;
        dict.set_item("n_heads", config.heads)?;
        dict.set_item("n_kv_heads", config.kv_heads)?;
        dict.set_item("head_dim", config.head_dim)?;
        dict.set_item("rope_base", config.rope_base)?;
        dict.set_item("rms_epsilon", config.rms_epsilon)?;
        dict.set_item("n_threads", model.options().threads)?;
        dict.set_item("bos_token_id", special.bos)?;
        dict.set_item("eos_token_id", special.eos)?;
        dict.set_item("end_of_generation_ids", tokenizer.end_of_generation_ids())?;
        dict.set_item("adds_bos", tokenizer.adds_bos())?;
        dict.set_item("chat_template", self.chat_template.as_deref())?;
        Ok(dict)
    }

    /// The file's metadata keys with scalar values (numbers, bools, strings).
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (key, value) in &self.metadata {
            match value {
                Value::String(s) => dict.set_item(key, s)?,
                Value::Bool(b) => dict.set_item(key, *b)?,
                Value::F32(_) | Value::F64(_) => dict.set_item(key, value.as_f64())?,
                Value::Array(_) => {}
                _ => match value.as_u64() {
                    Some(u) => dict.set_item(key, u)?,
                    None => dict.set_item(key, signed(value))?,
                },
            }
        }
        Ok(dict)
    }

    /// Generates after `prompt` (token ids) and returns `(text, ids, stats)`. The GIL is
    /// released while each token is computed; Ctrl-C stops between tokens.
    #[pyo3(signature = (prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: Vec<i64>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: u64,
        stop: Vec<String>,
    ) -> PyResult<(String, Vec<u32>, Bound<'py, PyDict>)> {
        let sampler = SamplerConfig {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty: repeat_penalty,
            seed,
            ..SamplerConfig::default()
        };
        let mut stream = self.start(py, &prompt, max_tokens, sampler, stop)?;
        let mut text = String::new();
        while let Some(piece) = stream.next_piece(py)? {
            text.push_str(&piece);
        }
        let stats = stats_dict(py, &stream.stats, stream.kv_cache_bytes)?;
        Ok((text, std::mem::take(&mut stream.ids), stats))
    }

    /// As `generate`, but returns an iterator of text pieces computed one token per call.
    #[pyo3(signature = (prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        prompt: Vec<i64>,
        max_tokens: usize,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: u64,
        stop: Vec<String>,
    ) -> PyResult<TokenStream> {
        let sampler = SamplerConfig {
            temperature,
            top_k,
            top_p,
            min_p,
            repetition_penalty: repeat_penalty,
            seed,
            ..SamplerConfig::default()
        };
        let state = self.start(py, &prompt, max_tokens, sampler, stop)?;
        Ok(TokenStream {
            state: Mutex::new(state),
        })
    }

    /// Idle sessions in the pool: as many as generations have ever overlapped.
    fn idle_sessions(&self) -> usize {
        self.pool.idle.lock().len()
    }
}

impl PyLanguageModel {
    /// `ids` as token ids of this vocabulary, or an `InvalidArgument` naming the first bad one.
    fn check_ids(&self, ids: &[i64]) -> PyResult<Vec<u32>> {
        let vocab = self.pool.model.vocab_size();
        ids.iter()
            .map(|&id| {
                u32::try_from(id)
                    .ok()
                    .filter(|&u| (u as usize) < vocab)
                    .ok_or_else(|| {
                        raise(
                            Kind::InvalidArgument,
                            format!("token id {id} is outside the vocabulary of {vocab} tokens"),
                        )
                    })
            })
            .collect()
    }

    /// Takes a session and prefills the prompt with the GIL released.
    fn start(
        &self,
        py: Python<'_>,
        prompt: &[i64],
        max_tokens: usize,
        sampler: SamplerConfig,
        stop: Vec<String>,
    ) -> PyResult<StreamState> {
        let prompt = self.check_ids(prompt)?;
        if prompt.is_empty() {
            return Err(raise(
                Kind::InvalidArgument,
                "the prompt has no tokens (the model adds no BOS to an empty text)",
            ));
        }
        let options = GenerateOptions {
            max_tokens,
            sampler,
            stop_strings: stop,
        };
        let pool = self.pool.clone();
        let generation = py
            .detach(|| -> Result<Generation<Session>, LlmError> {
                pool.take()?.into_generation(&prompt, &options)
            })
            .map_err(|e| errors::llm(&e))?;
        Ok(StreamState {
            stats: generation.stats(),
            generation: Some(generation),
            pool,
            ids: Vec::new(),
            kv_cache_bytes: 0,
        })
    }
}

/// A generation in flight: the session it owns, the ids so far and, once over, its timings.
struct StreamState {
    generation: Option<Generation<Session>>,
    pool: Arc<SessionPool>,
    ids: Vec<u32>,
    stats: GenerationStats,
    kv_cache_bytes: usize,
}

impl StreamState {
    /// The next non-empty text piece (tokens whose bytes are held back yield nothing yet), or
    /// `None` at the end. One token per GIL release; signals are checked between tokens.
    fn next_piece(&mut self, py: Python<'_>) -> PyResult<Option<String>> {
        loop {
            let Some(generation) = self.generation.as_mut() else {
                return Ok(None);
            };
            let next = py.detach(|| generation.next());
            match next {
                None => {
                    self.finish();
                    return Ok(None);
                }
                Some(Err(e)) => {
                    // The session's state after a failed step is not trusted: drop it.
                    self.generation = None;
                    return Err(errors::llm(&e));
                }
                Some(Ok(piece)) => {
                    self.ids.push(piece.id);
                    if !piece.text.is_empty() {
                        return Ok(Some(piece.text));
                    }
                }
            }
            if let Err(interrupted) = py.check_signals() {
                self.finish();
                return Err(interrupted);
            }
        }
    }

    /// Ends the generation early or at its end: keeps its stats, gives the session back.
    fn finish(&mut self) {
        if let Some(generation) = self.generation.take() {
            self.stats = generation.stats();
            let session = generation.into_session();
            self.kv_cache_bytes = session.kv_cache_bytes();
            self.pool.give(session);
        }
    }
}

impl Drop for StreamState {
    /// A stream dropped before its end (a `break` out of the loop) gives its session back too.
    fn drop(&mut self) {
        self.finish();
    }
}

/// The iterator `LanguageModel.generate(..., stream=True)` returns: text pieces, one token
/// computed per step with the GIL released. `ids` and `stats` describe the tokens so far.
#[pyclass(module = "strata._strata", frozen)]
pub struct TokenStream {
    state: Mutex<StreamState>,
}

#[pymethods]
impl TokenStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.locked(py).next_piece(py)
    }

    /// Stops the generation (its session goes back to the model's pool).
    fn close(&self, py: Python<'_>) {
        self.locked(py).finish();
    }

    /// Ids generated so far.
    #[getter]
    fn ids(&self, py: Python<'_>) -> Vec<u32> {
        self.locked(py).ids.clone()
    }

    /// Whether the generation is over (its end, a stop, the budget, or `close`).
    #[getter]
    fn finished(&self, py: Python<'_>) -> bool {
        self.locked(py).generation.is_none()
    }

    /// Token counts and speeds: prefill's once started, decode's once finished.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.locked(py);
        stats_dict(py, &state.stats, state.kv_cache_bytes)
    }
}

impl TokenStream {
    /// The state, locked. A thread that finds it busy (another thread is computing a token of
    /// this stream) waits without the GIL, which the busy thread needs back when its token is
    /// done.
    fn locked(&self, py: Python<'_>) -> parking_lot::MutexGuard<'_, StreamState> {
        loop {
            if let Some(state) = self.state.try_lock() {
                return state;
            }
            py.detach(|| drop(self.state.lock()));
        }
    }
}

fn stats_dict<'py>(
    py: Python<'py>,
    stats: &GenerationStats,
    kv_cache_bytes: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("prompt_tokens", stats.prompt_tokens)?;
    dict.set_item("generated_tokens", stats.generated_tokens)?;
    dict.set_item("prefill_s", stats.prefill_time.as_secs_f64())?;
    dict.set_item("decode_s", stats.decode_time.as_secs_f64())?;
    dict.set_item("prefill_tokens_per_s", stats.prefill_tokens_per_s())?;
    dict.set_item("decode_tokens_per_s", stats.decode_tokens_per_s())?;
    dict.set_item("kv_cache_bytes", kv_cache_bytes)?;
    Ok(dict)
}

fn signed(value: &Value) -> Option<i64> {
    match *value {
        Value::I8(v) => Some(v.into()),
        Value::I16(v) => Some(v.into()),
        Value::I32(v) => Some(v.into()),
        Value::I64(v) => Some(v),
        _ => None,
    }
}
