//! MatMulInteger (opset 10): `Y = (A - a_zero_point) @ (B - b_zero_point)` as int32, for
//! uint8/int8 operands; A's zero point is a scalar or one per row, B's a scalar or one per column.
//! Runs on the integer GEMM, B packed at plan time when it is a constant.

use std::sync::Arc;

use strata_core::{DType, Device};

use crate::kernels::igemm::{Epilogue, PackedB};
use crate::ops::linalg::integer_matmul_kernel::{b_dims, int_matmul, int_matmul_words, matmul_mkn};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::quantization::int_params::{
    param_words, prepack_matrix, words_to_bytes, zero_points_into,
};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, OpContext, OpResult, Operator};

const OP: &str = "MatMulInteger";

#[derive(Debug, Clone, Default)]
pub struct MatMulInteger {
    /// B packed at plan time, when it is a constant matrix.
    packed: Option<Arc<PackedB>>,
}

impl MatMulInteger {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MatMulInteger::default()))
    }
}

/// Scratch bytes of an integer matmul of `a` by `b` with its per-line parameters (0 while a
/// dim is unknown).
pub(crate) fn int_matmul_scratch_bytes(op: &str, a: &Fact, b: &Fact) -> OpResult<usize> {
    let (Some(a_dims), Some(b_dims)) = (a.concrete(), b.concrete()) else {
        return Ok(0);
    };
    let (m, _, n) = matmul_mkn(&a_dims, &b_dims);
    let prepacked = b.value.is_some() && b_dims.len() == 2;
    let words = int_matmul_words(&a_dims, &b_dims, prepacked)
        .zip(param_words(m, n))
        .and_then(|(x, y)| x.checked_add(y));
    words_to_bytes(op, words)
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

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        int_matmul_scratch_bytes(OP, required(OP, inputs, 0)?, required(OP, inputs, 1)?)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(MatMulInteger {
            packed: prepack_matrix(OP, required(OP, inputs, 1)?)?,
        }))
    }
}

impl Kernel for MatMulInteger {
    /// A constant B is packed at plan time and never read again: the plan may let it go.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b) = (io.input(0), io.input(1));
        let (m, _, n) = matmul_mkn(a.dims(), &b_dims(OP, b, self.packed.as_deref())?);
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let a_zero = zero_points_into(OP, "a_zero_point", io.input(2), m, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(3), n, &mut work)?;
        int_matmul(
            OP,
            a,
            a_zero,
            b,
            b_zero,
            self.packed.as_deref(),
            io.output(0),
            &Epilogue::default(),
            &mut work,
            io.threads,
        )
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
