//! SwiGlu: `Y = silu(gate) · up` element-wise, rows along the last axis computed as ggml's
//! `ggml_vec_swiglu_f32` does (see [`super::ggml_math::swiglu_row`]: the vectorized SiLU for
//! whole 16-lane vectors, the scalar one for the rest of a row). Inputs `gate` and `up`, f32, of
//! one shape.

use strata_core::{DType, Device};

use super::ggml_math::swiglu_rows;
use super::{check_f32, contiguous_f32, contiguous_f32_mut};
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "SwiGlu";

#[derive(Clone, Copy, Debug)]
pub struct SwiGlu;

impl SwiGlu {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(SwiGlu))
    }
}

impl Operator for SwiGlu {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [gate, up] = exact_inputs(OP, inputs)?;
        check_f32(OP, gate, 0)?;
        check_f32(OP, up, 1)?;
        let agree = gate.rank() == up.rank()
            && gate.rank() >= 1
            && gate
                .dims
                .iter()
                .zip(&up.dims)
                .all(|(a, b)| match (a.known(), b.known()) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                });
        if !agree {
            return Err(OpError::shape(
                OP,
                format!(
                    "gate {:?} and up {:?} must have one shape",
                    gate.dims, up.dims
                ),
            ));
        }
        Ok(vec![gate.clone()])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(SwiGluKernel))
    }
}

#[derive(Debug)]
struct SwiGluKernel;

impl Kernel for SwiGluKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (g_t, u_t, y_t) = (io.input(0), io.input(1), io.output(0));
        if g_t.dims() != u_t.dims() || g_t.numel() != y_t.numel() {
            return Err(OpError::shape(
                OP,
                format!(
                    "gate {:?}, up {:?} and Y {:?} do not agree",
                    g_t.dims(),
                    u_t.dims(),
                    y_t.dims()
                ),
            ));
        }
        let row = g_t.dims().last().copied().unwrap_or(0);
        if row == 0 {
            return Ok(());
        }
        let (g, u) = (g_t.read::<f32>()?, u_t.read::<f32>()?);
        let (g, u) = (contiguous_f32(OP, &g)?, contiguous_f32(OP, &u)?);
        let mut y_w = y_t.write::<f32>()?;
        let y = contiguous_f32_mut(OP, &mut y_w)?;
        swiglu_rows(g, u, y, row);
        Ok(())
    }
}
