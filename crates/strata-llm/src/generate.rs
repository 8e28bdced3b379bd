//! Generation: sample, step, stream. [`Generation`] is an iterator of [`Piece`]s — each
//! generated token with the text that became safe to show (UTF-8 reassembled across tokens,
//! text that may start a stop string held back) — ending on an end-of-generation token, a stop
//! string, the token budget or a full context.

use std::borrow::BorrowMut;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_tokenizer::sampling::{Sampler, SamplerConfig, StopChecker};
use strata_tokenizer::StreamState;

use crate::error::{LlmError, Result};
use crate::model::LanguageModel;
use crate::session::Session;

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation stops before any of these strings (they are not shown).
    pub stop_strings: Vec<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 128,
            sampler: SamplerConfig::greedy(),
            stop_strings: Vec::new(),
        }
    }
}

/// One generated token and the text it released.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub id: u32,
    pub text: String,
}

/// Timings of one generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub prefill_time: Duration,
    pub generated_tokens: usize,
    /// Time in decode steps (the tokens after the first, which prefill's logits give).
    pub decode_time: Duration,
    pub decode_steps: usize,
}

impl GenerationStats {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        per_second(self.prompt_tokens, self.prefill_time)
    }

    pub fn decode_tokens_per_s(&self) -> f64 {
        per_second(self.decode_steps, self.decode_time)
    }
}

fn per_second(n: usize, t: Duration) -> f64 {
    if t.is_zero() {
        0.0
    } else {
        n as f64 / t.as_secs_f64()
    }
}

/// Streams generated tokens; see the module docs. `S` is how the session is held: borrowed
/// (`&mut Session`, from [`LanguageModel::generate`]) or owned (`Session`, from
/// [`Session::into_generation`], for a generation that must outlive any borrow, e.g. one handed
/// to another language's runtime).
pub struct Generation<S: BorrowMut<Session>> {
    session: S,
    sampler: Sampler,
    stop: StopChecker,
    decoder: StreamState,
    /// The last token sampled, run through the model at the next call.
    pending: Option<u32>,
    remaining: usize,
    done: bool,
    stats: GenerationStats,
}

impl LanguageModel {
    /// Prefills `prompt` into `session` (a session of this model) and returns the generation
    /// that follows it.
    pub fn generate<'a>(
        &self,
        session: &'a mut Session,
        prompt: &[u32],
        options: &GenerateOptions,
    ) -> Result<Generation<&'a mut Session>> {
        if !std::ptr::eq(self, Arc::as_ptr(session.model())) {
            return Err(LlmError::Usage {
                what: "generate",
                reason: "the session belongs to another model".into(),
            });
        }
        Generation::start(session, prompt, options)
    }
}

impl Session {
    /// Prefills `prompt` and returns a generation that owns this session
    /// ([`Generation::into_session`] gives it back).
    pub fn into_generation(
        self,
        prompt: &[u32],
        options: &GenerateOptions,
    ) -> Result<Generation<Session>> {
        Generation::start(self, prompt, options)
    }
}

impl<S: BorrowMut<Session>> Generation<S> {
    fn start(mut session: S, prompt: &[u32], options: &GenerateOptions) -> Result<Self> {
        let s = session.borrow_mut();
        let model = s.model().clone();
        let mut sampler = Sampler::new(options.sampler.clone(), model.vocab_size())?;
        for &id in prompt {
            sampler.accept(id);
        }
        let stops: Vec<&str> = options.stop_strings.iter().map(String::as_str).collect();
        let started = Instant::now();
        s.prefill(prompt)?;
        let stats = GenerationStats {
            prompt_tokens: prompt.len(),
            prefill_time: started.elapsed(),
            ..Default::default()
        };
        Ok(Generation {
            session,
            sampler,
            stop: StopChecker::new(model.tokenizer().end_of_generation_ids(), &stops),
            decoder: StreamState::new(false),
            pending: None,
            remaining: options.max_tokens,
            done: options.max_tokens == 0,
            stats,
        })
    }

    pub fn stats(&self) -> GenerationStats {
        self.stats
    }

    pub fn session(&self) -> &Session {
        self.session.borrow()
    }

    /// Ends the generation and returns the session (its KV cache holds the prompt and the
    /// tokens run so far).
    pub fn into_session(self) -> S {
        self.session
    }

    /// The next piece, or `None` when generation is over.
    fn advance(&mut self) -> Result<Option<Piece>> {
        if self.done {
            return Ok(None);
        }
        let session = self.session.borrow_mut();
        if let Some(previous) = self.pending.take() {
            let started = Instant::now();
            session.step(previous)?;
            self.stats.decode_time += started.elapsed();
            self.stats.decode_steps += 1;
        }
        let id = self.sampler.sample(session.logits())?;
        self.sampler.accept(id);
        self.stats.generated_tokens += 1;
        self.remaining -= 1;
        let model = session.model();
        let text = self.decoder.push(model.tokenizer(), id)?.to_string();
        let step = self.stop.push(id, &text);
        let mut text = step.text.to_string();
        if step.stop {
            self.done = true;
            return Ok(Some(Piece { id, text }));
        }
        // The last token: the budget is spent or the context has no room to run it.
        if self.remaining == 0 || session.len() >= model.context() {
            self.done = true;
            text.push_str(self.decoder.finish());
            text.push_str(self.stop.finish());
        } else {
            self.pending = Some(id);
        }
        Ok(Some(Piece { id, text }))
    }
}

impl<S: BorrowMut<Session>> Iterator for Generation<S> {
    type Item = Result<Piece>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance().transpose()
    }
}
