//! com.microsoft QLinearSigmoid and QLinearLeakyRelu: element-wise functions of a quantized
//! tensor, as onnxruntime computes them — one 256-entry table per run mapping each stored byte
//! of X to the stored byte of `f(dequantize(x))` in Y's parameters.

use strata_core::Device;

use super::qparams::{eight_bit, with_bytes, with_bytes_mut, QParam};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// The function a lookup operator applies.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Function {
    Sigmoid,
    LeakyRelu { alpha: f32 },
}

impl Function {
    fn apply(self, v: f32) -> f32 {
        match self {
            Function::Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Function::LeakyRelu { alpha } => {
                if v >= 0.0 {
                    v
                } else {
                    v * alpha
                }
            }
        }
    }
}

/// A quantized element-wise function (inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point).
#[derive(Debug, Clone)]
pub struct QLinearLookup {
    name: &'static str,
    function: Function,
}

impl QLinearLookup {
    pub fn build_sigmoid(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearLookup {
            name: "QLinearSigmoid",
            function: Function::Sigmoid,
        }))
    }

    pub fn build_leaky_relu(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearLookup {
            name: "QLinearLeakyRelu",
            function: Function::LeakyRelu {
                alpha: ctx.attrs.float_or("alpha", 0.01)?,
            },
        }))
    }
}

impl Operator for QLinearLookup {
    fn op_type(&self) -> &str {
        self.name
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = eight_bit(self.name, inputs, 0)?;
        required(self.name, inputs, 1)?;
        required(self.name, inputs, 3)?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(self.name, required(self.name, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

impl Kernel for QLinearLookup {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, out) = (io.input(0), io.output(0));
        if out.numel() != x_t.numel() || out.dtype() != x_t.dtype() {
            return Err(OpError::kernel(
                self.name,
                "output does not match the input",
            ));
        }
        let x = QParam::read(self.name, "x", io.input(1), io.input(2), x_t.dtype())?;
        let y = QParam::read(self.name, "y", io.input(3), io.input(4), out.dtype())?;
        let f = self.function;
        let table = x.table(&y, |v| f.apply(v));
        if io.in_place == Some(0) {
            return with_bytes_mut(self.name, out, |d| {
                d.iter_mut().for_each(|v| *v = table[*v as usize]);
                Ok(())
            });
        }
        with_bytes(self.name, x_t, |src| {
            with_bytes_mut(self.name, out, |dst| {
                dst.iter_mut()
                    .zip(src)
                    .for_each(|(d, &v)| *d = table[v as usize]);
                Ok(())
            })
        })
    }
}
