//! Matrix products and convolution: MatMul and Conv's kernels.

use strata_core::{DispatchTable, Tensor};

use crate::eager::call::{first, onnx_table, route, OnnxCall, OnnxImp};
use crate::eager::promote::{as_dtype, promote_types};
use crate::{OpError, OpResult};

const MATMUL: DispatchTable<OnnxImp> = onnx_table("matmul");
const CONV2D: DispatchTable<OnnxImp> = onnx_table("conv2d");

/// The geometry of a 2-D convolution (PyTorch's `conv2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    pub stride: [usize; 2],
    /// Zero padding on both sides of (height, width).
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2d {
    fn default() -> Self {
        Conv2d {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

fn ints(values: [usize; 2]) -> OpResult<[i64; 2]> {
    let one = |v: usize| i64::try_from(v).map_err(|_| OpError::shape("conv2d", "size too large"));
    Ok([one(values[0])?, one(values[1])?])
}

/// Matrix products and convolution (PyTorch names).
pub trait EagerLinalg {
    /// numpy-style matrix product with batch broadcasting (1-D operands promoted as numpy does).
    fn matmul(&self, other: &Tensor) -> OpResult<Tensor>;
    /// 2-D convolution of `[N, C, H, W]` by `[M, C/groups, kH, kW]`, with an optional `[M]` bias.
    fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, args: Conv2d) -> OpResult<Tensor>;
}

impl EagerLinalg for Tensor {
    fn matmul(&self, other: &Tensor) -> OpResult<Tensor> {
        let dtype = promote_types("matmul", self.dtype(), other.dtype())?;
        let (a, b) = (as_dtype(self, dtype)?, as_dtype(other, dtype)?);
        OnnxCall::new("MatMul", 13).dispatch1(&MATMUL, &[&a, &b])
    }

    fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, args: Conv2d) -> OpResult<Tensor> {
        if self.rank() != 4 || weight.rank() != 4 {
            return Err(OpError::shape(
                "conv2d",
                format!(
                    "needs a 4-D input and weight, got {:?} and {:?}",
                    self.dims(),
                    weight.dims()
                ),
            ));
        }
        let [ph, pw] = ints(args.padding)?;
        let group = i64::try_from(args.groups.max(1))
            .map_err(|_| OpError::shape("conv2d", "groups too large"))?;
        let call = OnnxCall::new("Conv", 11)
            .ints("strides", &ints(args.stride)?)
            .ints("pads", &[ph, pw, ph, pw])
            .ints("dilations", &ints(args.dilation)?)
            .int("group", group);
        let imp = match bias {
            Some(bias) => route(&CONV2D, &[self, weight, bias])?,
            None => route(&CONV2D, &[self, weight])?,
        };
        let undefined = Tensor::undefined();
        first(
            imp(&call, &[self, weight, bias.unwrap_or(&undefined)], 1)?,
            "conv2d",
        )
    }
}
