//! The shared machinery of eager calls: dispatch-table routing, running an ONNX operator's own
//! kernel on concrete tensors, running a chosen kernel into a freshly allocated output, and
//! small argument helpers (broadcast dims, dims given PyTorch-style as signed indices).

use std::sync::atomic::{AtomicUsize, Ordering};

use smallvec::SmallVec;
use strata_core::{
    CoreError, DType, Device, DispatchKey, DispatchKeySet, DispatchTable, MemoryKind, Tensor,
};

use crate::eval::{input_fact, run_operator, EvalOptions};
use crate::{
    build_operator, Attr, Attributes, Fact, Kernel, KernelIo, OpContext, OpError, OpResult,
};

/// Dims inline up to this rank, as `Shape` keeps them.
pub(crate) type Dims = SmallVec<[usize; 5]>;

static THREADS: AtomicUsize = AtomicUsize::new(1);

/// Sets how many intra-op threads eager kernels may use (default 1: eager calls are mostly on
/// small tensors, where threads cost more than they bring).
pub fn set_threads(threads: usize) {
    THREADS.store(threads.max(1), Ordering::Relaxed);
}

/// The intra-op threads eager kernels may use.
pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

/// The memory kind of every eager output.
pub(crate) const OUTPUT_KIND: MemoryKind = MemoryKind::Default;

/// The kernel `table` registers for the keys of `tensors` (and the thread's mode).
#[inline]
pub(crate) fn route<F: Copy>(table: &DispatchTable<F>, tensors: &[&Tensor]) -> OpResult<F> {
    if tensors.iter().any(|t| !t.is_defined()) {
        return Err(CoreError::Undefined { op: table.op() }.into());
    }
    Ok(table.lookup(DispatchKeySet::for_call(tensors))?)
}

/// A table serving only dense CPU tensors with `dense_cpu`.
pub(crate) const fn dense_cpu<F: Copy>(op: &'static str, dense_cpu: F) -> DispatchTable<F> {
    DispatchTable::new(op).kernel(DispatchKey::Dense, DispatchKey::Cpu, dense_cpu)
}

/// How an ONNX-backed eager op runs once routed: its operator, inputs and output count.
pub(crate) type OnnxImp = fn(&OnnxCall, &[&Tensor], usize) -> OpResult<Vec<Tensor>>;

/// The dense CPU implementation of every ONNX-backed eager op: the operator's own kernel.
pub(crate) const ONNX_CPU: OnnxImp = OnnxCall::run_cpu;

/// A dispatch table whose dense CPU entry runs the ONNX operator.
pub(crate) const fn onnx_table(op: &'static str) -> DispatchTable<OnnxImp> {
    dense_cpu(op, ONNX_CPU)
}

/// One ONNX operator with attributes, run eagerly on concrete tensors.
pub(crate) struct OnnxCall {
    op_type: &'static str,
    opset: i64,
    attrs: Attributes,
}

impl OnnxCall {
    pub(crate) fn new(op_type: &'static str, opset: i64) -> Self {
        OnnxCall {
            op_type,
            opset,
            attrs: Attributes::new(op_type),
        }
    }

    pub(crate) fn attr(mut self, name: &str, value: Attr) -> Self {
        self.attrs.insert(name, value);
        self
    }

    pub(crate) fn int(self, name: &str, value: i64) -> Self {
        self.attr(name, Attr::Int(value))
    }

    pub(crate) fn ints(self, name: &str, values: &[i64]) -> Self {
        self.attr(name, Attr::Ints(values.to_vec()))
    }

    /// Routes through `table` by the inputs' keys and runs; returns `outputs` outputs.
    pub(crate) fn dispatch(
        &self,
        table: &DispatchTable<OnnxImp>,
        inputs: &[&Tensor],
        outputs: usize,
    ) -> OpResult<Vec<Tensor>> {
        route(table, inputs)?(self, inputs, outputs)
    }

    /// Like [`OnnxCall::dispatch`], for one output.
    pub(crate) fn dispatch1(
        &self,
        table: &DispatchTable<OnnxImp>,
        inputs: &[&Tensor],
    ) -> OpResult<Tensor> {
        first(self.dispatch(table, inputs, 1)?, self.op_type)
    }

    /// Builds the operator and runs its CPU kernel on `inputs` into fresh outputs (the shared
    /// one-operator path: inference for the output dims, then the kernel the plan would pick).
    pub(crate) fn run_cpu(&self, inputs: &[&Tensor], outputs: usize) -> OpResult<Vec<Tensor>> {
        let op = build_operator(&OpContext {
            op_type: self.op_type,
            domain: "",
            opset: self.opset,
            attrs: &self.attrs,
            num_inputs: inputs.len(),
            num_outputs: outputs,
        })?;
        run_operator(
            op.as_ref(),
            None,
            inputs,
            outputs,
            &EvalOptions {
                device: Device::Cpu,
                kind: OUTPUT_KIND,
                threads: threads(),
                // Inference may compute an output as a view of an input: eager outputs own
                // their memory, as PyTorch's do.
                detach_views: true,
            },
        )
    }
}

impl OnnxCall {
    /// Runs the operator's CPU kernel with output 0 in place over `inputs[0]`, as the planner
    /// does when that input dies at the node; an error for operators that cannot.
    pub(crate) fn run_in_place_cpu(&self, inputs: &[&Tensor]) -> OpResult<()> {
        let op = build_operator(&OpContext {
            op_type: self.op_type,
            domain: "",
            opset: self.opset,
            attrs: &self.attrs,
            num_inputs: inputs.len(),
            num_outputs: 1,
        })?;
        if op.in_place_input() != Some(0) {
            return Err(OpError::kernel(self.op_type, "cannot run in place"));
        }
        let facts: Vec<Fact> = inputs.iter().map(|t| input_fact(t)).collect();
        let fact_refs: Vec<&Fact> = facts.iter().collect();
        let out = op.infer(&fact_refs)?;
        let x = inputs[0];
        if out.len() != 1
            || out[0].dtype != x.dtype()
            || out[0].concrete().as_deref() != Some(x.dims())
        {
            return Err(OpError::kernel(
                self.op_type,
                format!(
                    "the result does not fit the {} {:?} tensor in place",
                    x.dtype(),
                    x.dims()
                ),
            ));
        }
        let kernel = op.kernel(&fact_refs, &[&out[0]], Device::Cpu)?;
        run_in_place(kernel.as_ref(), inputs)
    }
}

/// The first output of a call.
pub(crate) fn first(outputs: Vec<Tensor>, op: &str) -> OpResult<Tensor> {
    outputs
        .into_iter()
        .next()
        .ok_or_else(|| OpError::kernel(op, "made no output"))
}

/// Runs `kernel` on `inputs` into a new contiguous tensor of `dims` and `dtype`.
#[inline]
pub(crate) fn run_into_new(
    kernel: &dyn Kernel,
    inputs: &[&Tensor],
    dims: &[usize],
    dtype: DType,
) -> OpResult<Tensor> {
    let out = Tensor::empty(dims, dtype, Device::Cpu, OUTPUT_KIND)?;
    if out.numel() > 0 {
        kernel.run(&KernelIo {
            inputs,
            outputs: &[&out],
            scratch: None,
            in_place: None,
            threads: threads(),
        })?;
    }
    Ok(out)
}

/// Runs `kernel` with output 0 working in place over `inputs[0]` (which must be contiguous).
/// The one write borrow the kernel takes bumps the version counter once (not in inference mode).
pub(crate) fn run_in_place(kernel: &dyn Kernel, inputs: &[&Tensor]) -> OpResult<()> {
    if inputs[0].numel() == 0 {
        return Ok(());
    }
    kernel.run(&KernelIo {
        inputs,
        outputs: &[inputs[0]],
        scratch: None,
        in_place: Some(0),
        threads: threads(),
    })
}

/// numpy/PyTorch broadcasting of two dims lists.
#[inline]
pub(crate) fn broadcast(op: &str, a: &[usize], b: &[usize]) -> OpResult<Dims> {
    if a == b {
        return Ok(Dims::from_slice(a));
    }
    let rank = a.len().max(b.len());
    let mut out = Dims::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(OpError::shape(
                    op,
                    format!("dims {a:?} and {b:?} do not broadcast"),
                ))
            }
        });
    }
    Ok(out)
}

/// A PyTorch dim (negative counts from the end) as an axis of `rank`.
pub(crate) fn axis(op: &str, dim: isize, rank: usize) -> OpResult<usize> {
    let r = rank as isize;
    let a = if dim < 0 { dim + r } else { dim };
    if (0..r.max(1)).contains(&a) {
        Ok(a as usize)
    } else {
        Err(OpError::shape(
            op,
            format!("dim {dim} is out of range for rank {rank}"),
        ))
    }
}

/// An int64 tensor of `values` (ONNX operators take axes, `k` and bounds as inputs).
pub(crate) fn i64s(values: &[i64]) -> OpResult<Tensor> {
    Ok(Tensor::from_slice(values, &[values.len()])?)
}
