//! Reductions along dims (ReduceSum/Mean/Max/Min/Prod's kernels) and arg-reductions
//! (ArgMax/ArgMin's).

use strata_core::{DispatchTable, Tensor};

use crate::eager::call::{axis, i64s, onnx_table, OnnxCall, OnnxImp};
use crate::OpResult;

const SUM: DispatchTable<OnnxImp> = onnx_table("sum");
const MEAN: DispatchTable<OnnxImp> = onnx_table("mean");
const AMAX: DispatchTable<OnnxImp> = onnx_table("amax");
const AMIN: DispatchTable<OnnxImp> = onnx_table("amin");
const PROD: DispatchTable<OnnxImp> = onnx_table("prod");
const ARGMAX: DispatchTable<OnnxImp> = onnx_table("argmax");
const ARGMIN: DispatchTable<OnnxImp> = onnx_table("argmin");

fn reduce(
    table: &DispatchTable<OnnxImp>,
    op_type: &'static str,
    x: &Tensor,
    dims: &[isize],
    keepdim: bool,
) -> OpResult<Tensor> {
    let call = OnnxCall::new(op_type, 18).int("keepdims", keepdim as i64);
    if dims.is_empty() {
        // No dims: every dim (ONNX's default with `noop_with_empty_axes = 0`).
        return call.dispatch1(table, &[x]);
    }
    let axes: Vec<i64> = dims
        .iter()
        .map(|&d| axis(table.op(), d, x.rank()).map(|a| a as i64))
        .collect::<OpResult<_>>()?;
    call.dispatch1(table, &[x, &i64s(&axes)?])
}

fn arg(
    table: &DispatchTable<OnnxImp>,
    op_type: &'static str,
    x: &Tensor,
    dim: Option<isize>,
    keepdim: bool,
) -> OpResult<Tensor> {
    match dim {
        Some(d) => OnnxCall::new(op_type, 13)
            .int("axis", axis(table.op(), d, x.rank())? as i64)
            .int("keepdims", keepdim as i64)
            .dispatch1(table, &[x]),
        None => {
            // The index into the flattened tensor, as PyTorch's `argmax()` gives.
            let flat = x.reshape(&[x.numel()])?;
            let index = OnnxCall::new(op_type, 13)
                .int("axis", 0)
                .int("keepdims", 0)
                .dispatch1(table, &[&flat])?;
            if keepdim {
                Ok(index.reshape(&vec![1; x.rank()])?)
            } else {
                Ok(index)
            }
        }
    }
}

/// Reductions (PyTorch names). `dims` empty reduces every dim; `keepdim` keeps reduced dims
/// as 1s. Arg-reductions give int64 indices; without a dim, into the flattened tensor.
pub trait EagerReduce {
    fn sum(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor>;
    fn mean(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor>;
    fn amax(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor>;
    fn amin(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor>;
    fn prod(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor>;
    fn argmax(&self, dim: Option<isize>, keepdim: bool) -> OpResult<Tensor>;
    fn argmin(&self, dim: Option<isize>, keepdim: bool) -> OpResult<Tensor>;
}

impl EagerReduce for Tensor {
    fn sum(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor> {
        reduce(&SUM, "ReduceSum", self, dims, keepdim)
    }
    fn mean(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor> {
        reduce(&MEAN, "ReduceMean", self, dims, keepdim)
    }
    fn amax(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor> {
        reduce(&AMAX, "ReduceMax", self, dims, keepdim)
    }
    fn amin(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor> {
        reduce(&AMIN, "ReduceMin", self, dims, keepdim)
    }
    fn prod(&self, dims: &[isize], keepdim: bool) -> OpResult<Tensor> {
        reduce(&PROD, "ReduceProd", self, dims, keepdim)
    }
    fn argmax(&self, dim: Option<isize>, keepdim: bool) -> OpResult<Tensor> {
        arg(&ARGMAX, "ArgMax", self, dim, keepdim)
    }
    fn argmin(&self, dim: Option<isize>, keepdim: bool) -> OpResult<Tensor> {
        arg(&ARGMIN, "ArgMin", self, dim, keepdim)
    }
}
