//! What a context keeps between runs to stop them from outside: the cancel flag, the timeout and
//! the loop-trip bound (its API is in `control.rs`).

use std::time::{Duration, Instant};

use strata_ops::run_control::{CancelFlag, RunControl};

use crate::{PlanConfig, Result, RuntimeError};

/// What a context keeps between runs.
pub(super) struct RunLimits {
    pub cancel: CancelFlag,
    pub timeout: Option<Duration>,
    max_loop_iterations: u64,
}

impl RunLimits {
    pub fn new(config: &PlanConfig) -> Self {
        RunLimits {
            cancel: CancelFlag::default(),
            timeout: None,
            max_loop_iterations: config.max_loop_iterations,
        }
    }

    /// The control of the run starting now (its deadline counts from here).
    pub fn for_run(&self) -> RunControl {
        RunControl {
            cancel: self.cancel.clone(),
            deadline: self.timeout.map(|t| (Instant::now() + t, t)),
            max_loop_iterations: self.max_loop_iterations,
        }
    }

    /// A cancellation stops one run: lower the flag once it has, so the context can run again.
    pub fn after_run(&self, result: &Result<()>) {
        if result.as_ref().is_err_and(RuntimeError::is_cancelled) {
            self.cancel.reset();
        }
    }
}
