//! New input dims: shapes are inferred again and the arena is kept when every value still fits
//! its slot, planned again otherwise.

use std::sync::Arc;

use strata_ops::Dim;

use super::state::ExecutionContext;
use crate::planned::Planned;
use crate::Result;

impl ExecutionContext {
    /// True when the pending inputs' dims differ from the current specialization's.
    pub(super) fn needs_respecialization(&self) -> bool {
        let Some(planned) = &self.planned else {
            return true;
        };
        self.pending
            .iter()
            .zip(&planned.spec.input_dims)
            .any(|(pending, current)| {
                pending.as_ref().is_some_and(|t| {
                    t.rank() != current.len()
                        || t.dims()
                            .iter()
                            .zip(current)
                            .any(|(&d, c)| c.known() != Some(d))
                })
            })
    }

    /// Re-infers shapes for new input dims; reuses the arena when every value still fits its
    /// slot (metadata update only), plans again otherwise.
    pub(super) fn respecialize(&mut self) -> Result<Arc<Planned>> {
        let plan = self.plan.clone();
        let dims: Vec<Vec<Dim>> = (0..plan.inputs().len())
            .map(|i| match &self.pending[i] {
                Some(t) => t.dims().iter().map(|&d| Dim::Known(d)).collect(),
                None => self.values[plan.inputs()[i].value.0]
                    .dims()
                    .iter()
                    .map(|&d| Dim::Known(d))
                    .collect(),
            })
            .collect();
        let current = self.planned.as_deref();
        let planned = Planned::new(plan.graph(), &dims, plan.config(), current)?;
        self.stats.respecializations += 1;
        if current.is_some_and(|c| !planned.shares_memory_with(c)) {
            self.stats.replans += 1;
        }
        let planned = Arc::new(planned);
        self.install(planned.clone(), false)?;
        Ok(planned)
    }
}
