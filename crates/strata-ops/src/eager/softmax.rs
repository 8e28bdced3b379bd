//! Softmax and log-softmax along one dim: the Softmax and LogSoftmax kernels.

use strata_core::{DispatchTable, Tensor};

use crate::eager::call::{onnx_table, OnnxCall, OnnxImp};
use crate::OpResult;

const SOFTMAX: DispatchTable<OnnxImp> = onnx_table("softmax");
const LOG_SOFTMAX: DispatchTable<OnnxImp> = onnx_table("log_softmax");

/// Softmax along a dim (negative counts from the end).
pub trait EagerSoftmax {
    fn softmax(&self, dim: isize) -> OpResult<Tensor>;
    fn log_softmax(&self, dim: isize) -> OpResult<Tensor>;
}

impl EagerSoftmax for Tensor {
    fn softmax(&self, dim: isize) -> OpResult<Tensor> {
        OnnxCall::new("Softmax", 13)
            .int("axis", dim as i64)
            .dispatch1(&SOFTMAX, &[self])
    }

    fn log_softmax(&self, dim: isize) -> OpResult<Tensor> {
        OnnxCall::new("LogSoftmax", 13)
            .int("axis", dim as i64)
            .dispatch1(&LOG_SOFTMAX, &[self])
    }
}
