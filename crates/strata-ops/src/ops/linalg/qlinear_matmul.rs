//! QLinearMatMul (opsets 10, 21): quantized matrix product. The exact integer product of the
//! centered operands is rescaled by `a_scale * b_scale / y_scale` (computed in the scales' type,
//! as the ONNX reference does), rounded half to even, offset by `y_zero_point` and saturated to
//! the output type (uint8/int8, the type of `y_zero_point`). A's scale and zero point may be one
//! per row, B's one per column.

use strata_core::Device;

use crate::ops::linalg::integer_matmul_kernel::{centered_product, product_work_len};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::quantization::integer_operands::{
    check_qlinear_inputs, line_value, per_line, round_to,
};
use crate::ops::quantization::values::{
    f64_scratch_bytes, read_scalar, scratch, write_quantized, QuantTarget,
};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearMatMul";

#[derive(Debug, Clone, Copy)]
pub struct QLinearMatMul;

impl QLinearMatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearMatMul))
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

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        let (a, b) = (required(OP, inputs, 0)?, required(OP, inputs, 3)?);
        let (Some(a), Some(b), Some(y)) = (
            a.concrete(),
            b.concrete(),
            outputs.first().and_then(|y| y.concrete()),
        ) else {
            return Ok(0);
        };
        // The product's buffers, then A's per-row and B's per-column scales.
        let lines = a.len().checked_sub(2).map_or(1, |r| a[r]) + b.last().copied().unwrap_or(1);
        let values =
            product_work_len(&a, &b, y.iter().product()).and_then(|v| v.checked_add(lines));
        f64_scratch_bytes(OP, values)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(QLinearMatMul))
    }
}

impl Kernel for QLinearMatMul {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let (product, m, n) = centered_product(
            OP,
            io.input(0),
            io.input(2),
            io.input(3),
            io.input(5),
            out.numel(),
            io.threads,
            &mut work,
        )?;
        let a_scale = per_line(OP, "a_scale", io.input(1), m, &mut work)?.unwrap_or_default();
        let b_scale = per_line(OP, "b_scale", io.input(4), n, &mut work)?.unwrap_or_default();
        let y_scale = read_scalar(OP, "y_scale", io.input(6))?;
        let y_zero_point = read_scalar(OP, "y_zero_point", io.input(7))?;
        if a_scale.is_empty() || b_scale.is_empty() {
            return Err(OpError::shape(OP, "every scale must be present"));
        }
        let target = QuantTarget::of(out.dtype())
            .ok_or_else(|| OpError::kernel(OP, format!("cannot write {}", out.dtype())))?;
        let scale_type = io.input(1).dtype();
        let (rows, cols) = (m.max(1), n.max(1));
        let values = product.iter().enumerate().map(|(i, &acc)| {
            let (row, col) = ((i / cols) % rows, i % cols);
            let ab = round_to(
                scale_type,
                line_value(a_scale, row) * line_value(b_scale, col),
            );
            let multiplier = round_to(scale_type, ab / y_scale);
            let scaled = acc * multiplier;
            // Round half to even, add the zero point and saturate, like QuantizeLinear.
            target.quantize(scaled, y_zero_point, true)
        });
        write_quantized(OP, out, values)
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
