//! The sampler: logits in, one token id out, with every buffer sized at setup.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::config::SamplerConfig;
use crate::error::{Result, TokenizerError};

#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Picks tokens from logits; see the module docs for the order of the filters.
#[derive(Debug)]
pub struct Sampler {
    config: SamplerConfig,
    vocab_size: usize,
    rng: Xoshiro256PlusPlus,
    candidates: Vec<Candidate>,
    /// Recent tokens for the repetition penalty, a ring of `repetition_window` slots.
    history: Vec<u32>,
    history_next: usize,
    /// Marks tokens already penalised this step (one bit per token).
    penalised: Vec<u64>,
}

impl Sampler {
    /// Builds a sampler for logits of length `vocab_size`; settings out of range are an error.
    pub fn new(config: SamplerConfig, vocab_size: usize) -> Result<Self> {
        config.validate()?;
        if vocab_size == 0 || u32::try_from(vocab_size).is_err() {
            return Err(TokenizerError::SamplerConfig {
                setting: "vocab_size",
                value: vocab_size.to_string(),
                reason: "must be between 1 and u32::MAX",
            });
        }
        let rng = Xoshiro256PlusPlus::seed_from_u64(config.seed);
        let window = config.repetition_window;
        Ok(Self {
            vocab_size,
            rng,
            candidates: Vec::with_capacity(vocab_size),
            history: Vec::with_capacity(window),
            history_next: 0,
            penalised: vec![0; vocab_size.div_ceil(64)],
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Records a token as seen (for the repetition penalty) without sampling, e.g. the prompt.
    pub fn accept(&mut self, id: u32) {
        let window = self.config.repetition_window;
        if window == 0 {
            return;
        }
        if self.history.len() < window {
            self.history.push(id);
        } else {
            self.history[self.history_next] = id;
        }
        self.history_next = (self.history_next + 1) % window;
    }

    /// Forgets the seen tokens and reseeds, to start a new sequence reproducibly.
    pub fn reset(&mut self) {
        self.history.clear();
        self.history_next = 0;
        self.rng = Xoshiro256PlusPlus::seed_from_u64(self.config.seed);
    }

    /// Picks the next token from `logits` (one per vocabulary entry) and records it as seen.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if logits.len() != self.vocab_size {
            return Err(TokenizerError::LogitsLength {
                expected: self.vocab_size,
                actual: logits.len(),
            });
        }
        self.candidates.clear();
        // NaN never wins: it becomes -inf.
        self.candidates
            .extend(logits.iter().enumerate().map(|(id, &l)| Candidate {
                id: id as u32,
                logit: if l.is_nan() { f32::NEG_INFINITY } else { l },
            }));
        self.apply_repetition_penalty();
        let id = if self.config.temperature == 0.0 {
            self.argmax()
        } else {
            self.draw()
        };
        self.accept(id);
        Ok(id)
    }

    fn apply_repetition_penalty(&mut self) {
        let penalty = self.config.repetition_penalty;
        if penalty == 1.0 {
            return;
        }
        for &id in &self.history {
            let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
            let Some(slot) = self.penalised.get_mut(word) else {
                continue;
            };
            if *slot & bit != 0 {
                continue;
            }
            *slot |= bit;
            let c = &mut self.candidates[id as usize];
            c.logit = if c.logit > 0.0 {
                c.logit / penalty
            } else {
                c.logit * penalty
            };
        }
        for &id in &self.history {
            if let Some(slot) = self.penalised.get_mut(id as usize / 64) {
                *slot = 0;
            }
        }
    }

    /// The highest logit; ties go to the lowest id.
    fn argmax(&self) -> u32 {
        let mut best = self.candidates[0];
        for &c in &self.candidates[1..] {
            if c.logit > best.logit {
                best = c;
            }
        }
        best.id
    }

    fn draw(&mut self) -> u32 {
        let by_logit_desc =
            |a: &Candidate, b: &Candidate| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id));
        let max_logit = self
            .candidates
            .iter()
            .fold(f32::NEG_INFINITY, |m, c| m.max(c.logit));
        if max_logit == f32::NEG_INFINITY {
            // Nothing is possible; fall back to the deterministic choice.
            return self.argmax();
        }
        // The filters below keep at least the most likely token.
        let k = self.config.top_k;
        if k > 0 && k < self.candidates.len() {
            self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
            self.candidates.truncate(k);
        }
        let top_p = self.config.top_p;
        if top_p < 1.0 {
            self.candidates.sort_unstable_by(by_logit_desc);
            let total: f64 = self
                .candidates
                .iter()
                .map(|c| f64::from(c.logit - max_logit).exp())
                .sum();
            let mut cumulative = 0.0;
            let mut keep = self.candidates.len();
            for (i, c) in self.candidates.iter().enumerate() {
                cumulative += f64::from(c.logit - max_logit).exp() / total;
                if cumulative >= f64::from(top_p) {
                    keep = i + 1;
                    break;
                }
            }
            self.candidates.truncate(keep);
        }
        let min_p = self.config.min_p;
        if min_p > 0.0 {
            // p >= min_p * p_max  <=>  logit >= max_logit + ln(min_p)
            let threshold = max_logit + min_p.ln();
            self.candidates.retain(|c| c.logit >= threshold);
        }
        let inv_temperature = 1.0 / f64::from(self.config.temperature);
        let weight = |c: &Candidate| (f64::from(c.logit - max_logit) * inv_temperature).exp();
        let total: f64 = self.candidates.iter().map(weight).sum();
        let target = unit_interval(self.rng.next_u64()) * total;
        let mut cumulative = 0.0;
        for c in &self.candidates {
            cumulative += weight(c);
            if target < cumulative {
                return c.id;
            }
        }
        // Rounding left `target` at the very end: the last candidate with weight.
        self.candidates
            .iter()
            .rev()
            .find(|c| weight(c) > 0.0)
            .map_or(self.candidates[0].id, |c| c.id)
    }
}

/// A uniform draw in [0, 1) from 53 random bits.
fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(config: SamplerConfig, n: usize) -> Sampler {
        Sampler::new(config, n).unwrap()
    }

    fn counts(s: &mut Sampler, logits: &[f32], draws: usize) -> Vec<usize> {
        let mut counts = vec![0; logits.len()];
        for _ in 0..draws {
            counts[s.sample(logits).unwrap() as usize] += 1;
        }
        counts
    }

    #[test]
    fn greedy_takes_the_highest_logit_and_the_lowest_id_on_ties() {
        let mut s = sampler(SamplerConfig::greedy(), 4);
        assert_eq!(s.sample(&[0.1, 2.0, -1.0, 2.0]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, 0.0, f32::NAN, -3.0]).unwrap(), 1);
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens_and_another_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = sampler(
                SamplerConfig {
                    seed,
                    ..Default::default()
                },
                logits.len(),
            );
            (0..40)
                .map(|_| s.sample(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let mut s = sampler(
            SamplerConfig {
                seed: 7,
                ..Default::default()
            },
            logits.len(),
        );
        let first: Vec<u32> = (0..40).map(|_| s.sample(&logits).unwrap()).collect();
        s.reset();
        let again: Vec<u32> = (0..40).map(|_| s.sample(&logits).unwrap()).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn sampling_follows_the_softmax() {
        // p = softmax([ln 1, ln 3]) = [0.25, 0.75]
        let logits = [0.0f32, 3f32.ln()];
        let mut s = sampler(
            SamplerConfig {
                seed: 1,
                ..Default::default()
            },
            2,
        );
        let c = counts(&mut s, &logits, 20_000);
        let share = c[1] as f64 / 20_000.0;
        assert!((share - 0.75).abs() < 0.02, "share of token 1 = {share}");
    }

    #[test]
    fn top_k_keeps_only_the_k_best() {
        let logits = [1.0f32, 5.0, 4.0, 3.0, 2.0];
        let mut s = sampler(
            SamplerConfig {
                top_k: 2,
                seed: 3,
                ..Default::default()
            },
            5,
        );
        let c = counts(&mut s, &logits, 2000);
        assert_eq!(c[0] + c[3] + c[4], 0, "{c:?}");
        assert!(c[1] > 0 && c[2] > 0);
        let mut s = sampler(
            SamplerConfig {
                top_k: 1,
                seed: 3,
                ..Default::default()
            },
            5,
        );
        assert!(counts(&mut s, &logits, 200)
            .iter()
            .enumerate()
            .all(|(i, &n)| (i == 1) == (n > 0)));
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // probabilities 0.5, 0.3, 0.2: p = 0.75 keeps the first two; p = 0.5 keeps only the first.
        let logits = [0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()];
        let mut s = sampler(
            SamplerConfig {
                top_p: 0.75,
                seed: 5,
                ..Default::default()
            },
            3,
        );
        let c = counts(&mut s, &logits, 3000);
        assert_eq!(c[2], 0, "{c:?}");
        assert!(c[0] > 0 && c[1] > 0);
        let mut s = sampler(
            SamplerConfig {
                top_p: 0.5,
                seed: 5,
                ..Default::default()
            },
            3,
        );
        assert_eq!(counts(&mut s, &logits, 300), [300, 0, 0]);
        // A tiny p still keeps the most likely token.
        let mut s = sampler(
            SamplerConfig {
                top_p: 1e-9,
                seed: 5,
                ..Default::default()
            },
            3,
        );
        assert_eq!(counts(&mut s, &logits, 50), [50, 0, 0]);
    }

    #[test]
    fn min_p_drops_tokens_below_the_fraction_of_the_best() {
        // probabilities relative to the best: 1, 0.5, 0.1
        let logits = [0.0f32, 0.5f32.ln(), 0.1f32.ln()];
        let mut s = sampler(
            SamplerConfig {
                min_p: 0.4,
                seed: 9,
                ..Default::default()
            },
            3,
        );
        let c = counts(&mut s, &logits, 3000);
        assert_eq!(c[2], 0, "{c:?}");
        assert!(c[1] > 0);
        let mut s = sampler(
            SamplerConfig {
                min_p: 1.0,
                seed: 9,
                ..Default::default()
            },
            3,
        );
        assert_eq!(counts(&mut s, &logits, 100), [100, 0, 0]);
    }

    #[test]
    fn repetition_penalty_makes_seen_tokens_less_likely() {
        let mut s = sampler(
            SamplerConfig {
                repetition_penalty: 4.0,
                ..SamplerConfig::greedy()
            },
            3,
        );
        s.accept(0);
        // 2.0 / 4 = 0.5 < 1.0: token 1 wins although token 0 had the highest logit.
        assert_eq!(s.sample(&[2.0, 1.0, -1.0]).unwrap(), 1);
        // Negative logits are multiplied: -0.1 * 4 = -0.4 < -0.3.
        let mut s = sampler(
            SamplerConfig {
                repetition_penalty: 4.0,
                ..SamplerConfig::greedy()
            },
            2,
        );
        s.accept(0);
        s.accept(0);
        assert_eq!(s.sample(&[-0.1, -0.3]).unwrap(), 1);
    }

    #[test]
    fn repetition_window_forgets_old_tokens() {
        let config = SamplerConfig {
            repetition_penalty: 100.0,
            repetition_window: 2,
            ..SamplerConfig::greedy()
        };
        let mut s = sampler(config, 3);
        s.accept(0);
        s.accept(1);
        s.accept(2); // pushes 0 out of the window
        assert_eq!(s.sample(&[1.0, 0.9, 0.8]).unwrap(), 0);
    }

    #[test]
    fn bad_settings_and_lengths_are_typed_errors() {
        for config in [
            SamplerConfig {
                temperature: -1.0,
                ..Default::default()
            },
            SamplerConfig {
                top_p: 0.0,
                ..Default::default()
            },
            SamplerConfig {
                min_p: 1.5,
                ..Default::default()
            },
            SamplerConfig {
                repetition_penalty: 0.0,
                ..Default::default()
            },
        ] {
            assert!(matches!(
                Sampler::new(config, 4),
                Err(TokenizerError::SamplerConfig { .. })
            ));
        }
        let mut s = sampler(SamplerConfig::default(), 4);
        assert!(matches!(
            s.sample(&[0.0; 3]),
            Err(TokenizerError::LogitsLength {
                expected: 4,
                actual: 3
            })
        ));
    }

    #[test]
    fn all_impossible_logits_fall_back_to_the_first_token() {
        let mut s = sampler(SamplerConfig::default(), 3);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 3]).unwrap(), 0);
    }
}
