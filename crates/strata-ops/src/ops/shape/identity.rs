//! Identity, and the copy kernel shared by every op that only relabels dims (Reshape, Flatten,
//! Squeeze, Unsqueeze): with in-place planning the copy disappears.

use strata_core::Device;

use crate::support::inputs::required;
use crate::{Fact, Kernel, KernelIo, OpCapabilities, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Identity;

impl Identity {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Identity))
    }
}

impl Operator for Identity {
    fn op_type(&self) -> &str {
        "Identity"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Identity", inputs, 0)?;
        let mut out = Fact::new(x.dtype, x.dims.clone());
        out.value = x.value.clone();
        Ok(vec![out])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        copy_kernel("Identity", device)
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            forwards_input: Some(0),
            ..OpCapabilities::default()
        }
    }
}

pub(crate) fn copy_kernel(op: &'static str, device: Device) -> OpResult<Box<dyn Kernel>> {
    if device != Device::Cpu {
        return Err(OpError::kernel(op, format!("no copy kernel on {device}")));
    }
    Ok(Box::new(CopyKernel { op }))
}

/// Copies input 0's elements, in logical order, into output 0 (same element count).
#[derive(Debug)]
pub(crate) struct CopyKernel {
    op: &'static str,
}

impl Kernel for CopyKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place == Some(0) {
            return Ok(());
        }
        let (src, dst) = (io.input(0), io.output(0));
        if src.numel() != dst.numel() {
            return Err(OpError::kernel(
                self.op,
                format!("{:?} and {:?} differ in size", src.dims(), dst.dims()),
            ));
        }
        dst.view(src.dims())?.copy_from(src)?;
        Ok(())
    }
}
