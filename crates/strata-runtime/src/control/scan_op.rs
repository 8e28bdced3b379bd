//! Scan (opsets 8–21): runs `body` once per position of the scan inputs, threading N state
//! values through. Body inputs: N states, M per-position slices, then captures; body outputs:
//! N next states, then K per-position values stacked into the scan outputs.
//! Opset 8 adds a leading `sequence_lens` input and a batch axis 0 on every input and output;
//! strata runs it batch by batch and supports only full-length sequences there.

use strata_core::{DType, Device, Tensor};
use strata_ops::{
    Attributes, Dim, Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpError, OpResult,
    Operator,
};

use super::node_io::{capture_facts, copy_into};
use super::stack::stack;
use super::subgraph::{Subgraph, SubgraphRunner};

/// Attribute-derived layout of one Scan node.
#[derive(Debug, Clone)]
struct Layout {
    /// N state values and M scan inputs.
    states: usize,
    scans: usize,
    /// Per scan input: axis and direction (true = reverse).
    input_axes: Vec<i64>,
    input_reverse: Vec<bool>,
    /// Per scan output: axis and direction.
    output_axes: Vec<i64>,
    output_reverse: Vec<bool>,
    /// Opset 8: inputs start with `sequence_lens` and carry a batch axis.
    batched: bool,
}

#[derive(Debug)]
pub struct Scan {
    body: Subgraph,
    layout: Layout,
}

fn directions(attrs: &Attributes, name: &str, n: usize) -> OpResult<Vec<bool>> {
    let v = attrs.ints(name)?.unwrap_or_else(|| vec![0; n]);
    if v.len() != n || v.iter().any(|&d| d != 0 && d != 1) {
        return Err(OpError::attribute(
            "Scan",
            name,
            format!("expected {n} values of 0 or 1, got {v:?}"),
        ));
    }
    Ok(v.into_iter().map(|d| d == 1).collect())
}

impl Scan {
    /// `formal_inputs` is the node's input count before captures.
    pub fn new(
        body: Subgraph,
        formal_inputs: usize,
        opset: i64,
        attrs: &Attributes,
    ) -> OpResult<Self> {
        let batched = opset < 9;
        let scans = attrs
            .int("num_scan_inputs")?
            .and_then(|m| usize::try_from(m).ok())
            .filter(|&m| m > 0)
            .ok_or_else(|| {
                OpError::attribute("Scan", "num_scan_inputs", "required, and must be positive")
            })?;
        let states = formal_inputs
            .checked_sub(scans + usize::from(batched))
            .ok_or_else(|| {
                OpError::attribute(
                    "Scan",
                    "num_scan_inputs",
                    format!("{scans} is more than the node's {formal_inputs} inputs"),
                )
            })?;
        let outputs = body.num_outputs().checked_sub(states).ok_or_else(|| {
            OpError::attribute(
                "Scan",
                "body",
                format!("{} outputs cannot hold {states} states", body.num_outputs()),
            )
        })?;
        if body.num_inputs() < states + scans {
            return Err(OpError::attribute(
                "Scan",
                "body",
                format!(
                    "{} inputs cannot take {states} states and {scans} scan slices",
                    body.num_inputs()
                ),
            ));
        }
        let (input_axes, input_reverse, output_axes, output_reverse) = if batched {
            (
                vec![0; scans],
                directions(attrs, "directions", scans)?,
                vec![0; outputs],
                vec![false; outputs],
            )
        } else {
            let axes = |name: &str, n: usize| -> OpResult<Vec<i64>> {
                let v = attrs.ints(name)?.unwrap_or_else(|| vec![0; n]);
                if v.len() != n {
                    return Err(OpError::attribute(
                        "Scan",
                        name,
                        format!("expected {n} axes, got {v:?}"),
                    ));
                }
                Ok(v)
            };
            (
                axes("scan_input_axes", scans)?,
                directions(attrs, "scan_input_directions", scans)?,
                axes("scan_output_axes", outputs)?,
                directions(attrs, "scan_output_directions", outputs)?,
            )
        };
        Ok(Scan {
            body,
            layout: Layout {
                states,
                scans,
                input_axes,
                input_reverse,
                output_axes,
                output_reverse,
                batched,
            },
        })
    }

    /// Index of the first state input.
    fn first_state(&self) -> usize {
        usize::from(self.layout.batched)
    }

    /// Body input facts: states and scan slices without their batch / scan axes, then captures.
    fn body_facts(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let l = &self.layout;
        let first = self.first_state();
        let drop_batch = |f: Fact| -> OpResult<Fact> {
            if !l.batched {
                return Ok(f);
            }
            if f.rank() == 0 {
                return Err(OpError::shape("Scan", "opset-8 inputs need a batch axis"));
            }
            Ok(Fact::new(f.dtype, f.dims[1..].to_vec()))
        };
        let mut facts = Vec::new();
        for f in capture_facts("Scan", inputs, first..first + l.states)? {
            facts.push(drop_batch(f)?);
        }
        let scan_facts =
            capture_facts("Scan", inputs, first + l.states..first + l.states + l.scans)?;
        for (j, f) in scan_facts.into_iter().enumerate() {
            let f = drop_batch(f)?;
            let axis = normalize("scan_input_axes", l.input_axes[j], f.rank())?;
            let mut dims = f.dims.clone();
            dims.remove(axis);
            facts.push(Fact::new(f.dtype, dims));
        }
        let captures = self.body.num_inputs() - l.states - l.scans;
        let start = first + l.states + l.scans;
        facts.extend(capture_facts("Scan", inputs, start..start + captures)?);
        Ok(facts)
    }
}

fn normalize(attr: &str, axis: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(OpError::attribute(
            "Scan",
            attr,
            format!("axis {axis} out of range for rank {rank}"),
        ))
    }
}

impl Operator for Scan {
    fn op_type(&self) -> &str {
        "Scan"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let l = &self.layout;
        let body_in = self.body_facts(inputs)?;
        let body_out = self.body.infer("Scan", &body_in)?;
        let first = self.first_state();
        // The scan length, when known.
        let len = inputs
            .get(first + l.states)
            .and_then(|f| {
                let axis = if l.batched {
                    1
                } else {
                    normalize("scan_input_axes", l.input_axes[0], f.rank()).ok()?
                };
                f.dims.get(axis).cloned()
            })
            .unwrap_or(Dim::Unknown);
        let batch = inputs
            .get(first)
            .and_then(|f| f.dims.first().cloned())
            .unwrap_or(Dim::Unknown);
        let mut out = Vec::with_capacity(body_out.len());
        for (k, f) in body_out.into_iter().enumerate() {
            let mut dims = f.dims.clone();
            if k >= l.states {
                let axis = if l.batched {
                    0
                } else {
                    let a = l.output_axes[k - l.states];
                    let r = dims.len() as i64 + 1;
                    let a = if a < 0 { a + r } else { a };
                    usize::try_from(a)
                        .ok()
                        .filter(|&a| a < r as usize)
                        .ok_or_else(|| {
                            OpError::attribute(
                                "Scan",
                                "scan_output_axes",
                                format!("axis {} out of range", l.output_axes[k - l.states]),
                            )
                        })?
                };
                dims.insert(axis, len.clone());
            }
            if l.batched {
                dims.insert(0, batch.clone());
            }
            out.push(Fact::new(f.dtype, dims));
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
        let output_dtypes = outputs.iter().map(|f| f.dtype).collect();
        Ok(Box::new(ScanKernel {
            runner: self.body.runner(),
            layout: self.layout.clone(),
            output_dtypes,
        }))
    }
}

#[derive(Debug)]
struct ScanKernel {
    runner: SubgraphRunner,
    layout: Layout,
    output_dtypes: Vec<DType>,
}

impl ScanKernel {
    /// One unbatched scan: states and scan inputs as the body sees them (scan axis kept).
    fn scan(
        &self,
        states: Vec<Tensor>,
        scans: &[Tensor],
        captures: &[&Tensor],
        threads: usize,
    ) -> OpResult<Vec<Tensor>> {
        let l = &self.layout;
        let mut axes = Vec::with_capacity(l.scans);
        let mut len = None;
        for (j, t) in scans.iter().enumerate() {
            let axis = normalize("scan_input_axes", l.input_axes[j], t.rank())?;
            let n = t.dims()[axis];
            if *len.get_or_insert(n) != n {
                return Err(OpError::shape(
                    "Scan",
                    format!(
                        "scan inputs have lengths {} and {n} along their scan axes",
                        len.unwrap_or(0)
                    ),
                ));
            }
            axes.push(axis);
        }
        let len = len.unwrap_or(0);
        let mut states = states;
        let outputs = self.runner_outputs() - l.states;
        let mut per_step: Vec<Vec<Tensor>> = vec![Vec::with_capacity(len); outputs];
        for t in 0..len {
            let slices: Vec<Tensor> = scans
                .iter()
                .enumerate()
                .map(|(j, x)| {
                    let pos = if l.input_reverse[j] { len - 1 - t } else { t };
                    x.select(axes[j] as isize, pos as isize)
                })
                .collect::<Result<_, _>>()?;
            let mut args: Vec<&Tensor> = states.iter().collect();
            args.extend(slices.iter());
            args.extend(captures.iter().copied());
            let mut out = self.runner.run("Scan", &args, threads)?.into_iter();
            for s in states.iter_mut() {
                *s = out
                    .next()
                    .ok_or_else(|| OpError::shape("Scan", "the body produced too few outputs"))?;
            }
            for step in per_step.iter_mut() {
                step.push(
                    out.next().ok_or_else(|| {
                        OpError::shape("Scan", "the body produced too few outputs")
                    })?,
                );
            }
        }
        let mut results = states;
        for (k, slices) in per_step.iter().enumerate() {
            let inner_rank = slices.first().map_or(0, |s| s.rank());
            let r = inner_rank as i64 + 1;
            let a = l.output_axes[k];
            let axis = usize::try_from(if a < 0 { a + r } else { a })
                .ok()
                .filter(|&a| a <= inner_rank)
                .ok_or_else(|| {
                    OpError::attribute("Scan", "scan_output_axes", format!("axis {a} out of range"))
                })?;
            let dtype = self
                .output_dtypes
                .get(l.states + k)
                .copied()
                .unwrap_or(DType::F32);
            results.push(stack(
                "Scan",
                slices,
                axis,
                l.output_reverse[k],
                (dtype, &[]),
            )?);
        }
        Ok(results)
    }

    fn runner_outputs(&self) -> usize {
        self.output_dtypes.len()
    }

    fn outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        let l = &self.layout;
        let first = usize::from(l.batched);
        let get = |i: usize| -> OpResult<Tensor> {
            inputs
                .get(i)
                .filter(|t| t.is_defined())
                .map(|t| (*t).clone())
                .ok_or(OpError::MissingInput {
                    op: "Scan".into(),
                    index: i,
                })
        };
        let states: Vec<Tensor> = (first..first + l.states)
            .map(get)
            .collect::<OpResult<_>>()?;
        let scans: Vec<Tensor> = (first + l.states..first + l.states + l.scans)
            .map(get)
            .collect::<OpResult<_>>()?;
        let captures = inputs.get(first + l.states + l.scans..).unwrap_or(&[]);
        if !l.batched {
            return self.scan(states, &scans, captures, threads);
        }
        // Opset 8: batch by batch.
        let batch = scans
            .first()
            .map_or(0, |t| t.dims().first().copied().unwrap_or(0));
        if let Some(lens) = inputs.first().filter(|t| t.is_defined()) {
            let full = scans
                .first()
                .and_then(|t| t.dims().get(1).copied())
                .unwrap_or(0);
            let lens = lens.to_vec::<i32>()?;
            if lens.iter().any(|&n| n as usize != full) {
                return Err(OpError::shape(
                    "Scan",
                    format!("sequence_lens {lens:?} shorter than the inputs' {full}: strata runs only full-length opset-8 scans"),
                ));
            }
        }
        let mut per_batch: Vec<Vec<Tensor>> =
            vec![Vec::with_capacity(batch); self.runner_outputs()];
        for b in 0..batch {
            let pick = |t: &Tensor| t.select(0, b as isize);
            let s: Vec<Tensor> = states.iter().map(pick).collect::<Result<_, _>>()?;
            let x: Vec<Tensor> = scans.iter().map(pick).collect::<Result<_, _>>()?;
            for (k, t) in self.scan(s, &x, captures, threads)?.into_iter().enumerate() {
                per_batch[k].push(t);
            }
        }
        per_batch
            .iter()
            .enumerate()
            .map(|(k, slices)| stack("Scan", slices, 0, false, (self.output_dtypes[k], &[])))
            .collect()
    }
}

impl Kernel for ScanKernel {
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

impl MakesOutputs for ScanKernel {
    fn make_outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>> {
        self.outputs(inputs, threads)
    }
}
