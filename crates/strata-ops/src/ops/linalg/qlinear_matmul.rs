//! QLinearMatMul (opsets 10, 21): quantized matrix product. The exact integer product of the
//! centered operands is rescaled by `a_scale * b_scale / y_scale` (in f32, as onnxruntime
//! does), rounded half to even, offset by `y_zero_point` and saturated to the output type
//! (uint8/int8, the type of `y_zero_point`). A's scale and zero point may be one per row, B's
//! one per column. Runs on the integer GEMM with the requantization in its write-back.

use std::sync::Arc;

use strata_core::Device;

use crate::kernels::igemm::{Epilogue, PackedB, Requant};
use crate::ops::linalg::integer_matmul_kernel::{b_dims, int_matmul, matmul_mkn};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::linalg::matmul_integer::int_matmul_scratch_bytes;
use crate::ops::quantization::int_params::{
    column_multipliers, prepack_matrix, scales_into, zero_points_into,
};
use crate::ops::quantization::integer_operands::check_qlinear_inputs;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, OpContext, OpResult, Operator};

const OP: &str = "QLinearMatMul";

#[derive(Debug, Clone, Default)]
pub struct QLinearMatMul {
    /// B packed at plan time, when it is a constant matrix.
    packed: Option<Arc<PackedB>>,
}

impl QLinearMatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearMatMul::default()))
    }
}

impl Operator for QLinearMatMul {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (a, b, dtype) = check_qlinear_inputs(OP, inputs)?;
        Ok(vec![Fact::new(dtype, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        int_matmul_scratch_bytes(OP, required(OP, inputs, 0)?, required(OP, inputs, 3)?)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(QLinearMatMul {
            packed: prepack_matrix(OP, required(OP, inputs, 3)?)?,
        }))
    }
}

impl Kernel for QLinearMatMul {
    /// A constant B is packed at plan time and never read again: the plan may let it go.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed.is_some() { &[3] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b) = (io.input(0), io.input(3));
        let (m, _, n) = matmul_mkn(a.dims(), &b_dims(OP, b, self.packed.as_deref())?);
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let a_scale = scales_into(OP, "a_scale", io.input(1), m, &mut work)?;
        let a_zero = zero_points_into(OP, "a_zero_point", io.input(2), m, &mut work)?;
        let b_scale = scales_into(OP, "b_scale", io.input(4), n, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(5), n, &mut work)?;
        let y_scale = scales_into(OP, "y_scale", io.input(6), 1, &mut work)?[0];
        let y_zero = zero_points_into(OP, "y_zero_point", io.input(7), 1, &mut work)?[0];
        let scale = if a_scale.len() == 1 {
            Requant {
                col: column_multipliers(OP, a_scale[0], b_scale, Some(y_scale), &mut work)?,
                row: None,
            }
        } else {
            Requant {
                col: b_scale,
                row: Some((a_scale, y_scale)),
            }
        };
        let epilogue = Epilogue {
            scale: Some(scale),
            zero_point: y_zero,
            ..Epilogue::default()
        };
        int_matmul(
            OP,
            a,
            a_zero,
            b,
            b_zero,
            self.packed.as_deref(),
            io.output(0),
            &epilogue,
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

    fn scalar(v: f32) -> Tensor {
        Tensor::from_slice(&[v], &[]).unwrap()
    }

    #[test]
    fn requantizes_the_integer_product() {
        let a = Tensor::from_slice(&[2u8, 4], &[1, 2]).unwrap();
        let b = Tensor::from_slice(&[1u8, 3], &[2, 1]).unwrap();
        let zp = |v: u8| Tensor::from_slice(&[v], &[]).unwrap();
        // (2*1 + 4*3) * 0.5 * 1.0 / 2.0 = 3.5 -> 4 (half to even) + 10.
        let inputs = [
            a,
            scalar(0.5),
            zp(0),
            b,
            scalar(1.0),
            zp(0),
            scalar(2.0),
            zp(10),
        ];
        let y = run_op("QLinearMatMul", 10, &[], &inputs).unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [14]);
    }

    #[test]
    fn missing_zero_point_is_an_error() {
        let a = Tensor::from_slice(&[2u8], &[1, 1]).unwrap();
        let err = run_op("QLinearMatMul", 10, &[], &[a.clone(), scalar(1.0)]).unwrap_err();
        assert!(matches!(err, OpError::MissingInput { .. }), "{err}");
    }
}
