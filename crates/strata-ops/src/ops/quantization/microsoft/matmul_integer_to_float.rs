//! com.microsoft MatMulIntegerToFloat: `Y = (A − a_zero)(B − b_zero) · a_scale · b_scale + bias`
//! in f32 for 8-bit A and B (numpy batch broadcasting), as onnxruntime computes it: the exact i32
//! product scaled by `a_scale · b_scale[j]` (B's scale and zero point per tensor or per column)
//! plus the float bias per column. onnxruntime's fusion may swap the two scales when it lacked
//! shapes; a per-column `a_scale` beside a scalar `b_scale` is read the way onnxruntime fixes it
//! up. Runs on the integer GEMM through [`FloatProduct`].

use std::sync::Arc;

use strata_core::{DType, Device};

use super::float_product::{check_f32, product_words, FloatProduct};
use crate::kernels::igemm::PackedB;
use crate::ops::linalg::integer_matmul_kernel::{b_dims, matmul_mkn};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::quantization::int_params::{
    carve_f32, prepack_matrix, scales_into, with_int_slice, words_to_bytes, zero_points_into,
};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "MatMulIntegerToFloat";

#[derive(Debug, Clone, Default)]
pub struct MatMulIntegerToFloat {
    /// B packed at plan time, when it is a constant matrix.
    packed: Option<Arc<PackedB>>,
}

impl MatMulIntegerToFloat {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MatMulIntegerToFloat::default()))
    }
}

impl Operator for MatMulIntegerToFloat {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = required(OP, inputs, 0)?;
        let b = required(OP, inputs, 1)?;
        check_operand(OP, a, 0, optional(inputs, 4), 4)?;
        check_operand(OP, b, 1, optional(inputs, 5), 5)?;
        for index in [2, 3] {
            check_f32(OP, Some(required(OP, inputs, index)?), index)?;
        }
        check_f32(OP, optional(inputs, 6), 6)?;
        Ok(vec![Fact::new(DType::F32, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(a), Some(b)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let (_, k, n) = matmul_mkn(&a, &b);
        let prepacked = inputs[1].value.is_some() && b.len() == 2;
        words_to_bytes(OP, product_words(k, n, prepacked))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(MatMulIntegerToFloat {
            packed: prepack_matrix(OP, required(OP, inputs, 1)?)?,
        }))
    }
}

impl Kernel for MatMulIntegerToFloat {
    /// A constant B is packed at plan time and never read again: the plan may let it go.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b) = (io.input(0), io.input(1));
        let (_, _, n) = matmul_mkn(a.dims(), &b_dims(OP, b, self.packed.as_deref())?);
        let (mut a_scale_t, mut b_scale_t) = (io.input(2), io.input(3));
        // onnxruntime's FixupScaleTensor: a per-column scale given as A's is B's.
        if a_scale_t.numel() > 1 && b_scale_t.numel() == 1 {
            std::mem::swap(&mut a_scale_t, &mut b_scale_t);
        }
        if a_scale_t.numel() != 1 {
            return Err(OpError::shape(
                OP,
                format!("a_scale {:?} must be one value", a_scale_t.dims()),
            ));
        }
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let a_scale = read_scale(a_scale_t, 1, &mut work)?[0];
        let b_scale = read_scale(b_scale_t, n, &mut work)?;
        let a_zero = zero_points_into(OP, "a_zero_point", io.input(4), 1, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(5), n, &mut work)?;
        let multipliers = carve_f32(OP, &mut work, b_scale.len())?;
        for (d, &s) in multipliers.iter_mut().zip(b_scale) {
            *d = a_scale * s;
        }
        let bias_t = io.input(6);
        let bias_read = bias_t
            .is_defined()
            .then(|| bias_t.read::<f32>())
            .transpose()?;
        let bias = bias_read
            .as_ref()
            .map(|r| {
                r.as_slice()
                    .ok_or_else(|| OpError::kernel(OP, "bias is not contiguous"))
            })
            .transpose()?;
        with_int_slice(OP, a, |a_vals| {
            FloatProduct {
                a: a_vals,
                a_dims: a.dims(),
                a_zero,
                b,
                b_zero,
                packed: self.packed.as_deref(),
                multipliers,
                bias,
            }
            .run(OP, io.output(0), &mut work, io.threads)
        })
    }
}

/// A scale of one value or `lines` values (any rank whose elements are one per column).
fn read_scale<'w>(
    t: &strata_core::Tensor,
    lines: usize,
    work: &mut &'w mut [i32],
) -> OpResult<&'w [f32]> {
    if t.rank() > 1 && t.numel() == lines {
        let flat = t.reshape(&[lines])?;
        return scales_into(OP, "b_scale", &flat, lines, work);
    }
    scales_into(OP, "scale", t, lines, work)
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::rng::Rng;
    use crate::support::test_util::OpRun;

    fn t<T: strata_core::Element>(v: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    #[test]
    fn per_column_scales_and_zero_points_with_bias_match_the_reference() {
        let (batch, m, k, n) = (2, 3, 21, 5);
        let mut rng = Rng::new(11);
        let a: Vec<u8> = (0..batch * m * k).map(|_| rng.below(256) as u8).collect();
        let b: Vec<i8> = (0..k * n).map(|_| rng.below(256) as u8 as i8).collect();
        let bs: Vec<f32> = (0..n).map(|j| 0.01 * (j + 1) as f32).collect();
        let zb: Vec<i8> = (0..n).map(|j| j as i8 * 3 - 5).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 - 2.0).collect();
        let (a_scale, za) = (0.07f32, 120u8);
        let mut expected = vec![];
        for r in 0..batch * m {
            for j in 0..n {
                let s: i32 = (0..k)
                    .map(|p| {
                        (i32::from(a[r * k + p]) - 120)
                            * (i32::from(b[p * n + j]) - i32::from(zb[j]))
                    })
                    .sum();
                expected.push(s as f32 * (a_scale * bs[j]) + bias[j]);
            }
        }
        for constant in [false, true] {
            let inputs = [
                t(&a, &[batch, m, k]),
                t(&b, &[k, n]),
                t(&[a_scale], &[]),
                t(&bs, &[n]),
                t(&[za], &[]),
                t(&zb, &[n]),
                t(&bias, &[n]),
            ];
            let mut run = OpRun::new("MatMulIntegerToFloat", 1).domain("com.microsoft");
            if constant {
                run = run.constant_inputs();
            }
            let y = run.checked_writes().run(&inputs).unwrap();
            assert_eq!(y[0].dims(), [batch, m, n]);
            assert_eq!(
                y[0].to_vec::<f32>().unwrap(),
                expected,
                "constant B: {constant}"
            );
        }
    }

    #[test]
    fn batched_b_and_swapped_scales() {
        let a = t(&[1u8, 2, 3, 4], &[2, 1, 2]);
        let b = t(&[1i8, 0, 0, 1, 2, 0, 0, 2], &[2, 2, 2]);
        // a_scale per column given first, as onnxruntime's fusion may write it.
        let inputs = [a, b, t(&[1.0f32, 10.0], &[2]), t(&[0.5f32], &[])];
        let y = OpRun::new("MatMulIntegerToFloat", 1)
            .domain("com.microsoft")
            .run(&inputs)
            .unwrap();
        // [1,2]·I·[.5, 5] = [0.5, 10]; [3,4]·2I·[.5, 5] = [3, 40].
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [0.5, 10.0, 3.0, 40.0]);
    }
}
