//! com.microsoft QLinearSoftmax: softmax of a quantized tensor, requantized to Y's parameters.
//! Attribute `opset` is the ONNX Softmax semantics the node follows: before 13 the input is
//! seen as 2-D at `axis` (softmax over all trailing dims), from 13 over the one `axis`. Values
//! are dequantized through a 256-entry table and the softmax runs in f32.

use strata_core::Device;

use super::qparams::{eight_bit, with_bytes, with_bytes_mut, QParam};
use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearSoftmax";

#[derive(Debug, Clone)]
pub struct QLinearSoftmax {
    axis: i64,
    opset: i64,
}

impl QLinearSoftmax {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let opset = ctx.attrs.int_or("opset", 13)?;
        Ok(Box::new(QLinearSoftmax {
            axis: ctx.attrs.int_or("axis", -1)?,
            opset,
        }))
    }
}

impl Operator for QLinearSoftmax {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = eight_bit(OP, inputs, 0)?;
        required(OP, inputs, 1)?;
        required(OP, inputs, 3)?;
        normalize_axis(OP, "axis", self.axis, x.rank())?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for QLinearSoftmax {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, out) = (io.input(0), io.output(0));
        if out.dims() != x_t.dims() || out.dtype() != x_t.dtype() {
            return Err(OpError::kernel(OP, "output does not match the input"));
        }
        let x = QParam::read(OP, "x", io.input(1), io.input(2), x_t.dtype())?;
        let y = QParam::read(OP, "y", io.input(3), io.input(4), out.dtype())?;
        let dims = x_t.dims();
        let axis = normalize_axis(OP, "axis", self.axis, dims.len())?;
        // (outer, len, inner): softmax over `len` values `inner` apart.
        let (len, inner) = if self.opset < 13 {
            (dims[axis..].iter().product::<usize>(), 1)
        } else {
            (dims[axis], dims[axis + 1..].iter().product())
        };
        let outer = x_t.numel() / (len * inner).max(1);
        let mut real = [0f32; 256];
        for (raw, v) in real.iter_mut().enumerate() {
            *v = x.dequantize(raw as u8);
        }
        with_bytes(OP, x_t, |src| {
            with_bytes_mut(OP, out, |dst| {
                for o in 0..outer {
                    for i in 0..inner {
                        let at = |j: usize| (o * len + j) * inner + i;
                        let max = (0..len)
                            .map(|j| real[src[at(j)] as usize])
                            .fold(f32::NEG_INFINITY, f32::max);
                        let sum: f32 = (0..len)
                            .map(|j| (real[src[at(j)] as usize] - max).exp())
                            .sum();
                        for j in 0..len {
                            dst[at(j)] = y.quantize((real[src[at(j)] as usize] - max).exp() / sum);
                        }
                    }
                }
                Ok(())
            })
        })
    }
}
