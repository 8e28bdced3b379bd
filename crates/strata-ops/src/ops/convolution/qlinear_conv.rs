//! QLinearConv (opset 10): quantized convolution. The exact integer convolution of the centered
//! operands plus the int32 bias is rescaled by `x_scale * w_scale / y_scale` (w_scale may be one
//! per output channel; computed in the scales' type, as the ONNX reference does), rounded half
//! to even, offset by `y_zero_point` and saturated to uint8/int8.

use strata_core::Device;

use crate::ops::convolution::integer_conv_kernel::{centered_conv, ConvAttrs, ResolvedConv};
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

const OP: &str = "QLinearConv";

#[derive(Debug, Clone)]
pub struct QLinearConv {
    attrs: ConvAttrs,
    /// Resolved when the kernel is made for known dims.
    planned: Option<ResolvedConv>,
}

impl QLinearConv {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearConv {
            attrs: ConvAttrs::from_ctx(OP, ctx)?,
            planned: None,
        }))
    }
}

impl Operator for QLinearConv {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (x, w, dtype) = check_qlinear_inputs(OP, inputs)?;
        Ok(vec![Fact::new(dtype, self.attrs.output_dims(OP, x, w)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 3)?);
        // The convolution's buffers, then one weight scale per output channel.
        f64_scratch_bytes(OP, self.attrs.work_len(OP, x, w, 1)?)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 3)?);
        Ok(Box::new(QLinearConv {
            attrs: self.attrs.clone(),
            planned: self.attrs.resolve_facts(OP, x, w)?,
        }))
    }
}

impl Kernel for QLinearConv {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let (acc, channels, per_channel) = centered_conv(
            OP,
            &self.attrs,
            self.planned.as_ref(),
            io.input(0),
            io.input(2),
            io.input(3),
            io.input(5),
            Some(io.input(8)),
            io.threads,
            &mut work,
        )?;
        let x_scale = read_scalar(OP, "x_scale", io.input(1))?;
        let w_scale = per_line(OP, "w_scale", io.input(4), channels, &mut work)?;
        let w_scale = w_scale.ok_or_else(|| OpError::shape(OP, "w_scale is missing"))?;
        let y_scale = read_scalar(OP, "y_scale", io.input(6))?;
        let y_zero_point = read_scalar(OP, "y_zero_point", io.input(7))?;
        let out = io.output(0);
        let target = QuantTarget::of(out.dtype())
            .ok_or_else(|| OpError::kernel(OP, format!("cannot write {}", out.dtype())))?;
        let scale_type = io.input(1).dtype();
        let values = acc.iter().enumerate().map(|(i, &acc)| {
            let channel = (i / per_channel.max(1)) % channels.max(1);
            let xw = round_to(scale_type, x_scale * line_value(w_scale, channel));
            let multiplier = round_to(scale_type, xw / y_scale);
            target.quantize(acc * multiplier, y_zero_point, true)
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

    fn byte(v: u8) -> Tensor {
        Tensor::from_slice(&[v], &[]).unwrap()
    }

    #[test]
    fn requantizes_a_pointwise_convolution() {
        let x = Tensor::from_slice(&[10u8, 20, 30, 40], &[1, 1, 2, 2]).unwrap();
        let w = Tensor::from_slice(&[3u8], &[1, 1, 1, 1]).unwrap();
        // (x - 10) * (3 - 1) * 0.5 * 1.0 / 2.0 + 5 = [5, 10, 15, 20].
        let inputs = [
            x,
            scalar(0.5),
            byte(10),
            w,
            scalar(1.0),
            byte(1),
            scalar(2.0),
            byte(5),
        ];
        let y = run_op("QLinearConv", 10, &[], &inputs).unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [5, 10, 15, 20]);
    }

    #[test]
    fn float_weight_is_an_error() {
        let x = Tensor::from_slice(&[10u8], &[1, 1, 1, 1]).unwrap();
        let w = Tensor::from_slice(&[1.0f32], &[1, 1, 1, 1]).unwrap();
        let inputs = [
            x,
            scalar(0.5),
            byte(10),
            w,
            scalar(1.0),
            byte(1),
            scalar(2.0),
            byte(5),
        ];
        let err = run_op("QLinearConv", 10, &[], &inputs).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 3, .. }), "{err}");
    }
}
