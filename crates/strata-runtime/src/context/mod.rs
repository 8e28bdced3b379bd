//! ExecutionContext (R3–R5, R9): one per request. Owns the arena (allocated once, `Workspace`
//! kind, zeroed) with every intermediate bound at its planned offset, and runs the plan's
//! kernels in order. In steady state — same input dims as the previous run — `execute` performs
//! no heap allocation.
//!
//! One job per file: the context's state ([`state`]), taking inputs ([`inputs`]), running nodes
//! ([`run`]), adapting to new input dims ([`respecialize`]), binding values into the arena
//! ([`arena`]) and handing out outputs and timings ([`outputs`]).

mod arena;
mod control;
mod inputs;
mod limits;
mod outputs;
mod respecialize;
mod run;
mod state;

pub use outputs::{NodeTiming, OutputView};
pub use state::{ContextStats, ExecutionContext};
