//! ConvInteger (opset 10): `Y = conv(X - x_zero_point, W - w_zero_point)` as int32 for
//! uint8/int8 operands, with Conv's attributes; W's zero point may be one per output channel.
//! 1-D and 2-D convolutions run on the integer GEMM (weights packed at plan time when
//! constant) or the direct depthwise kernel; 3-D ones on the exact f64 path.

use std::sync::Arc;

use strata_core::{DType, Device};

use crate::kernels::igemm::Epilogue;
use crate::ops::convolution::integer_conv_gemm::{
    int_conv, int_conv_words, prepack_weights, supports, ConvWeights,
};
use crate::ops::convolution::integer_conv_kernel::{centered_conv, ConvAttrs, ResolvedConv};
use crate::ops::quantization::int_params::{param_words, words_to_bytes, zero_points_into};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::{f64_scratch_bytes, read_scalar, scratch};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "ConvInteger";

#[derive(Debug, Clone)]
pub struct ConvInteger {
    attrs: ConvAttrs,
    /// Resolved when the kernel is made for known dims.
    planned: Option<ResolvedConv>,
    /// The weights packed at plan time.
    packed: Option<Arc<ConvWeights>>,
}

impl ConvInteger {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(ConvInteger {
            attrs: ConvAttrs::from_ctx(OP, ctx)?,
            planned: None,
            packed: None,
        }))
    }
}

/// Scratch bytes of an integer convolution of `x` by `w` (GEMM path when it applies, else the
/// f64 path with `per_channel` extra values per output channel).
pub(crate) fn int_conv_scratch_bytes(
    op: &str,
    attrs: &ConvAttrs,
    x: &Fact,
    w: &Fact,
    per_channel: usize,
) -> OpResult<usize> {
    match attrs.resolve_facts(op, x, w)? {
        Some(r) if supports(&r) => {
            let words = int_conv_words(&r, w.value.is_some())
                .zip(param_words(r.out_dims[1], r.out_dims[1]))
                .and_then(|(a, b)| a.checked_add(b));
            words_to_bytes(op, words)
        }
        _ => f64_scratch_bytes(op, attrs.work_len(op, x, w, per_channel)?),
    }
}

impl Operator for ConvInteger {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let w = required(OP, inputs, 1)?;
        check_operand(OP, x, 0, optional(inputs, 2), 2)?;
        check_operand(OP, w, 1, optional(inputs, 3), 3)?;
        Ok(vec![Fact::new(
            DType::I32,
            self.attrs.output_dims(OP, x, w)?,
        )])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        int_conv_scratch_bytes(OP, &self.attrs, x, w, 0)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        let planned = self.attrs.resolve_facts(OP, x, w)?;
        let packed = prepack_weights(OP, planned.as_ref(), w)?;
        Ok(Box::new(ConvInteger {
            attrs: self.attrs.clone(),
            planned,
            packed,
        }))
    }
}

impl Kernel for ConvInteger {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, w, out) = (io.input(0), io.input(1), io.output(0));
        let mut guard = scratch(OP, io)?;
        if let Some(r) = self
            .planned
            .as_ref()
            .filter(|r| supports(r) && r.x_dims == x.dims() && r.w_dims == w.dims())
        {
            let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
            let x_zero = if io.input(2).is_defined() {
                read_scalar(OP, "x_zero_point", io.input(2))? as i32
            } else {
                0
            };
            let w_zero =
                zero_points_into(OP, "w_zero_point", io.input(3), r.out_dims[1], &mut work)?;
            return int_conv(
                OP,
                r,
                x,
                x_zero,
                w,
                w_zero,
                self.packed.as_deref(),
                &Epilogue::default(),
                out,
                &mut work,
                io.threads,
            );
        }
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let (product, _, _) = centered_conv(
            OP,
            &self.attrs,
            self.planned.as_ref(),
            x,
            io.input(2),
            w,
            io.input(3),
            None,
            io.threads,
            &mut work,
        )?;
        let mut write = out.write::<i32>()?;
        let data = write
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        if data.len() != product.len() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output holds {} elements, the convolution {}",
                    data.len(),
                    product.len()
                ),
            ));
        }
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
    use crate::{Attr, OpError};
    use strata_core::Tensor;

    #[test]
    fn convolution_with_zero_points_and_padding() {
        let x = Tensor::from_slice(&[2u8, 3, 4, 5], &[1, 1, 2, 2]).unwrap();
        let w = Tensor::from_slice(&[1u8, 1, 1, 1], &[1, 1, 2, 2]).unwrap();
        let x_zp = Tensor::from_slice(&[1u8], &[]).unwrap();
        let y = run_op(
            "ConvInteger",
            10,
            &[],
            &[x.clone(), w.clone(), x_zp.clone()],
        )
        .unwrap();
        // Centered x = [1, 2, 3, 4], summed by the 2x2 window.
        assert_eq!(
            (y[0].dims(), y[0].to_vec::<i32>().unwrap()),
            (&[1usize, 1, 1, 1][..], vec![10])
        );
        let y = run_op(
            "ConvInteger",
            10,
            &[("pads", Attr::Ints(vec![1, 1, 0, 0]))],
            &[x, w, x_zp],
        )
        .unwrap();
        // Padding one row and column at the start: windows over [[0,0,0],[0,1,2],[0,3,4]].
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [1, 3, 4, 10]);
    }

    #[test]
    fn mismatched_zero_point_type_is_an_error() {
        let x = Tensor::from_slice(&[2u8; 4], &[1, 1, 2, 2]).unwrap();
        let zp = Tensor::from_slice(&[1i8], &[]).unwrap();
        let err = run_op("ConvInteger", 10, &[], &[x.clone(), x, zp]).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 2, .. }), "{err}");
    }
}
