//! What a context hands out after a run: outputs borrowed until the next run, per-node timings
//! and the memory plan in force.

use std::time::Duration;

use strata_core::{DType, MemoryKind, ReadGuard, Tensor};

use super::state::ExecutionContext;
use crate::{Result, RuntimeError};

impl ExecutionContext {
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
            return Err(RuntimeError::NotRun);
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
        self.planned.as_ref().map(|p| &*p.memory)
    }
}

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
