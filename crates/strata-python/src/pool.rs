//! A pool of execution contexts per plan: each call takes one (or makes one when all are busy)
//! and gives it back, so concurrent Python threads never share a context and a steady stream
//! of calls reuses the same arenas.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use strata_runtime::{ExecutionContext, InferencePlan, RuntimeError};

pub struct ContextPool {
    plan: Arc<InferencePlan>,
    idle: Mutex<Vec<ExecutionContext>>,
    created: AtomicUsize,
}

impl ContextPool {
    pub fn new(plan: Arc<InferencePlan>) -> Self {
        ContextPool {
            plan,
            idle: Mutex::new(Vec::new()),
            created: AtomicUsize::new(0),
        }
    }

    pub fn plan(&self) -> &Arc<InferencePlan> {
        &self.plan
    }

    /// An idle context, or a new one when every context is in use.
    pub fn take(&self) -> Result<ExecutionContext, RuntimeError> {
        if let Some(ctx) = self.idle.lock().pop() {
            return Ok(ctx);
        }
        let ctx = self.plan.create_context()?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    /// Returns a context after a successful run.
    pub fn give(&self, ctx: ExecutionContext) {
        self.idle.lock().push(ctx);
    }

    /// Drops a context whose run failed (its state is not trusted again).
    pub fn discard(&self, ctx: ExecutionContext) {
        drop(ctx);
        self.created.fetch_sub(1, Ordering::Relaxed);
    }

    /// Contexts alive (idle or in use): how many calls have ever overlapped.
    pub fn created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }

    /// Runs `f` over every idle context (for reports that aggregate over the pool).
    pub fn with_idle<R>(&self, f: impl FnOnce(&[ExecutionContext]) -> R) -> R {
        f(&self.idle.lock())
    }
}
