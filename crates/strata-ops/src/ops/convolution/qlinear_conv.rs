//! QLinearConv (opset 10): quantized convolution. The exact integer convolution of the centered
//! operands plus the int32 bias is rescaled by `x_scale * w_scale / y_scale` (w_scale may be one
//! per output channel; in f32, as onnxruntime computes it), rounded half to even, offset by
//! `y_zero_point` and saturated to uint8/int8. 1-D and 2-D convolutions run on the integer GEMM
//! (weights packed at plan time) or the direct depthwise kernel, the requantization fused into
//! the write-back; 3-D ones on the exact f64 path.

use std::sync::Arc;

use strata_core::Device;

use crate::kernels::igemm::{Epilogue, Requant};
use crate::ops::convolution::conv_integer::int_conv_scratch_bytes;
use crate::ops::convolution::integer_conv_gemm::{
    int_conv, prepack_weights, supports, ConvWeights,
};
use crate::ops::convolution::integer_conv_kernel::{centered_conv, ConvAttrs, ResolvedConv};
use crate::ops::quantization::int_params::{column_multipliers, scales_into, zero_points_into};
use crate::ops::quantization::integer_operands::{
    check_qlinear_inputs, line_value, per_line, round_to,
};
use crate::ops::quantization::values::{read_scalar, scratch, write_quantized, QuantTarget};
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
    /// The weights packed at plan time.
    packed: Option<Arc<ConvWeights>>,
}

impl QLinearConv {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Self::with_attrs(ConvAttrs::from_ctx(OP, ctx)?))
    }

    /// The operator with Conv's attributes (the QDQ pass's rewrite of a Conv).
    pub(crate) fn with_attrs(attrs: ConvAttrs) -> Box<dyn Operator> {
        Box::new(QLinearConv {
            attrs,
            planned: None,
            packed: None,
        })
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
        // The convolution's buffers, then (f64 path) one weight scale per output channel.
        int_conv_scratch_bytes(OP, &self.attrs, x, w, 1)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 3)?);
        let planned = self.attrs.resolve_facts(OP, x, w)?;
        let packed = prepack_weights(OP, planned.as_ref(), w)?;
        Ok(Box::new(QLinearConv {
            attrs: self.attrs.clone(),
            planned,
            packed,
        }))
    }
}

impl QLinearConv {
    /// The GEMM path: bias and requantization in the integer GEMM's write-back.
    fn run_gemm(&self, r: &ResolvedConv, io: &KernelIo<'_>, work: &mut &mut [i32]) -> OpResult<()> {
        let channels = r.out_dims[1];
        let x_scale = scales_into(OP, "x_scale", io.input(1), 1, work)?[0];
        let x_zero = zero_points_into(OP, "x_zero_point", io.input(2), 1, work)?[0];
        let w_scale = scales_into(OP, "w_scale", io.input(4), channels, work)?;
        let w_zero = zero_points_into(OP, "w_zero_point", io.input(5), channels, work)?;
        let y_scale = scales_into(OP, "y_scale", io.input(6), 1, work)?[0];
        let y_zero = zero_points_into(OP, "y_zero_point", io.input(7), 1, work)?[0];
        let bias_tensor = io.input(8);
        let bias_read;
        let bias = if bias_tensor.is_defined() {
            if bias_tensor.dtype() != strata_core::DType::I32 || bias_tensor.dims() != [channels] {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "bias must be int32 of dims [{channels}], got {} {:?}",
                        bias_tensor.dtype(),
                        bias_tensor.dims()
                    ),
                ));
            }
            bias_read = bias_tensor.read::<i32>()?;
            Some(
                bias_read
                    .as_slice()
                    .ok_or_else(|| OpError::kernel(OP, "bias is not contiguous"))?,
            )
        } else {
            None
        };
        let col = column_multipliers(OP, x_scale, w_scale, Some(y_scale), work)?;
        let epilogue = Epilogue {
            bias_i32: bias,
            scale: Some(Requant { col, row: None }),
            zero_point: y_zero,
            bias_f32: None,
        };
        int_conv(
            OP,
            r,
            io.input(0),
            x_zero,
            io.input(3),
            w_zero,
            self.packed.as_deref(),
            &epilogue,
            io.output(0),
            work,
            io.threads,
        )
    }
}

impl Kernel for QLinearConv {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let mut guard = scratch(OP, io)?;
        let (x, w) = (io.input(0), io.input(3));
        if let Some(r) = self
            .planned
            .as_ref()
            .filter(|r| supports(r) && r.x_dims == x.dims() && r.w_dims == w.dims())
        {
            let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
            return self.run_gemm(r, io, &mut work);
        }
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let (acc, channels, per_channel) = centered_conv(
            OP,
            &self.attrs,
            self.planned.as_ref(),
            x,
            io.input(2),
            w,
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
