//! The state of one execution context: its plan, the specialization and arena in force, and the
//! tensor bound for every value.

use std::sync::Arc;
use std::time::Duration;

use strata_core::{MemoryBlock, Tensor};
use strata_ops::ContextState;

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
    /// Per node: the state its kernel keeps in this context across runs (a KV cache), made at
    /// creation for kernels with the `context_state` capability.
    pub(super) states: Vec<Option<Box<dyn ContextState>>>,
}

impl InferencePlan {
    /// A new execution context; allocates its arena now when the memory plan is known.
    pub fn create_context(self: &Arc<Self>) -> Result<ExecutionContext> {
        // Its arena and state (a KV cache) count against the plan's memory limit; a subgraph's
        // context, made during a run, against the limit of that run.
        strata_core::MemoryBudget::current()
            .unwrap_or_else(|| self.memory_budget().clone())
            .install(|| ExecutionContext::new(self.clone()))
    }
}

impl ExecutionContext {
    fn new(plan: Arc<InferencePlan>) -> Result<Self> {
        let n_values = plan.graph().values.len();
        let n_nodes = plan.graph().nodes.len();
        let n_inputs = plan.inputs().len();
        let states = (0..n_nodes)
            .map(|i| {
                let Some(uses) = plan.kernel(i).and_then(|k| k.capabilities().context_state) else {
                    return Ok(None);
                };
                let node = &plan.graph().nodes[i];
                uses.new_state().map(Some).map_err(|source| {
                    crate::RuntimeError::node(&node.name, node.op.op_type(), Vec::new(), source)
                })
            })
            .collect::<Result<Vec<_>>>()?;
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
            states,
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

    /// Resets every kernel's per-context state (a KV cache forgets its sequence and releases its
    /// memory), as in a new context.
    pub fn reset_state(&mut self) {
        self.states.iter_mut().flatten().for_each(|s| s.reset());
    }

    /// Bytes held by the kernels' per-context states.
    pub fn state_bytes(&self) -> usize {
        self.states.iter().flatten().map(|s| s.bytes()).sum()
    }
}
