//! Binding a specialization into the context's arena: every value gets its weight, constant or
//! planned slot, and the arena grows (zeroed) when the plan needs more.

use std::sync::Arc;

use strata_core::memory::alias::alias_region;
use strata_core::{AllocatorRegistry, DType, MemoryKind, Storage, Tensor};

use super::state::ExecutionContext;
use crate::graph::ValueSource;
use crate::planned::Planned;
use crate::{Result, RuntimeError};

impl ExecutionContext {
    /// Binds every value for `planned`, allocating a (zeroed) arena when the current one is
    /// missing or too small. Inputs that were set keep their contents.
    pub(super) fn install(&mut self, planned: Arc<Planned>, fresh: bool) -> Result<()> {
        let plan = self.plan.clone();
        let graph = plan.graph();
        let kept_inputs: Vec<(usize, Tensor)> = if fresh {
            Vec::new()
        } else {
            plan.inputs()
                .iter()
                .enumerate()
                .filter(|(i, _)| self.input_set[*i] && self.pending[*i].is_none())
                .map(|(i, info)| (i, self.values[info.value.0].clone()))
                .collect()
        };
        let needed = planned.memory.arena_bytes;
        let arena = match self.arena.clone().filter(|a| a.len() >= needed) {
            Some(arena) => arena,
            None => {
                // Drop views of the old arena first so its memory can be recycled.
                self.values
                    .iter_mut()
                    .for_each(|v| *v = Tensor::undefined());
                self.scratch
                    .iter_mut()
                    .for_each(|v| *v = Tensor::undefined());
                let block = AllocatorRegistry::global().allocate(
                    plan.config().device,
                    MemoryKind::Workspace,
                    needed,
                    plan.config().alignment,
                )?;
                Tensor::from_storage(
                    Storage::new(block.clone()),
                    strata_core::Layout::contiguous(strata_core::Shape::new(&[needed])?, 0),
                    DType::U8,
                )?
                .fill_zero()?;
                self.arena = Some(block.clone());
                self.stats.arena_bytes = needed;
                block
            }
        };
        for (id, value) in graph.values.iter().enumerate() {
            let fact = &planned.spec.facts[id];
            self.values[id] = if let ValueSource::Initializer(t) = &value.source {
                t.clone()
            } else if let Some(v) = &fact.value {
                v.clone()
            } else if let (Some(slot), Some(dims)) = (planned.memory.values[id], fact.concrete()) {
                // SAFETY: the planner gives overlapping slots disjoint lifetimes and this context
                // runs nodes one at a time in plan order, so two overlapping aliases are never
                // borrowed at once; arena views never leave the context (outputs are handed out
                // as borrowed `OutputView`s).
                let storage = unsafe {
                    alias_region(&arena, slot.offset, slot.bytes, MemoryKind::Workspace)?
                };
                Tensor::bind(&storage, 0, &dims, fact.dtype)?
            } else {
                Tensor::undefined()
            };
        }
        for (i, slot) in planned.memory.scratch.iter().enumerate() {
            self.scratch[i] = match slot {
                Some(slot) => {
                    // SAFETY: as above: scratch slots are planned entries living only while their node runs.
                    let storage = unsafe {
                        alias_region(&arena, slot.offset, slot.bytes, MemoryKind::Workspace)?
                    };
                    Tensor::bind(&storage, 0, &[slot.bytes], DType::U8)?
                }
                None => Tensor::undefined(),
            };
        }
        for (i, old) in kept_inputs {
            set_value(&mut self.values[plan.inputs()[i].value.0], &old)?;
        }
        check_bindings(graph, &planned, &self.values)?;
        self.planned = Some(planned);
        Ok(())
    }
}

/// Writes an input's contents into its bound value. Text has no arena slot: the (immutable)
/// tensor itself is bound.
pub(super) fn set_value(slot: &mut Tensor, tensor: &Tensor) -> Result<()> {
    if tensor.dtype().is_string() {
        *slot = tensor.clone();
    } else {
        slot.copy_from(tensor)?;
    }
    Ok(())
}

/// Strict mode: every value a static node reads or writes must be bound (a weight, a constant
/// or a planned arena slot); values produced on the dynamic path are bound when they run, and
/// packed weights are never bound (their readers hold them packed).
fn check_bindings(graph: &crate::Graph, planned: &Planned, values: &[Tensor]) -> Result<()> {
    let bound_later_or_never = |id: usize| match graph.values[id].source {
        ValueSource::Node(node, _) => planned.spec.dynamic[node.0],
        ValueSource::Packed { .. } => true,
        _ => false,
    };
    for (i, node) in graph.nodes.iter().enumerate() {
        if planned.spec.skip[i] || planned.spec.dynamic[i] {
            continue;
        }
        for id in node.inputs.iter().flatten().chain(&node.outputs) {
            let text = planned.spec.facts[id.0].dtype.is_string(); // bound when it exists
            if !values[id.0].is_defined() && !bound_later_or_never(id.0) && !text {
                return Err(RuntimeError::Unbound {
                    value: graph.values[id.0].name.clone(),
                    node: node.name.clone(),
                });
            }
        }
    }
    Ok(())
}
