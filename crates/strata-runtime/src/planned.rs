//! A specialization with its memory plan: everything one set of input dims needs to run. Built
//! in one place for the plan's base dims and for a context's new input dims ("specialize, then
//! plan memory"), reusing the current memory plan when every value still fits its slot.

use std::sync::Arc;

use strata_ops::{Dim, Fact};

use crate::graph::ValueSource;
use crate::planner::plan_memory;
use crate::specialize::specialize;
use crate::{Graph, MemoryPlan, PlanConfig, Result, Specialization};

/// A specialization with its memory plan.
#[derive(Debug)]
pub struct Planned {
    pub spec: Specialization,
    /// Shared with the specialization it was kept from, when the new one fit.
    pub memory: Arc<MemoryPlan>,
}

impl Planned {
    /// Specializes `graph` for `input_dims` (one entry per runtime input) and plans its memory.
    /// Keeps `current`'s memory plan when every value of the new specialization fits the slot it
    /// gave that value (then only the metadata changes).
    pub fn new(
        graph: &Graph,
        input_dims: &[Vec<Dim>],
        config: &PlanConfig,
        current: Option<&Planned>,
    ) -> Result<Planned> {
        let spec = specialize(graph, input_dims, config.threads)?;
        let memory = match current.filter(|c| fits(&c.memory, &spec, graph)) {
            Some(current) => current.memory.clone(),
            None => Arc::new(plan_memory(graph, &spec, config.alignment)?),
        };
        Ok(Planned { spec, memory })
    }

    /// Whether this specialization kept `other`'s memory plan rather than planning anew.
    pub fn shares_memory_with(&self, other: &Planned) -> bool {
        Arc::ptr_eq(&self.memory, &other.memory)
    }
}

/// True when every static value of `spec` fits the slot `memory` gave it.
fn fits(memory: &MemoryPlan, spec: &Specialization, graph: &Graph) -> bool {
    graph.values.iter().enumerate().all(|(id, value)| {
        let fact = &spec.facts[id];
        if matches!(
            value.source,
            ValueSource::Initializer(_) | ValueSource::Packed { .. } | ValueSource::Removed
        ) || fact.value.is_some()
            || fact.dtype.is_string()
        {
            return true;
        }
        match (fact.concrete(), memory.values[id]) {
            (Some(dims), Some(slot)) => strata_core::Shape::new(&dims)
                .and_then(|s| s.size_in_bytes(fact.dtype))
                .is_ok_and(|b| b <= slot.bytes),
            (None, None) => true,
            _ => false,
        }
    }) && graph.nodes.iter().enumerate().all(|(i, node)| {
        let inputs: Vec<&Fact> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*ABSENT, |id| &spec.facts[id.0]))
            .collect();
        let outputs: Vec<&Fact> = node.outputs.iter().map(|id| &spec.facts[id.0]).collect();
        let need = if spec.skip[i] || spec.dynamic[i] {
            Ok(0)
        } else {
            node.op.scratch_bytes(&inputs, &outputs)
        };
        match (need, memory.scratch[i]) {
            (Ok(0), _) => true,
            (Ok(n), Some(slot)) => n <= slot.bytes,
            _ => false,
        }
    })
}

static ABSENT: std::sync::LazyLock<Fact> = std::sync::LazyLock::new(Fact::absent);
