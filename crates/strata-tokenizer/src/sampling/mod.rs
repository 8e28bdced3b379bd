//! Choosing the next token from logits, and deciding when generation stops.
//!
//! [`Sampler`] applies, in llama.cpp's order: repetition penalty, top-k, top-p, min-p,
//! temperature, then draws from the distribution with a seeded RNG (temperature 0 is greedy). It
//! owns its buffers, so sampling a token allocates nothing after setup. [`StopChecker`] ends
//! generation on end-of-generation ids or stop strings, holding back text that may be the start
//! of a stop string.

mod config;
mod sampler;
mod stop;

pub use config::SamplerConfig;
pub use sampler::Sampler;
pub use stop::{StopChecker, StopStep};
