//! Joining tensors: `cat` (Concat) and `stack` (unsqueeze views, then Concat).

use strata_core::{DispatchTable, Tensor};

use crate::eager::call::{axis, onnx_table, OnnxCall, OnnxImp};
use crate::eager::promote::{as_dtype, promote_types};
use crate::{OpError, OpResult};

const CAT: DispatchTable<OnnxImp> = onnx_table("cat");
const STACK: DispatchTable<OnnxImp> = onnx_table("stack");

/// The inputs in their common dtype.
fn common(op: &str, tensors: &[&Tensor]) -> OpResult<Vec<Tensor>> {
    let Some(first) = tensors.first() else {
        return Err(OpError::InputCount {
            op: op.into(),
            expected: "at least 1".into(),
            actual: 0,
        });
    };
    let mut dtype = first.dtype();
    for t in &tensors[1..] {
        dtype = promote_types(op, dtype, t.dtype())?;
    }
    tensors
        .iter()
        .map(|t| Ok(as_dtype(t, dtype)?.into_owned()))
        .collect()
}

/// Joins `tensors` along an existing `dim` (every other dim must match).
pub fn cat(tensors: &[&Tensor], dim: isize) -> OpResult<Tensor> {
    let tensors = common("cat", tensors)?;
    let a = axis("cat", dim, tensors[0].rank())?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    OnnxCall::new("Concat", 13)
        .int("axis", a as i64)
        .dispatch1(&CAT, &refs)
}

/// Joins equally shaped `tensors` along a new `dim`.
pub fn stack(tensors: &[&Tensor], dim: isize) -> OpResult<Tensor> {
    let tensors = common("stack", tensors)?;
    let a = axis("stack", dim, tensors[0].rank() + 1)?;
    let views = tensors
        .iter()
        .map(|t| Ok(t.unsqueeze(a as isize)?))
        .collect::<OpResult<Vec<Tensor>>>()?;
    let refs: Vec<&Tensor> = views.iter().collect();
    OnnxCall::new("Concat", 13)
        .int("axis", a as i64)
        .dispatch1(&STACK, &refs)
}
