//! A session: one conversation on a shared model — an execution context of the model's plan
//! with its own paged KV cache. `prefill` runs the prompt (in chunks), `step` one token; both
//! return the next token's logits. A decode step in steady state allocates nothing: the input
//! tensors are made once, the plan's arena is reused (same dims as the last step) and the
//! logits are copied into a buffer the session owns.

use std::sync::Arc;
use std::time::Duration;

use strata_core::Tensor;
use strata_ops::run_control::CancelFlag;
use strata_runtime::ExecutionContext;

use crate::error::{LlmError, Result};
use crate::model::LanguageModel;

/// One conversation on a [`LanguageModel`].
pub struct Session {
    model: Arc<LanguageModel>,
    ctx: ExecutionContext,
    /// Positions in the KV cache.
    len: usize,
    /// The one-token inputs of decode steps, reused.
    step_ids: Tensor,
    step_positions: Tensor,
    /// The next token's logits after the last call.
    logits: Vec<f32>,
}

impl LanguageModel {
    /// A new conversation: an execution context with its own (empty) KV cache.
    pub fn session(self: &Arc<Self>) -> Result<Session> {
        Session::new(self.clone())
    }
}

impl Session {
    fn new(model: Arc<LanguageModel>) -> Result<Session> {
        let ctx = model.plan().create_context()?;
        Ok(Session {
            step_ids: Tensor::from_slice(&[0i64], &[1, 1])?,
            step_positions: Tensor::from_slice(&[0i64], &[1, 1])?,
            logits: vec![0.0; model.vocab_size()],
            ctx,
            len: 0,
            model,
        })
    }

    /// A flag that stops this session's current (or next) `prefill` or `step` from any thread:
    /// the products and attention poll it between blocks of rows, and the call fails with an
    /// error for which [`LlmError::is_cancelled`] holds. The stopped call's positions are not
    /// kept: the session holds what it held before it.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.ctx.cancel_flag()
    }

    /// Each later `prefill` or `step` fails ([`LlmError::is_timeout`]) once one run of the model
    /// (a prompt chunk or a step) has taken longer than `timeout`; `None` removes the limit.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.ctx.set_timeout(timeout);
    }

    pub fn model(&self) -> &Arc<LanguageModel> {
        &self.model
    }

    /// Positions held (prompt and generated tokens so far).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of KV cache this session holds now (`KVCache` memory).
    pub fn kv_cache_bytes(&self) -> usize {
        self.ctx.state_bytes()
    }

    /// Forgets the conversation and releases its KV cache.
    pub fn reset(&mut self) {
        self.ctx.reset_state();
        self.len = 0;
    }

    /// The next token's logits after the last `prefill` or `step`.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Runs `ids` after what the session holds and returns the next token's logits.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<&[f32]> {
        self.prefill_rows(ids, |_| {})?;
        Ok(&self.logits)
    }

    /// Runs `ids` and returns the logits of every one of them (`ids.len() × vocab`, row-major):
    /// the model must be loaded with `all_logits`.
    pub fn prefill_all(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        if !self.model.options().all_logits {
            return Err(LlmError::Usage {
                what: "prefill_all",
                reason: "the model was loaded for last-position logits (LoadOptions::all_logits)"
                    .into(),
            });
        }
        let mut all = Vec::with_capacity(ids.len() * self.model.vocab_size());
        self.prefill_rows(ids, |rows| all.extend_from_slice(rows))?;
        Ok(all)
    }

    /// Runs `ids` in chunks, handing each chunk's logits to `rows`.
    fn prefill_rows(&mut self, ids: &[u32], mut rows: impl FnMut(&[f32])) -> Result<()> {
        if ids.is_empty() {
            return Err(LlmError::Usage {
                what: "prefill",
                reason: "no tokens given".into(),
            });
        }
        self.check_room(ids.len())?;
        let vocab = self.model.vocab_size();
        for chunk in ids.chunks(self.model.options().prefill_chunk) {
            let mut tokens = Vec::with_capacity(chunk.len());
            for &id in chunk {
                tokens.push(self.check_id(id)?);
            }
            let positions: Vec<i64> = (self.len..self.len + chunk.len())
                .map(|p| p as i64)
                .collect();
            let ids_t = Tensor::from_slice(&tokens, &[1, chunk.len()])?;
            let positions_t = Tensor::from_slice(&positions, &[1, chunk.len()])?;
            self.run(&ids_t, &positions_t, chunk.len())?;
            let out = self.ctx.output_at(0)?;
            let logits = out.read::<f32>()?;
            let logits = logits.as_slice().ok_or_else(|| LlmError::Usage {
                what: "logits",
                reason: "the output is not contiguous".into(),
            })?;
            rows(logits);
            let last = logits
                .len()
                .checked_sub(vocab)
                .ok_or_else(|| LlmError::Usage {
                    what: "logits",
                    reason: format!("{} values, fewer than the vocabulary", logits.len()),
                })?;
            self.logits.copy_from_slice(&logits[last..]);
        }
        Ok(())
    }

    /// Runs one token after what the session holds and returns the next token's logits.
    pub fn step(&mut self, id: u32) -> Result<&[f32]> {
        self.check_room(1)?;
        let token = self.check_id(id)?;
        self.step_ids.write::<i64>()?.fill(token);
        self.step_positions.write::<i64>()?.fill(self.len as i64);
        let (ids, positions) = (self.step_ids.clone(), self.step_positions.clone());
        self.run(&ids, &positions, 1)?;
        let out = self.ctx.output_at(0)?;
        let logits = out.read::<f32>()?;
        let logits = logits
            .as_slice()
            .filter(|l| l.len() == self.logits.len())
            .ok_or_else(|| LlmError::Usage {
                what: "logits",
                reason: "the output does not hold one row of the vocabulary".into(),
            })?;
        self.logits.copy_from_slice(logits);
        Ok(&self.logits)
    }

    fn run(&mut self, ids: &Tensor, positions: &Tensor, count: usize) -> Result<()> {
        self.ctx.set_input_at(0, ids)?;
        self.ctx.set_input_at(1, positions)?;
        self.ctx.execute()?;
        self.len += count;
        Ok(())
    }

    fn check_room(&self, count: usize) -> Result<()> {
        if self.len + count > self.model.context() {
            return Err(LlmError::ContextFull {
                held: self.len,
                asked: count,
                max: self.model.context(),
            });
        }
        Ok(())
    }

    fn check_id(&self, id: u32) -> Result<i64> {
        if (id as usize) < self.model.vocab_size() {
            Ok(i64::from(id))
        } else {
            Err(LlmError::TokenOutOfRange {
                id,
                vocab: self.model.vocab_size(),
            })
        }
    }
}
