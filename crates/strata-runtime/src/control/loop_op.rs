//! Loop (opsets 1–21): runs `body` while the trip count and the condition allow. Body inputs:
//! iteration number (i64 scalar), condition (bool scalar), the N loop-carried values, then its
//! captures; body outputs: the next condition, the N carried values, then K per-iteration
//! values that the node stacks along a new first axis.

use strata_core::{DType, Device, Tensor};
use strata_ops::run_control;
use strata_ops::{
    Dim, Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpError, OpResult, Operator,
};

use super::node_io::{capture_facts, copy_into, read_condition};
use super::stack::stack;
use super::subgraph::{Subgraph, SubgraphRunner};

#[derive(Debug)]
pub struct Loop {
    body: Subgraph,
    /// Loop-carried values (N).
    carried: usize,
}

impl Loop {
    /// `carried` is N: the node's formal inputs are M, cond and N values (its captures follow).
    pub fn new(body: Subgraph, carried: usize) -> OpResult<Self> {
        if body.num_inputs() < 2 + carried || body.num_outputs() < 1 + carried {
            return Err(OpError::attribute(
                "Loop",
                "body",
                format!(
                    "the body has {} inputs and {} outputs; {carried} loop-carried values need at \
                     least {} and {}",
                    body.num_inputs(),
                    body.num_outputs(),
                    2 + carried,
                    1 + carried
                ),
            ));
        }
        Ok(Loop { body, carried })
    }

    /// Body input facts for the node's input facts.
    fn body_facts(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let mut facts = vec![
            Fact::new(DType::I64, Vec::new()),
            Fact::new(DType::Bool, Vec::new()),
        ];
        let carried = capture_facts("Loop", inputs, 2..2 + self.carried)?;
        facts.extend(carried);
        let captures = self.body.num_inputs() - 2 - self.carried;
        let start = 2 + self.carried;
        facts.extend(capture_facts("Loop", inputs, start..start + captures)?);
        Ok(facts)
    }
}

impl Operator for Loop {
    fn op_type(&self) -> &str {
        "Loop"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let body_in = self.body_facts(inputs)?;
        let body_out = self.body.infer("Loop", &body_in)?;
        let mut out = Vec::with_capacity(body_out.len() - 1);
        for (k, f) in body_out.iter().enumerate().skip(1) {
            if k <= self.carried {
                // Carried values keep their dims only when one iteration provably keeps them.
                let initial = &body_in[1 + k];
                let stable = initial.concrete().is_some() && f.dims == initial.dims;
                let dims = if stable {
                    initial.dims.clone()
                } else {
                    vec![Dim::Unknown; initial.rank()]
                };
                out.push(Fact::new(initial.dtype, dims));
            } else {
                let mut dims = vec![Dim::Unknown];
                dims.extend(f.dims.iter().cloned());
                out.push(Fact::new(f.dtype, dims));
            }
        }
        Ok(out)
    }

    fn is_data_dependent(&self) -> bool {
        true
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        _device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        self.body_facts(inputs)?;
        let scan_facts = outputs
            .iter()
            .skip(self.carried)
            .map(|f| {
                let inner: Vec<usize> = f
                    .dims
                    .iter()
                    .skip(1)
                    .map(|d| d.known().unwrap_or(0))
                    .collect();
                (f.dtype, inner)
            })
            .collect();
        Ok(Box::new(LoopKernel {
            runner: self.body.runner(),
            carried: self.carried,
            scan_facts,
        }))
    }
}

#[derive(Debug)]
struct LoopKernel {
    runner: SubgraphRunner,
    carried: usize,
    /// Dtype and per-iteration dims of each scan output, for loops that run zero times.
    scan_facts: Vec<(DType, Vec<usize>)>,
}

impl LoopKernel {
    fn outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        let defined = |i: usize| inputs.get(i).copied().filter(|t| t.is_defined());
        let max_trips = match defined(0) {
            Some(m) => {
                let v = m.to_vec::<i64>().map_err(|_| {
                    OpError::shape(
                        "Loop",
                        format!("M must be an int64 scalar, got {}", m.dtype()),
                    )
                })?;
                *v.first()
                    .ok_or_else(|| OpError::shape("Loop", "M is empty"))?
            }
            None => i64::MAX,
        };
        let mut cond = match defined(1) {
            Some(c) => read_condition("Loop", "cond", 1, c)?,
            None => true,
        };
        let mut carried: Vec<Tensor> = (0..self.carried)
            .map(|k| {
                defined(2 + k).cloned().ok_or(OpError::MissingInput {
                    op: "Loop".into(),
                    index: 2 + k,
                })
            })
            .collect::<OpResult<_>>()?;
        let captures = inputs.get(2 + self.carried..).unwrap_or(&[]);
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); self.scan_facts.len()];
        let mut trip = 0i64;
        let bound = run_control::max_loop_iterations();
        while trip < max_trips && cond {
            run_control::check("Loop")?;
            if trip as u64 >= bound {
                return Err(OpError::shape(
                    "Loop",
                    format!(
                        "still running after {trip} iterations, the bound on loop trips \
                         (PlanConfig::max_loop_iterations)"
                    ),
                ));
            }
            let iteration = Tensor::scalar(trip)?;
            let cond_in = Tensor::from_bools(&[cond], &[])?;
            let mut args: Vec<&Tensor> = vec![&iteration, &cond_in];
            args.extend(carried.iter());
            args.extend(captures.iter().copied());
            let mut out = self.runner.run("Loop", &args, threads)?.into_iter();
            let cond_out = out
                .next()
                .ok_or_else(|| OpError::shape("Loop", "the body produced no condition"))?;
            cond = read_condition("Loop", "the body's condition output", 1, &cond_out)?;
            for slot in carried.iter_mut() {
                *slot = out
                    .next()
                    .ok_or_else(|| OpError::shape("Loop", "the body produced too few outputs"))?;
            }
            for scan in scans.iter_mut() {
                scan.push(
                    out.next().ok_or_else(|| {
                        OpError::shape("Loop", "the body produced too few outputs")
                    })?,
                );
            }
            trip += 1;
        }
        let mut outputs = carried;
        for (slices, (dtype, inner)) in scans.iter().zip(&self.scan_facts) {
            outputs.push(stack("Loop", slices, 0, false, (*dtype, inner))?);
        }
        Ok(outputs)
    }
}

impl Kernel for LoopKernel {
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

impl MakesOutputs for LoopKernel {
    fn make_outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        self.outputs(inputs, threads)
    }
}
