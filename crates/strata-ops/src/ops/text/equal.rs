//! Equal on string tensors (opset 11+ allows them): element-wise text equality with NumPy
//! broadcasting, written into the node's planned bool output.

use std::fmt;

use super::common::{for_each_pair, text_input};
use crate::{Kernel, KernelIo, OpError, OpResult};

const OP: &str = "Equal";

/// The kernel `Equal` picks for string inputs.
pub struct TextEqual;

impl fmt::Debug for TextEqual {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TextEqual")
    }
}

impl Kernel for TextEqual {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b) = (text_input(OP, io.inputs, 0)?, text_input(OP, io.inputs, 1)?);
        let out = io.output(0);
        let dims = out.dims().to_vec();
        let mut w = out.write::<u8>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let mut next = data.iter_mut();
        for_each_pair(OP, a, b, &dims, |x, y| {
            if let Some(o) = next.next() {
                *o = (x == y) as u8;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::{DType, Device, MemoryKind, Tensor};

    #[test]
    fn compares_text_with_broadcasting() {
        let a = Tensor::from_strings(&[2, 2], ["a", "b", "c", "a"]).unwrap();
        let b = Tensor::from_strings(&[1], ["a"]).unwrap();
        let out = Tensor::empty(&[2, 2], DType::Bool, Device::Cpu, MemoryKind::Default).unwrap();
        TextEqual
            .run(&KernelIo {
                inputs: &[&a, &b],
                outputs: &[&out],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
        assert_eq!(out.to_bools().unwrap(), [true, false, false, true]);
        let n = Tensor::from_slice(&[1i64], &[1]).unwrap();
        let err = TextEqual.run(&KernelIo {
            inputs: &[&a, &n],
            outputs: &[&out],
            scratch: None,
            in_place: None,
            threads: 1,
        });
        assert!(matches!(err, Err(OpError::DType { index: 1, .. })));
    }
}
