//! Stopping a context's runs from outside: a cancellation flag another thread can raise, a
//! timeout per run, and the plan's bound on loop trips (strata-ops' `run_control` does the
//! checking; this is the context's side of it).

use std::time::Duration;

use strata_core::CoreError;
use strata_ops::run_control::CancelFlag;
use strata_ops::OpError;

use super::state::ExecutionContext;
use crate::RuntimeError;

impl RuntimeError {
    /// Whether the run stopped because it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.stop_reason()
            .is_some_and(|e| matches!(e, OpError::Cancelled { .. }))
    }

    /// Whether the run stopped because it passed its deadline.
    pub fn is_timeout(&self) -> bool {
        self.stop_reason()
            .is_some_and(|e| matches!(e, OpError::TimedOut { .. }))
    }

    /// The `MemoryLimitExceeded` error under this one, when a build or run stopped at the plan's
    /// memory limit (directly, in a node, or in a subgraph's run).
    pub fn memory_limit_exceeded(&self) -> Option<&CoreError> {
        let core = match self {
            RuntimeError::Core(err) => err,
            _ => match self.stop_reason()? {
                OpError::Core(err) => err,
                _ => return None,
            },
        };
        matches!(core, CoreError::MemoryLimitExceeded { .. }).then_some(core)
    }

    /// The operator error at the bottom of this one, looking through nodes and the subgraph
    /// runs (Loop and If bodies) it happened in.
    fn stop_reason(&self) -> Option<&OpError> {
        let op = match self {
            RuntimeError::Op(e) => e,
            RuntimeError::Node(n) => &n.source,
            _ => return None,
        };
        match op {
            OpError::Subgraph { source, .. } => source
                .downcast_ref::<RuntimeError>()
                .and_then(RuntimeError::stop_reason),
            other => Some(other),
        }
    }
}

impl ExecutionContext {
    /// A flag that cancels this context's current (or next) run from any thread: the run stops
    /// at its next check (between nodes, between loop trips) with an error for which
    /// [`RuntimeError::is_cancelled`] holds, and the flag is lowered again.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.limits.cancel.clone()
    }

    /// Each later run fails with a timeout error ([`RuntimeError::is_timeout`]) once it has taken
    /// longer than `timeout`; `None` removes the limit.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.limits.timeout = timeout;
    }
}
