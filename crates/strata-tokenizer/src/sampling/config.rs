//! Sampler settings, checked once when the sampler is built.

use crate::error::{Result, TokenizerError};

/// Sampling settings. The defaults disable every filter (pure sampling at temperature 1).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits; `0` picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `0` keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; `1` keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; `0` keeps all.
    pub min_p: f32,
    /// Divides positive (multiplies negative) logits of recently seen tokens; `1` is off.
    pub repetition_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    pub repetition_window: usize,
    /// Seed of the random generator: the same seed and logits give the same tokens.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repetition_window: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |setting, value: f32, reason| {
            Err(TokenizerError::SamplerConfig {
                setting,
                value: value.to_string(),
                reason,
            })
        };
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature, "must be finite and >= 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "must be in [0, 1]");
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad(
                "repetition_penalty",
                self.repetition_penalty,
                "must be finite and > 0",
            );
        }
        Ok(())
    }
}
