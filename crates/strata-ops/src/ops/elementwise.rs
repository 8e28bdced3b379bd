//! Element-wise binary arithmetic with numpy broadcasting: Add, Sub, Mul, Div, including the
//! pre-opset-7 `broadcast`/`axis` attribute form.

use std::marker::PhantomData;

use strata_core::{Device, Layout, Tensor};

use crate::numeric::Arith;
use crate::strided::{binary_map, for_each_broadcast};
use crate::{broadcast_dims, dispatch_arith, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
        }
    }
}

#[derive(Debug)]
pub struct Binary {
    op: BinaryOp,
    /// Opset < 7 with `broadcast=1`: B's dims align with A's starting at this axis.
    legacy_axis: Option<i64>,
}

impl Binary {
    pub fn build(op: BinaryOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let legacy_axis = if ctx.opset < 7 && ctx.attrs.int_or("broadcast", 0)? == 1 {
            Some(ctx.attrs.int_or("axis", -1)?)
        } else {
            None
        };
        Ok(Box::new(Binary { op, legacy_axis }))
    }
}

/// B's dims for the legacy broadcast form: placed at `axis` of A's rank, padded with 1s.
fn legacy_dims<D: Clone>(a_rank: usize, b: &[D], axis: Option<i64>, one: D) -> Option<Vec<D>> {
    let axis = axis?;
    let start = if axis < 0 { a_rank as i64 - b.len() as i64 } else { axis };
    if start < 0 || start as usize + b.len() > a_rank {
        return None;
    }
    let mut dims = vec![one; a_rank];
    dims[start as usize..start as usize + b.len()].clone_from_slice(b);
    Some(dims)
}

impl Operator for Binary {
    fn op_type(&self) -> &str {
        self.op.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let name = self.op.name();
        let [a, b] = two_inputs(name, inputs)?;
        if a.dtype != b.dtype {
            return Err(OpError::DType { op: name.into(), index: 1, expected: a.dtype.to_string(), actual: b.dtype });
        }
        let b_dims = match self.legacy_axis {
            Some(_) => legacy_dims(a.rank(), &b.dims, self.legacy_axis, crate::Dim::Known(1))
                .ok_or_else(|| OpError::shape(name, format!("legacy broadcast of {:?} into {:?} at axis {:?}", b.dims, a.dims, self.legacy_axis)))?,
            None => b.dims.clone(),
        };
        Ok(vec![Fact::new(a.dtype, broadcast_dims(name, &a.dims, &b_dims)?)])
    }

    fn kernel(&self, inputs: &[&Fact], _outputs: &[&Fact], device: Device) -> OpResult<Box<dyn Kernel>> {
        let dtype = inputs[0].dtype;
        let no_kernel = || OpError::NoKernel { op: self.op.name().into(), dtype, device };
        if device != Device::Cpu {
            return Err(no_kernel());
        }
        let (op, legacy_axis) = (self.op, self.legacy_axis);
        dispatch_arith!(dtype, T => Ok(Box::new(BinaryKernel::<T> { op, legacy_axis, _t: PhantomData }) as Box<dyn Kernel>), _ => Err(no_kernel()))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

pub(crate) fn two_inputs<'a>(op: &str, inputs: &[&'a Fact]) -> OpResult<[&'a Fact; 2]> {
    match inputs {
        [a, b] if a.is_defined() && b.is_defined() => Ok([a, b]),
        _ => Err(OpError::InputCount { op: op.into(), expected: "2".into(), actual: inputs.len() }),
    }
}

#[derive(Debug)]
struct BinaryKernel<T> {
    op: BinaryOp,
    legacy_axis: Option<i64>,
    _t: PhantomData<T>,
}

#[inline(always)]
fn apply<T: Arith>(op: BinaryOp, x: T, y: T) -> T {
    match op {
        BinaryOp::Add => x.add(y),
        BinaryOp::Sub => x.sub(y),
        BinaryOp::Mul => x.mul(y),
        BinaryOp::Div => x.div(y),
    }
}

impl<T: Arith> BinaryKernel<T> {
    fn rhs_layout(&self, a: &Tensor, b: &Tensor, out_dims: &[usize]) -> OpResult<Layout> {
        let layout = match self.legacy_axis {
            Some(_) => {
                let dims = legacy_dims(a.rank(), b.dims(), self.legacy_axis, 1)
                    .ok_or_else(|| OpError::shape(self.op.name(), "legacy broadcast does not fit"))?;
                b.layout().view(&dims)?
            }
            None => b.layout().clone(),
        };
        Ok(layout.expand(out_dims)?)
    }

    fn run_binary(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op;
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let out_dims = out.dims();
        let lb = self.rhs_layout(a, b, out_dims)?;
        let mut w = out.write::<T>()?;
        if io.in_place == Some(0) {
            // A's memory is the output's: read A through the output guard.
            let rb = b.read::<T>()?;
            let other = rb.storage_data();
            let data = w.as_mut_slice().ok_or_else(|| OpError::kernel(op.name(), "output is not contiguous"))?;
            let lo = Layout::contiguous(strata_core::Shape::new(out_dims)?, 0);
            for_each_broadcast(&lo, &lb, |i, _, pb| data[i] = apply(op, data[i], other[pb]));
            return Ok(());
        }
        let la = a.layout().expand(out_dims)?;
        let (ra, rb) = (a.read::<T>()?, b.read::<T>()?);
        let data = w.as_mut_slice().ok_or_else(|| OpError::kernel(op.name(), "output is not contiguous"))?;
        match op {
            BinaryOp::Add => binary_map(ra.storage_data(), &la, rb.storage_data(), &lb, data, |x: T, y: T| x.add(y)),
            BinaryOp::Sub => binary_map(ra.storage_data(), &la, rb.storage_data(), &lb, data, |x: T, y: T| x.sub(y)),
            BinaryOp::Mul => binary_map(ra.storage_data(), &la, rb.storage_data(), &lb, data, |x: T, y: T| x.mul(y)),
            BinaryOp::Div => binary_map(ra.storage_data(), &la, rb.storage_data(), &lb, data, |x: T, y: T| x.div(y)),
        }
        Ok(())
    }
}

impl<T: Arith> Kernel for BinaryKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        self.run_binary(io)
    }
}
