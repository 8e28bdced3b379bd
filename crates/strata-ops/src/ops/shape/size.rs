//! Size: the input's element count as an int64 scalar; known (and folded) whenever the input
//! dims are.

use strata_core::{DType, Device, Tensor};

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Size", Size::build)];

#[derive(Debug, Clone, Copy)]
pub struct Size;

impl Size {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Size))
    }
}

impl Operator for Size {
    fn op_type(&self) -> &str {
        "Size"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Size", inputs, 0)?;
        let mut out = Fact::known(DType::I64, &[]);
        if let Some(n) = x.numel() {
            out.value = Some(Tensor::scalar(n as i64)?);
        }
        Ok(vec![out])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only("Size", DType::I64, device)?;
        Ok(Box::new(Size))
    }
}

impl Kernel for Size {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let n = io.input(0).numel() as i64;
        io.output(0).fill(n)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_elements() {
        let x = Tensor::zeros(&[3, 0, 2], DType::U8).unwrap();
        let f = Size.infer(&[&Fact::constant(x.clone())]).unwrap().remove(0);
        assert_eq!(f.value.unwrap().to_vec::<i64>().unwrap(), vec![0]);
        let x = Tensor::zeros(&[3, 4], DType::F32).unwrap();
        let o = Tensor::zeros(&[], DType::I64).unwrap();
        Size.run(&KernelIo {
            inputs: &[&x],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })
        .unwrap();
        assert_eq!(o.to_vec::<i64>().unwrap(), vec![12]);
    }
}
