//! Selection by value or index: `topk` (TopK), `index_select` (Gather), `gather`
//! (GatherElements) and `where_cond` (Where).

use strata_core::{DType, DispatchTable, Tensor};

use crate::eager::call::{axis, i64s, onnx_table, OnnxCall, OnnxImp};
use crate::eager::promote::{as_dtype, promote_types};
use crate::{OpError, OpResult};

const TOPK: DispatchTable<OnnxImp> = onnx_table("topk");
const INDEX_SELECT: DispatchTable<OnnxImp> = onnx_table("index_select");
const GATHER: DispatchTable<OnnxImp> = onnx_table("gather");
const WHERE: DispatchTable<OnnxImp> = onnx_table("where");

fn topk_call(axis: usize, largest: bool) -> OnnxCall {
    OnnxCall::new("TopK", 11)
        .int("axis", axis as i64)
        .int("largest", largest as i64)
        .int("sorted", 1)
}

fn pair(mut outputs: Vec<Tensor>) -> OpResult<(Tensor, Tensor)> {
    match (outputs.pop(), outputs.pop()) {
        (Some(indices), Some(values)) => Ok((values, indices)),
        _ => Err(OpError::kernel("topk", "made fewer than two outputs")),
    }
}

/// Selection (PyTorch names).
pub trait EagerSelect {
    /// The `k` largest (or smallest) elements along `dim` and their int64 indices. Sorted:
    /// best first, ties by lower index. Unsorted: the same elements in their input order.
    fn topk(&self, k: usize, dim: isize, largest: bool, sorted: bool)
        -> OpResult<(Tensor, Tensor)>;
    /// The slices at `index` (1-D, int32/int64) along `dim`.
    fn index_select(&self, dim: isize, index: &Tensor) -> OpResult<Tensor>;
    /// `out[i][j] = self[index[i][j]][j]` for `dim = 0` (and so on): index has self's rank.
    fn gather(&self, dim: isize, index: &Tensor) -> OpResult<Tensor>;
}

impl EagerSelect for Tensor {
    fn topk(
        &self,
        k: usize,
        dim: isize,
        largest: bool,
        sorted: bool,
    ) -> OpResult<(Tensor, Tensor)> {
        let a = axis("topk", dim, self.rank())?;
        let k_tensor = i64s(&[i64::try_from(k)
            .map_err(|_| OpError::shape("topk", format!("k = {k} is too large")))?])?;
        let (values, indices) =
            pair(topk_call(a, largest).dispatch(&TOPK, &[self, &k_tensor], 2)?)?;
        if sorted || k <= 1 {
            return Ok((values, indices));
        }
        // Input order: sort the chosen indices ascending (TopK again, smallest first), then
        // take the values at the positions that sort gives.
        let (ordered, positions) = pair(topk_call(a, false).run_cpu(&[&indices, &k_tensor], 2)?)?;
        let values = OnnxCall::new("GatherElements", 13)
            .int("axis", a as i64)
            .run_cpu(&[&values, &positions], 1)?
            .remove(0);
        Ok((values, ordered))
    }

    fn index_select(&self, dim: isize, index: &Tensor) -> OpResult<Tensor> {
        if index.rank() != 1 {
            return Err(OpError::shape(
                "index_select",
                format!("index must be 1-D, got dims {:?}", index.dims()),
            ));
        }
        OnnxCall::new("Gather", 13)
            .int("axis", axis("index_select", dim, self.rank())? as i64)
            .dispatch1(&INDEX_SELECT, &[self, index])
    }

    fn gather(&self, dim: isize, index: &Tensor) -> OpResult<Tensor> {
        OnnxCall::new("GatherElements", 13)
            .int("axis", axis("gather", dim, self.rank())? as i64)
            .dispatch1(&GATHER, &[self, index])
    }
}

/// `condition ? x : y` element-wise with broadcasting (PyTorch's `torch.where`; `where` is a
/// Rust keyword). `condition` is bool; `x` and `y` promote to a common dtype.
pub fn where_cond(condition: &Tensor, x: &Tensor, y: &Tensor) -> OpResult<Tensor> {
    if condition.dtype() != DType::Bool {
        return Err(OpError::DType {
            op: "where".into(),
            index: 0,
            expected: "bool".into(),
            actual: condition.dtype(),
        });
    }
    let dtype = promote_types("where", x.dtype(), y.dtype())?;
    let (x, y) = (as_dtype(x, dtype)?, as_dtype(y, dtype)?);
    OnnxCall::new("Where", 16).dispatch1(&WHERE, &[condition, &x, &y])
}
