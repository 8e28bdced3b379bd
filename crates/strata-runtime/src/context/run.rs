//! Running the plan: nodes in order, static ones into their arena slots, data-dependent ones
//! through the one eval path with outputs made as they run.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;
use strata_core::{MemoryBudget, MemoryKind, Tensor};
use strata_ops::eval::EvalOptions;
use strata_ops::run_control::{self, RunControl};
use strata_ops::KernelIo;

use super::arena::set_value;
use super::state::ExecutionContext;
use crate::node_eval::eval_node;
use crate::planned::Planned;
use crate::{InferencePlan, Result, RuntimeError};

static UNDEFINED: std::sync::LazyLock<Tensor> = std::sync::LazyLock::new(Tensor::undefined);

impl ExecutionContext {
    /// Runs the plan on the inputs set so far.
    pub fn execute(&mut self) -> Result<()> {
        // What the run allocates (a grown arena, dynamic outputs) counts against the plan's
        // limit; a subgraph's run (a Loop or If body) against the limit of the run it is part of.
        let budget = MemoryBudget::current().unwrap_or_else(|| self.plan.memory_budget().clone());
        budget.install(|| self.execute_charged(&budget))
    }

    fn execute_charged(&mut self, budget: &Arc<MemoryBudget>) -> Result<()> {
        for (i, info) in self.plan.inputs().iter().enumerate() {
            if self.pending[i].is_none() && !self.input_set[i] {
                return Err(RuntimeError::InputNotSet {
                    name: info.name.clone(),
                });
            }
        }
        let planned = match &self.planned {
            Some(current) if !self.needs_respecialization() => current.clone(),
            _ => self.respecialize()?,
        };
        for i in 0..self.pending.len() {
            if let Some(tensor) = self.pending[i].take() {
                let id = self.plan.inputs()[i].value;
                set_value(&mut self.values[id.0], &tensor)?;
                self.input_set[i] = true;
            }
        }
        let plan = self.plan.clone();
        // A subgraph's run (inside a Loop or If) obeys the run it is part of.
        let control = run_control::current().unwrap_or_else(|| self.limits.for_run());
        let result = plan.pool().run(|| {
            budget.install(|| control.install(|| self.run_nodes(&plan, &planned, &control)))
        });
        self.limits.after_run(&result);
        result?;
        self.stats.runs += 1;
        Ok(())
    }

    /// Runs every node in order (on the plan's pool, see [`crate::pool`]).
    fn run_nodes(
        &mut self,
        plan: &InferencePlan,
        planned: &Planned,
        control: &RunControl,
    ) -> Result<()> {
        for i in 0..plan.graph().nodes.len() {
            if planned.spec.skip[i] {
                continue;
            }
            control.check(&plan.graph().nodes[i].name)?;
            let started = (!self.timings.is_empty()).then(Instant::now);
            if planned.spec.dynamic[i] {
                self.run_dynamic(i)?;
            } else {
                self.run_static(plan, planned, i)?;
            }
            // A long kernel that saw the stop token cut its work short: its output is never used.
            control.check(&plan.graph().nodes[i].name)?;
            if let Some(t) = started {
                self.timings[i] += t.elapsed();
            }
            for &v in &planned.memory.free_after[i] {
                self.values[v] = Tensor::undefined();
            }
        }
        Ok(())
    }

    fn run_static(&mut self, plan: &InferencePlan, planned: &Planned, i: usize) -> Result<()> {
        let node = &plan.graph().nodes[i];
        let kernel = plan.kernel(i).ok_or_else(|| RuntimeError::NoKernel {
            node: node.name.clone(),
        })?;
        let inputs: SmallVec<[&Tensor; 16]> = node
            .inputs
            .iter()
            .map(|v| v.map_or(&*UNDEFINED, |id| &self.values[id.0]))
            .collect();
        let outputs: SmallVec<[&Tensor; 4]> =
            node.outputs.iter().map(|id| &self.values[id.0]).collect();
        if !outputs.is_empty() && outputs.iter().all(|t| t.is_defined() && t.numel() == 0) {
            return Ok(()); // nothing to write: see strata_ops::eval::outputs_are_empty
        }
        let scratch = &self.scratch[i];
        let io = KernelIo {
            inputs: &inputs,
            outputs: &outputs,
            scratch: scratch.is_defined().then_some(scratch),
            in_place: planned.memory.in_place[i],
            threads: plan.config().threads,
        };
        let result = match (kernel.capabilities().context_state, &mut self.states[i]) {
            (Some(uses), Some(state)) => uses.run_with_state(&io, state.as_mut()),
            _ => kernel.run(&io),
        };
        result.map_err(|source| {
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
        let kernel = plan.kernel(i).ok_or_else(|| RuntimeError::NoKernel {
            node: node.name.clone(),
        })?;
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
}
