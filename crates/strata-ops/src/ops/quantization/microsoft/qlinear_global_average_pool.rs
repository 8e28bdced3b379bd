//! com.microsoft QLinearGlobalAveragePool: the mean over the spatial dims of each channel of a
//! quantized tensor (NCHW, or NHWC with `channels_last = 1`), requantized as onnxruntime does:
//! `round_half_even((Σx - x_zero·S) · x_scale / (y_scale · S)) + y_zero`, saturated (S = spatial
//! size; the sum is exact in i32).

use strata_core::Device;

use super::qparams::{eight_bit, with_bytes, with_bytes_mut, QParam};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearGlobalAveragePool";

#[derive(Debug, Clone)]
pub struct QLinearGlobalAveragePool {
    channels_last: bool,
}

impl QLinearGlobalAveragePool {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearGlobalAveragePool {
            channels_last: ctx.attrs.int_or("channels_last", 0)? != 0,
        }))
    }
}

impl Operator for QLinearGlobalAveragePool {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = eight_bit(OP, inputs, 0)?;
        for index in [1, 3] {
            required(OP, inputs, index)?;
        }
        if x.rank() < 3 {
            return Err(OpError::shape(
                OP,
                format!("input must have rank >= 3, got {:?}", x.dims),
            ));
        }
        let dims: Vec<Dim> = x
            .dims
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let kept = if self.channels_last {
                    i == 0 || i == x.rank() - 1
                } else {
                    i < 2
                };
                if kept {
                    d.clone()
                } else {
                    Dim::Known(1)
                }
            })
            .collect();
        Ok(vec![Fact::new(x.dtype, dims)])
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

impl Kernel for QLinearGlobalAveragePool {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, out) = (io.input(0), io.output(0));
        let x = QParam::read(OP, "x", io.input(1), io.input(2), x_t.dtype())?;
        let y = QParam::read(OP, "y", io.input(3), io.input(4), out.dtype())?;
        let dims = x_t.dims();
        let (batch, channels) = if self.channels_last {
            (dims[0], dims[dims.len() - 1])
        } else {
            (dims[0], dims[1])
        };
        let size = x_t.numel() / (batch * channels).max(1);
        if out.numel() != batch * channels || size == 0 {
            return Err(OpError::kernel(
                OP,
                "output does not hold one value per channel",
            ));
        }
        let scale = x.scale / (y.scale * size as f32);
        let value = |raw: u8| {
            if x.signed {
                i32::from(raw as i8)
            } else {
                i32::from(raw)
            }
        };
        let finish = |sum: i32| y.quantize_scaled((sum - x.zero * size as i32) as f32 * scale);
        with_bytes(OP, x_t, |src| {
            with_bytes_mut(OP, out, |dst| {
                if self.channels_last {
                    for n in 0..batch {
                        for c in 0..channels {
                            let sum: i32 = (0..size)
                                .map(|p| value(src[(n * size + p) * channels + c]))
                                .sum();
                            dst[n * channels + c] = finish(sum);
                        }
                    }
                } else {
                    for (d, plane) in dst.iter_mut().zip(src.chunks_exact(size)) {
                        *d = finish(plane.iter().map(|&v| value(v)).sum());
                    }
                }
                Ok(())
            })
        })
    }
}
