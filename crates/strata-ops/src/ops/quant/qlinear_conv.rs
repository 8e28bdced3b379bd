//! QLinearConv (opset 10): quantized convolution. The exact integer convolution of the centered
//! operands plus the int32 bias is rescaled by `x_scale * w_scale / y_scale` (w_scale may be one
//! per output channel; computed in the scales' type, as the ONNX reference does), rounded half
//! to even, offset by `y_zero_point` and saturated to uint8/int8.

use strata_core::Device;

use super::integer_conv::{centered_conv, ConvAttrs};
use super::integer_matmul::{check_qlinear_inputs, line_value, per_line, round_to};
use super::values::{read_f64, write_quantized, QuantTarget};
use crate::ops::axes::required;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearConv";

#[derive(Debug, Clone)]
pub struct QLinearConv {
    attrs: ConvAttrs,
}

impl QLinearConv {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearConv {
            attrs: ConvAttrs::from_ctx(OP, ctx)?,
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

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        if device != Device::Cpu {
            return Err(OpError::NoKernel {
                op: OP.into(),
                dtype: required(OP, inputs, 0)?.dtype,
                device,
            });
        }
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for QLinearConv {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (acc, channels, per_channel) = centered_conv(
            OP,
            &self.attrs,
            io.input(0),
            io.input(2),
            io.input(3),
            io.input(5),
            io.input(8),
            io.threads,
        )?;
        let x_scale = read_f64(OP, io.input(1))?;
        let w_scale = per_line(OP, "w_scale", io.input(4), channels)?.unwrap_or_default();
        let y_scale = read_f64(OP, io.input(6))?;
        let y_zero_point = read_f64(OP, io.input(7))?;
        if [x_scale.len(), y_scale.len(), y_zero_point.len()] != [1, 1, 1] || w_scale.is_empty() {
            return Err(OpError::shape(
                OP,
                "x_scale, y_scale and y_zero_point must be scalars",
            ));
        }
        let out = io.output(0);
        let target = QuantTarget::of(out.dtype())
            .ok_or_else(|| OpError::kernel(OP, format!("cannot write {}", out.dtype())))?;
        let scale_type = io.input(1).dtype();
        let values = acc.iter().enumerate().map(|(i, &acc)| {
            let channel = (i / per_channel.max(1)) % channels.max(1);
            let xw = round_to(scale_type, x_scale[0] * line_value(&w_scale, channel));
            let multiplier = round_to(scale_type, xw / y_scale[0]);
            target.quantize(acc * multiplier, y_zero_point[0], true)
        });
        write_quantized(OP, out, values)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::elementwise_test_util::run_op;
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
