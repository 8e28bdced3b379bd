//! 2-D pooling: MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool's kernels.

use strata_core::{DispatchTable, Tensor};

use crate::eager::call::{onnx_table, OnnxCall, OnnxImp};
use crate::{OpError, OpResult};

const MAX_POOL2D: DispatchTable<OnnxImp> = onnx_table("max_pool2d");
const AVG_POOL2D: DispatchTable<OnnxImp> = onnx_table("avg_pool2d");
const GLOBAL_MAX_POOL2D: DispatchTable<OnnxImp> = onnx_table("global_max_pool2d");
const GLOBAL_AVG_POOL2D: DispatchTable<OnnxImp> = onnx_table("global_avg_pool2d");

/// A 2-D pooling window (PyTorch's `max_pool2d` / `avg_pool2d` arguments; `stride` defaults to
/// the kernel size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    pub kernel: [usize; 2],
    pub stride: Option<[usize; 2]>,
    pub padding: [usize; 2],
    pub ceil_mode: bool,
    /// Average pooling only: padded zeros count in the divisor (PyTorch's default: true).
    pub count_include_pad: bool,
}

impl Pool2d {
    /// A `kernel`-sized window with PyTorch's defaults.
    pub fn new(kernel: [usize; 2]) -> Self {
        Pool2d {
            kernel,
            stride: None,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
        }
    }

    fn call(&self, op_type: &'static str, opset: i64) -> OpResult<OnnxCall> {
        let i = |v: usize| {
            i64::try_from(v).map_err(|_| OpError::shape(op_type, "window size too large"))
        };
        let stride = self.stride.unwrap_or(self.kernel);
        let [ph, pw] = [i(self.padding[0])?, i(self.padding[1])?];
        Ok(OnnxCall::new(op_type, opset)
            .ints("kernel_shape", &[i(self.kernel[0])?, i(self.kernel[1])?])
            .ints("strides", &[i(stride[0])?, i(stride[1])?])
            .ints("pads", &[ph, pw, ph, pw])
            .int("ceil_mode", self.ceil_mode as i64))
    }
}

fn check_4d(op: &str, x: &Tensor) -> OpResult<()> {
    if x.rank() != 4 {
        return Err(OpError::shape(
            op,
            format!("needs a 4-D [N, C, H, W] input, got {:?}", x.dims()),
        ));
    }
    Ok(())
}

/// Pooling over `[N, C, H, W]` (PyTorch names).
pub trait EagerPool {
    fn max_pool2d(&self, window: Pool2d) -> OpResult<Tensor>;
    fn avg_pool2d(&self, window: Pool2d) -> OpResult<Tensor>;
    /// Max over each whole plane: `[N, C, 1, 1]`.
    fn global_max_pool2d(&self) -> OpResult<Tensor>;
    /// Mean over each whole plane: `[N, C, 1, 1]` (`adaptive_avg_pool2d(x, 1)`).
    fn global_avg_pool2d(&self) -> OpResult<Tensor>;
}

impl EagerPool for Tensor {
    fn max_pool2d(&self, window: Pool2d) -> OpResult<Tensor> {
        check_4d("max_pool2d", self)?;
        window.call("MaxPool", 12)?.dispatch1(&MAX_POOL2D, &[self])
    }

    fn avg_pool2d(&self, window: Pool2d) -> OpResult<Tensor> {
        check_4d("avg_pool2d", self)?;
        window
            .call("AveragePool", 19)?
            .int("count_include_pad", window.count_include_pad as i64)
            .dispatch1(&AVG_POOL2D, &[self])
    }

    fn global_max_pool2d(&self) -> OpResult<Tensor> {
        check_4d("global_max_pool2d", self)?;
        OnnxCall::new("GlobalMaxPool", 1).dispatch1(&GLOBAL_MAX_POOL2D, &[self])
    }

    fn global_avg_pool2d(&self) -> OpResult<Tensor> {
        check_4d("global_avg_pool2d", self)?;
        OnnxCall::new("GlobalAveragePool", 1).dispatch1(&GLOBAL_AVG_POOL2D, &[self])
    }
}
