//! Transpose: a strided copy through a permuted view.

use strata_core::Device;

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Transpose {
    perm: Option<Vec<usize>>,
}

impl Transpose {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Transpose {
            perm: ctx.attrs.usizes("perm")?,
        }))
    }

    fn perm(&self, rank: usize) -> OpResult<Vec<usize>> {
        let perm = self
            .perm
            .clone()
            .unwrap_or_else(|| (0..rank).rev().collect());
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
        {
            return Err(OpError::attribute(
                "Transpose",
                "perm",
                format!("{perm:?} is not a permutation of 0..{rank}"),
            ));
        }
        Ok(perm)
    }
}

impl Operator for Transpose {
    fn op_type(&self) -> &str {
        "Transpose"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Transpose", inputs, 0)?;
        let perm = self.perm(x.rank())?;
        let mut out = Fact::new(x.dtype, perm.iter().map(|&p| x.dims[p].clone()).collect());
        if let Some(v) = &x.value {
            out.value = Some(v.permute(&perm)?.contiguous()?);
        }
        Ok(vec![out])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only("Transpose", inputs[0].dtype, device)?;
        let perm = self.perm(inputs[0].rank())?;
        let mut fixed = [0usize; 8];
        if perm.len() > fixed.len() {
            return Err(OpError::attribute(
                "Transpose",
                "perm",
                format!("rank {} above the supported 8", perm.len()),
            ));
        }
        fixed[..perm.len()].copy_from_slice(&perm);
        Ok(Box::new(TransposeKernel {
            perm: fixed,
            rank: perm.len(),
        }))
    }
}

#[derive(Debug)]
struct TransposeKernel {
    perm: [usize; 8],
    rank: usize,
}

impl Kernel for TransposeKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let view = io.input(0).permute(&self.perm[..self.rank])?;
        io.output(0).copy_from(&view)?;
        Ok(())
    }
}
