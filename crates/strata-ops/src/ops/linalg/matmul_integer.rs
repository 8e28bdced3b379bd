//! MatMulInteger (opset 10): `Y = (A - a_zero_point) @ (B - b_zero_point)` as int32, for
//! uint8/int8 operands; A's zero point is a scalar or one per row, B's a scalar or one per column.

use strata_core::{DType, Device};

use crate::ops::linalg::integer_matmul_kernel::{centered_product, product_work_len};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::{f64_scratch_bytes, scratch};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "MatMulInteger";

#[derive(Debug, Clone, Copy)]
pub struct MatMulInteger;

impl MatMulInteger {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MatMulInteger))
    }
}

impl Operator for MatMulInteger {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = required(OP, inputs, 0)?;
        let b = required(OP, inputs, 1)?;
        check_operand(OP, a, 0, optional(inputs, 2), 2)?;
        check_operand(OP, b, 1, optional(inputs, 3), 3)?;
        Ok(vec![Fact::new(DType::I32, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        let (a, b) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        let (Some(a), Some(b), Some(y)) = (
            a.concrete(),
            b.concrete(),
            outputs.first().and_then(|y| y.concrete()),
        ) else {
            return Ok(0);
        };
        f64_scratch_bytes(OP, product_work_len(&a, &b, y.iter().product()))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(MatMulInteger))
    }
}

impl Kernel for MatMulInteger {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let (product, _, _) = centered_product(
            OP,
            io.input(0),
            io.input(2),
            io.input(1),
            io.input(3),
            out.numel(),
            io.threads,
            &mut work,
        )?;
        let mut write = out.write::<i32>()?;
        let data = write
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        for (slot, &value) in data.iter_mut().zip(product) {
            // Exact integers; a sum past i32's range wraps as int32 accumulation does.
            *slot = value as i64 as i32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use crate::OpError;
    use strata_core::Tensor;

    #[test]
    fn product_with_zero_points() {
        let a = Tensor::from_slice(&[11u8, 7, 3, 10, 6, 2], &[2, 3]).unwrap();
        let b = Tensor::from_slice(&[1u8, 4, 2, 5, 3, 6], &[3, 2]).unwrap();
        let a_zp = Tensor::from_slice(&[12u8], &[]).unwrap();
        let b_zp = Tensor::from_slice(&[0u8], &[]).unwrap();
        let y = run_op("MatMulInteger", 10, &[], &[a, b, a_zp, b_zp]).unwrap();
        // A - 12 = [[-1, -5, -9], [-2, -6, -10]].
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [-38, -83, -44, -98]);
    }

    #[test]
    fn float_operands_are_errors() {
        let a = Tensor::from_slice(&[1.0f32], &[1, 1]).unwrap();
        let err = run_op("MatMulInteger", 10, &[], &[a.clone(), a]).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 0, .. }), "{err}");
    }
}
