//! The state of one execution context: its plan, the specialization and arena in force, and the
//! tensor bound for every value.

use std::sync::Arc;
use std::time::Duration;

use strata_core::{MemoryBlock, Tensor};

use crate::planned::Planned;
use crate::{InferencePlan, Result};

/// Counters of one context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextStats {
    /// Completed `execute` calls.
    pub runs: u64,
    /// Times the arena was planned again because a larger shape did not fit.
    pub replans: u64,
    /// Times input dims changed and shapes were re-inferred.
    pub respecializations: u64,
    /// Current arena size.
    pub arena_bytes: usize,
}

/// Per-request state for running an [`InferencePlan`].
pub struct ExecutionContext {
    pub(super) plan: Arc<InferencePlan>,
    pub(super) planned: Option<Arc<Planned>>,
    pub(super) arena: Option<Arc<MemoryBlock>>,
    /// Per value: the tensor bound for it (arena view, weight, constant, or run-time allocation).
    pub(super) values: Vec<Tensor>,
    /// Per node: its scratch buffer (undefined when it needs none).
    pub(super) scratch: Vec<Tensor>,
    /// Per runtime input: the tensor given since the last run, copied in at `execute`.
    pub(super) pending: Vec<Option<Tensor>>,
    pub(super) input_set: Vec<bool>,
    pub(super) timings: Vec<Duration>,
    pub(super) stats: ContextStats,
    /// Cancellation flag, timeout and loop bound of this context's runs.
    pub(super) limits: super::limits::RunLimits,
}

impl InferencePlan {
    /// A new execution context; allocates its arena now when the memory plan is known.
    pub fn create_context(self: &Arc<Self>) -> Result<ExecutionContext> {
        ExecutionContext::new(self.clone())
    }
}

impl ExecutionContext {
    fn new(plan: Arc<InferencePlan>) -> Result<Self> {
        let n_values = plan.graph().values.len();
        let n_nodes = plan.graph().nodes.len();
        let n_inputs = plan.inputs().len();
        let mut ctx = ExecutionContext {
            planned: None,
            arena: None,
            values: vec![Tensor::undefined(); n_values],
            scratch: vec![Tensor::undefined(); n_nodes],
            pending: vec![None; n_inputs],
            input_set: vec![false; n_inputs],
            timings: vec![Duration::ZERO; if plan.config().profiling { n_nodes } else { 0 }],
            stats: ContextStats::default(),
            limits: super::limits::RunLimits::new(plan.config()),
            plan,
        };
        if let Some(base) = ctx.plan.base().cloned() {
            ctx.install(base, true)?;
        }
        Ok(ctx)
    }

    pub fn plan(&self) -> &Arc<InferencePlan> {
        &self.plan
    }

    pub fn stats(&self) -> ContextStats {
        self.stats
    }
}
