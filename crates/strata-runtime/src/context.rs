//! ExecutionContext (R3–R5, R9): one per request. Owns the arena (allocated once, `Workspace`
//! kind, zeroed) with every intermediate bound at its planned offset, and runs the plan's
//! kernels in order. In steady state — same input dims as the previous run — `execute` performs
//! no heap allocation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use strata_core::memory::alias::alias_region;
use strata_core::{AllocatorRegistry, DType, MemoryBlock, MemoryKind, ReadGuard, Storage, Tensor};
use strata_ops::eval::EvalOptions;
use strata_ops::{Dim, Fact, KernelIo};

use crate::graph::ValueSource;
use crate::node_eval::eval_node;
use crate::plan::Planned;
use crate::planner::plan_memory;
use crate::specialize::specialize;
use crate::{InferencePlan, Result, RuntimeError};

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
    plan: Arc<InferencePlan>,
    planned: Option<Arc<Planned>>,
    arena: Option<Arc<MemoryBlock>>,
    /// Per value: the tensor bound for it (arena view, weight, constant, or run-time allocation).
    values: Vec<Tensor>,
    /// Per node: its scratch buffer (undefined when it needs none).
    scratch: Vec<Tensor>,
    /// Per runtime input: the tensor given since the last run, copied in at `execute`.
    pending: Vec<Option<Tensor>>,
    input_set: Vec<bool>,
    timings: Vec<Duration>,
    stats: ContextStats,
}

static UNDEFINED: std::sync::LazyLock<Tensor> = std::sync::LazyLock::new(Tensor::undefined);

impl ExecutionContext {
    pub(crate) fn new(plan: Arc<InferencePlan>) -> Result<Self> {
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

    fn input_index(&self, name: &str) -> Result<usize> {
        self.plan
            .inputs()
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| RuntimeError::UnknownInput {
                name: name.to_string(),
                available: self.plan.inputs().iter().map(|i| i.name.clone()).collect(),
            })
    }

    /// Sets an input by name; its contents are read at the next `execute`.
    pub fn set_input(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let index = self.input_index(name)?;
        self.set_input_at(index, tensor)
    }

    /// Sets an input by position; its contents are read at the next `execute`.
    pub fn set_input_at(&mut self, index: usize, tensor: &Tensor) -> Result<()> {
        let info = self
            .plan
            .inputs()
            .get(index)
            .ok_or(RuntimeError::InputIndex {
                index,
                count: self.plan.inputs().len(),
            })?;
        let name = &info.name;
        if !tensor.is_defined() {
            return Err(RuntimeError::InputNotSet { name: name.clone() });
        }
        if tensor.dtype() != info.dtype {
            return Err(RuntimeError::InputDType {
                name: name.clone(),
                expected: info.dtype,
                actual: tensor.dtype(),
            });
        }
        if tensor.rank() != info.dims.len() {
            return Err(RuntimeError::InputRank {
                name: name.clone(),
                expected: info.dims.len(),
                actual: tensor.rank(),
                dims: tensor.dims().to_vec(),
            });
        }
        let profile = self
            .plan
            .config()
            .profile
            .as_ref()
            .and_then(|p| p.range(name));
        for (axis, (&actual, declared)) in tensor.dims().iter().zip(&info.dims).enumerate() {
            if let Dim::Known(expected) = declared {
                if actual != *expected {
                    return Err(RuntimeError::InputDim {
                        name: name.clone(),
                        axis,
                        expected: expected.to_string(),
                        actual,
                    });
                }
            }
            if let Some(range) = profile {
                if !(range.min[axis] <= actual && actual <= range.max[axis]) {
                    return Err(RuntimeError::OutsideProfile {
                        name: name.clone(),
                        axis,
                        actual,
                        min: range.min[axis],
                        max: range.max[axis],
                    });
                }
            }
        }
        self.pending[index] = Some(tensor.clone());
        Ok(())
    }

    /// Runs the plan on the inputs set so far.
    pub fn execute(&mut self) -> Result<()> {
        for (i, info) in self.plan.inputs().iter().enumerate() {
            if self.pending[i].is_none() && !self.input_set[i] {
                return Err(RuntimeError::InputNotSet {
                    name: info.name.clone(),
                });
            }
        }
        if self.needs_respecialization() {
            self.respecialize()?;
        }
        for i in 0..self.pending.len() {
            if let Some(tensor) = self.pending[i].take() {
                let id = self.plan.inputs()[i].value;
                set_value(&mut self.values[id.0], &tensor)?;
                self.input_set[i] = true;
            }
        }
        let planned = self
            .planned
            .clone()
            .ok_or_else(|| RuntimeError::Graph("no memory plan".into()))?;
        let plan = self.plan.clone();
        for i in 0..plan.graph().nodes.len() {
            if planned.spec.skip[i] {
                continue;
            }
            let started = (!self.timings.is_empty()).then(Instant::now);
            if planned.spec.dynamic[i] {
                self.run_dynamic(i)?;
            } else {
                self.run_static(&plan, &planned, i)?;
            }
            if let Some(t) = started {
                self.timings[i] += t.elapsed();
            }
            for &v in &planned.memory.free_after[i] {
                self.values[v] = Tensor::undefined();
            }
        }
        self.stats.runs += 1;
        Ok(())
    }

    fn run_static(&self, plan: &InferencePlan, planned: &Planned, i: usize) -> Result<()> {
        let node = &plan.graph().nodes[i];
        let kernel = plan
            .kernel(i)
            .ok_or_else(|| RuntimeError::Graph(format!("node {:?} has no kernel", node.name)))?;
        let inputs: SmallVec<[&Tensor; 16]> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*UNDEFINED, |id| &self.values[id.0]))
            .collect();
        let outputs: SmallVec<[&Tensor; 4]> =
            node.outputs.iter().map(|id| &self.values[id.0]).collect();
        let scratch = &self.scratch[i];
        let io = KernelIo {
            inputs: &inputs,
            outputs: &outputs,
            scratch: scratch.is_defined().then_some(scratch),
            in_place: planned.memory.in_place[i],
            threads: plan.config().threads,
        };
        kernel.run(&io).map_err(|source| {
            RuntimeError::node(
                &node.name,
                node.op.op_type(),
                inputs.iter().map(|t| t.dims().to_vec()).collect(),
                source,
            )
        })
    }

    /// Data-dependent nodes: outputs are made for the actual inputs, outside the arena.
    fn run_dynamic(&mut self, i: usize) -> Result<()> {
        let plan = self.plan.clone();
        let node = &plan.graph().nodes[i];
        let kernel = plan
            .kernel(i)
            .ok_or_else(|| RuntimeError::Graph(format!("node {:?} has no kernel", node.name)))?;
        let inputs: Vec<&Tensor> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*UNDEFINED, |id| &self.values[id.0]))
            .collect();
        let options = EvalOptions {
            device: plan.config().device,
            kind: MemoryKind::Workspace,
            threads: plan.config().threads,
            // A value inferred from run-time inputs may be a view of an input's arena slot
            // (Reshape, Squeeze), which a later node may reuse: give it its own memory.
            detach_views: true,
        };
        let outputs = eval_node(node, Some(kernel), &inputs, &options)?;
        for (&id, tensor) in node.outputs.iter().zip(outputs) {
            self.values[id.0] = tensor;
        }
        Ok(())
    }

    /// True when the pending inputs' dims differ from the current specialization's.
    fn needs_respecialization(&self) -> bool {
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
    fn respecialize(&mut self) -> Result<()> {
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
        let spec = specialize(plan.graph(), &dims, plan.config().threads)?;
        self.stats.respecializations += 1;
        let reuse = self
            .planned
            .as_ref()
            .filter(|current| fits(&current.memory, &spec, plan.graph()));
        let planned = match reuse {
            Some(current) => Arc::new(Planned {
                spec,
                memory: current.memory.clone(),
            }),
            None => {
                let memory = plan_memory(plan.graph(), &spec, plan.config().alignment)?;
                if self.planned.is_some() {
                    self.stats.replans += 1;
                }
                Arc::new(Planned { spec, memory })
            }
        };
        self.install(planned, false)
    }

    /// Binds every value for `planned`, allocating a (zeroed) arena when the current one is
    /// missing or too small. Inputs that were set keep their contents.
    fn install(&mut self, planned: Arc<Planned>, fresh: bool) -> Result<()> {
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
        if self.arena.as_ref().is_none_or(|a| a.len() < needed) {
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
            self.arena = Some(block);
            self.stats.arena_bytes = needed;
        }
        let arena = self
            .arena
            .clone()
            .ok_or_else(|| RuntimeError::Graph("no arena".into()))?;
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

    /// An output by name, borrowed from this context until the next run.
    pub fn output(&self, name: &str) -> Result<OutputView<'_>> {
        let index = self
            .plan
            .outputs()
            .iter()
            .position(|o| o.name == name)
            .ok_or_else(|| RuntimeError::UnknownOutput {
                name: name.to_string(),
                available: self.plan.outputs().iter().map(|o| o.name.clone()).collect(),
            })?;
        self.output_at(index)
    }

    /// An output by position, borrowed from this context until the next run.
    pub fn output_at(&self, index: usize) -> Result<OutputView<'_>> {
        let info = self
            .plan
            .outputs()
            .get(index)
            .ok_or(RuntimeError::OutputIndex {
                index,
                count: self.plan.outputs().len(),
            })?;
        if self.stats.runs == 0 {
            return Err(RuntimeError::Graph(
                "no output before the first execute".into(),
            ));
        }
        Ok(OutputView {
            name: &info.name,
            tensor: &self.values[info.value.0],
        })
    }

    /// Every output, in order.
    pub fn outputs(&self) -> Result<Vec<OutputView<'_>>> {
        (0..self.plan.outputs().len())
            .map(|i| self.output_at(i))
            .collect()
    }

    /// Per-node time accumulated over all runs (empty unless profiling is on).
    pub fn node_timings(&self) -> Vec<NodeTiming<'_>> {
        self.plan
            .graph()
            .nodes
            .iter()
            .zip(&self.timings)
            .map(|(node, &time)| NodeTiming {
                node: &node.name,
                op: node.op.op_type(),
                time,
            })
            .collect()
    }

    /// The memory plan in force.
    pub fn memory_plan(&self) -> Option<&crate::MemoryPlan> {
        self.planned.as_ref().map(|p| &p.memory)
    }
}

/// Writes an input's contents into its bound value. Text has no arena slot: the (immutable)
/// tensor itself is bound.
fn set_value(slot: &mut Tensor, tensor: &Tensor) -> Result<()> {
    if tensor.dtype().is_string() {
        *slot = tensor.clone();
    } else {
        slot.copy_from(tensor)?;
    }
    Ok(())
}

/// Strict mode: every value a static node reads or writes must be bound (a weight, a constant
/// or a planned arena slot); values produced on the dynamic path are bound when they run.
fn check_bindings(graph: &crate::Graph, planned: &Planned, values: &[Tensor]) -> Result<()> {
    let dynamic_output = |id: usize| match graph.values[id].source {
        ValueSource::Node(node, _) => planned.spec.dynamic[node.0],
        _ => false,
    };
    for (i, node) in graph.nodes.iter().enumerate() {
        if planned.spec.skip[i] || planned.spec.dynamic[i] {
            continue;
        }
        for id in node.inputs.iter().flatten().chain(&node.outputs) {
            let text = planned.spec.facts[id.0].dtype.is_string(); // bound when it exists
            if !values[id.0].is_defined() && !dynamic_output(id.0) && !text {
                return Err(RuntimeError::Graph(format!(
                    "value {:?} (used by node {:?}) has no memory plan entry",
                    graph.values[id.0].name, node.name
                )));
            }
        }
    }
    Ok(())
}

/// True when every static value of `spec` fits the slot `memory` gave it.
fn fits(memory: &crate::MemoryPlan, spec: &crate::Specialization, graph: &crate::Graph) -> bool {
    graph.values.iter().enumerate().all(|(id, value)| {
        let fact = &spec.facts[id];
        if matches!(
            value.source,
            ValueSource::Initializer(_) | ValueSource::Removed
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

/// Time spent in one node.
#[derive(Debug, Clone, Copy)]
pub struct NodeTiming<'a> {
    pub node: &'a str,
    pub op: &'a str,
    pub time: Duration,
}

/// An output of the last run, borrowed from its context: it cannot outlive the next `execute`.
pub struct OutputView<'a> {
    name: &'a str,
    tensor: &'a Tensor,
}

impl<'a> OutputView<'a> {
    pub fn name(&self) -> &str {
        self.name
    }

    pub fn dims(&self) -> &[usize] {
        self.tensor.dims()
    }

    pub fn dtype(&self) -> DType {
        self.tensor.dtype()
    }

    /// Dtype-checked read access to the elements.
    pub fn read<T: strata_core::Element>(&self) -> Result<ReadGuard<'a, T>> {
        Ok(self.tensor.read::<T>()?)
    }

    /// The elements, copied.
    pub fn to_vec<T: strata_core::Element>(&self) -> Result<Vec<T>> {
        Ok(self.tensor.to_vec::<T>()?)
    }

    /// A copy in fresh host memory, independent of the context (text is shared: it is
    /// immutable).
    pub fn to_tensor(&self) -> Result<Tensor> {
        Ok(self
            .tensor
            .detached(strata_core::Device::Cpu, MemoryKind::Default)?)
    }

    /// The elements of a string output, in row-major order.
    pub fn strings(&self) -> Result<Vec<&'a str>> {
        Ok(self.tensor.strings()?)
    }
}
