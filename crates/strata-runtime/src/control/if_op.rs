//! If (opsets 1–21): runs `then_branch` or `else_branch` on a boolean condition. Both branches
//! are planned once; the node's inputs are the condition followed by each branch's captures.

use std::ops::Range;

use strata_core::{Device, Tensor};
use strata_ops::{
    Dim, Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpError, OpResult, Operator,
};

use super::node_io::{capture_facts, copy_into, read_condition};
use super::subgraph::{Subgraph, SubgraphRunner};

#[derive(Debug)]
pub struct If {
    then_branch: Subgraph,
    else_branch: Subgraph,
}

impl If {
    /// Node inputs: the condition, then `then_branch`'s captures, then `else_branch`'s.
    pub fn new(then_branch: Subgraph, else_branch: Subgraph) -> OpResult<Self> {
        if then_branch.num_outputs() != else_branch.num_outputs() {
            return Err(OpError::attribute(
                "If",
                "else_branch",
                format!(
                    "the branches have {} and {} outputs",
                    then_branch.num_outputs(),
                    else_branch.num_outputs()
                ),
            ));
        }
        Ok(If {
            then_branch,
            else_branch,
        })
    }

    fn then_inputs(&self) -> Range<usize> {
        1..1 + self.then_branch.num_inputs()
    }

    fn else_inputs(&self) -> Range<usize> {
        let start = self.then_inputs().end;
        start..start + self.else_branch.num_inputs()
    }
}

impl Operator for If {
    fn op_type(&self) -> &str {
        "If"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let cond = inputs
            .first()
            .filter(|f| f.is_defined())
            .ok_or(OpError::MissingInput {
                op: "If".into(),
                index: 0,
            })?;
        let then_facts = capture_facts("If", inputs, self.then_inputs())?;
        let else_facts = capture_facts("If", inputs, self.else_inputs())?;
        if let Some(value) = &cond.value {
            let branch = if read_condition("If", "cond", 0, value)? {
                self.then_branch.infer("If", &then_facts)?
            } else {
                self.else_branch.infer("If", &else_facts)?
            };
            return Ok(branch);
        }
        // Before the condition is known, a branch may not be inferable (unknown outer dims):
        // the other one still tells dtypes and ranks; the node runs on the dynamic path anyway.
        let (then_out, else_out) = match (
            self.then_branch.infer("If", &then_facts),
            self.else_branch.infer("If", &else_facts),
        ) {
            (Ok(t), Ok(e)) => (t, e),
            (Ok(t), Err(_)) => (t.clone(), t),
            (Err(_), Ok(e)) => (e.clone(), e),
            (Err(e), Err(_)) => return Err(e),
        };
        Ok(then_out
            .into_iter()
            .zip(else_out)
            .map(|(t, e)| {
                let dims = if t.dims == e.dims {
                    t.dims
                } else {
                    vec![Dim::Unknown; t.dims.len()]
                };
                Fact::new(t.dtype, dims)
            })
            .collect())
    }

    fn is_data_dependent(&self) -> bool {
        true
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        // The branches' captures must all be there; their plans are made per signature.
        capture_facts("If", inputs, self.then_inputs())?;
        capture_facts("If", inputs, self.else_inputs())?;
        Ok(Box::new(IfKernel {
            then_runner: self.then_branch.runner(),
            else_runner: self.else_branch.runner(),
            then_inputs: self.then_inputs(),
            else_inputs: self.else_inputs(),
        }))
    }
}

#[derive(Debug)]
struct IfKernel {
    then_runner: SubgraphRunner,
    else_runner: SubgraphRunner,
    then_inputs: Range<usize>,
    else_inputs: Range<usize>,
}

impl IfKernel {
    fn outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        let cond = inputs.first().ok_or(OpError::MissingInput {
            op: "If".into(),
            index: 0,
        })?;
        let (runner, range) = if read_condition("If", "cond", 0, cond)? {
            (&self.then_runner, self.then_inputs.clone())
        } else {
            (&self.else_runner, self.else_inputs.clone())
        };
        let args = inputs.get(range).ok_or_else(|| {
            OpError::shape("If", "the node has fewer inputs than its branches capture")
        })?;
        runner.run("If", args, threads)
    }
}

impl Kernel for IfKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        copy_into(io, &self.outputs(io.inputs, io.threads)?)
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            makes_outputs: Some(self),
            ..Default::default()
        }
    }
}

impl MakesOutputs for IfKernel {
    fn make_outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        self.outputs(inputs, threads)
    }
}
