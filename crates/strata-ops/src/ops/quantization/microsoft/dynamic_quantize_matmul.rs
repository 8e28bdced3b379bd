//! com.microsoft DynamicQuantizeMatMul: a float A quantized to uint8 per run, then multiplied
//! by the 8-bit B, as onnxruntime does: A's range widened to include 0 gives
//! `a_scale = (max − min) / 255` (1 when max == min) and `a_zero = round_half_even(clamp(−min /
//! a_scale, 0, 255))`; `q = clamp(round_half_even(x / a_scale) + a_zero, 0, 255)`; then
//! `Y = (q − a_zero)(B − b_zero) · (a_scale · b_scale[j]) + bias[j]` (B's scale and zero point
//! per tensor or per column) on the integer GEMM through [`FloatProduct`]. A is quantized into
//! planned scratch, spread over the intra-op pool.

use std::sync::Arc;

use strata_core::{DType, Device};

use super::float_product::{check_f32, product_words, FloatProduct};
use crate::kernels::igemm::{round_half_even, IntSlice, PackedB};
use crate::ops::linalg::integer_matmul_kernel::{b_dims, matmul_mkn};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::quantization::int_params::{
    carve_f32, prepack_matrix, scales_into, words_to_bytes, zero_points_into,
};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::{carve, scratch_as};
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "DynamicQuantizeMatMul";

/// Elements of A one pool task quantizes.
const QUANTIZE_CHUNK: usize = 1 << 14;

#[derive(Debug, Clone, Default)]
pub struct DynamicQuantizeMatMul {
    /// B packed at plan time, when it is a constant matrix.
    packed: Option<Arc<PackedB>>,
}

impl DynamicQuantizeMatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(DynamicQuantizeMatMul::default()))
    }
}

impl Operator for DynamicQuantizeMatMul {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = required(OP, inputs, 0)?;
        let b = required(OP, inputs, 1)?;
        check_f32(OP, Some(a), 0)?;
        check_operand(OP, b, 1, optional(inputs, 3), 3)?;
        check_f32(OP, Some(required(OP, inputs, 2)?), 2)?;
        check_f32(OP, optional(inputs, 4), 4)?;
        Ok(vec![Fact::new(DType::F32, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(a), Some(b)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let (_, k, n) = matmul_mkn(&a, &b);
        let prepacked = inputs[1].value.is_some() && b.len() == 2;
        let a_words = a.iter().product::<usize>().div_ceil(4);
        words_to_bytes(
            OP,
            product_words(k, n, prepacked).and_then(|w| w.checked_add(a_words)),
        )
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(DynamicQuantizeMatMul {
            packed: prepack_matrix(OP, required(OP, inputs, 1)?)?,
        }))
    }
}

/// The smallest and largest of `x` (±inf for an empty slice), eight lanes at a time.
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut lo = [f32::INFINITY; 8];
    let mut hi = [f32::NEG_INFINITY; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for i in 0..8 {
            lo[i] = if c[i] < lo[i] { c[i] } else { lo[i] };
            hi[i] = if c[i] > hi[i] { c[i] } else { hi[i] };
        }
    }
    let (mut l, mut h) = (f32::INFINITY, f32::NEG_INFINITY);
    for &v in lo.iter().chain(chunks.remainder()) {
        l = l.min(v);
    }
    for &v in hi.iter().chain(chunks.remainder()) {
        h = h.max(v);
    }
    (l, h)
}

/// onnxruntime's uint8 parameters of values spanning `[min, max]`.
pub(crate) fn quantization_parameters(min: f32, max: f32) -> (f32, i32) {
    let (min, max) = (min.min(0.0), max.max(0.0));
    let scale = if max == min { 1.0 } else { (max - min) / 255.0 };
    let zero = round_half_even((0.0 - min / scale).clamp(0.0, 255.0));
    (scale, zero as i32)
}

/// `dst[i] = clamp(round_half_even(x[i] / scale) + zero, 0, 255)`.
fn quantize(x: &[f32], dst: &mut [u8], scale: f32, zero: i32) {
    let (lo, hi) = (-(zero as f32), 255.0 - zero as f32);
    for (d, &v) in dst.iter_mut().zip(x) {
        // NaN clamps to nothing in particular; `as` then gives 0.
        *d = (round_half_even((v / scale).clamp(lo, hi)) as i32 + zero) as u8;
    }
}

impl Kernel for DynamicQuantizeMatMul {
    /// A constant B is packed at plan time and never read again: the plan may let it go.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a_t, b_t) = (io.input(0), io.input(1));
        let (_, _, n) = matmul_mkn(a_t.dims(), &b_dims(OP, b_t, self.packed.as_deref())?);
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let b_scale_t = io.input(2);
        let b_scale_t = if b_scale_t.rank() > 1 && b_scale_t.numel() == n {
            b_scale_t.reshape(&[n])?
        } else {
            b_scale_t.clone()
        };
        let b_scale = scales_into(OP, "b_scale", &b_scale_t, n, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(3), n, &mut work)?;
        let a_read = a_t.read::<f32>()?;
        let a = a_read
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "A is not contiguous"))?;
        let (lo, hi) = min_max(a);
        let (a_scale, a_zero) = quantization_parameters(lo, hi);
        let multipliers = carve_f32(OP, &mut work, b_scale.len())?;
        for (d, &s) in multipliers.iter_mut().zip(b_scale) {
            *d = a_scale * s;
        }
        let a_words = carve(OP, &mut work, a.len().div_ceil(4))?;
        let a_q = &mut bytemuck::cast_slice_mut::<i32, u8>(a_words)[..a.len()];
        crate::parallel::for_each_chunk_mut(a_q, QUANTIZE_CHUNK, 1, |i, dst| {
            quantize(&a[i * QUANTIZE_CHUNK..], dst, a_scale, a_zero);
        });
        let bias_t = io.input(4);
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
        FloatProduct {
            a: IntSlice::U8(a_q),
            a_dims: a_t.dims(),
            a_zero: &[a_zero],
            b: b_t,
            b_zero,
            packed: self.packed.as_deref(),
            multipliers,
            bias,
        }
        .run(OP, io.output(0), &mut work, io.threads)
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use super::{min_max, quantization_parameters};
    use crate::support::rng::Rng;
    use crate::support::test_util::OpRun;

    fn t<T: strata_core::Element>(v: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    #[test]
    fn parameters_include_zero_and_round_half_to_even() {
        assert_eq!(quantization_parameters(1.0, 3.0), (3.0 / 255.0, 0));
        assert_eq!(quantization_parameters(-2.0, -1.0), (2.0 / 255.0, 255));
        assert_eq!(quantization_parameters(0.0, 0.0), (1.0, 0));
        // A span of 255 gives scale 1: zero points 2.5 and 3.5 are exact ties, to even.
        assert_eq!(quantization_parameters(-2.5, 252.5), (1.0, 2));
        assert_eq!(quantization_parameters(-3.5, 251.5), (1.0, 4));
        assert_eq!(
            min_max(&[3.0, -1.0, 7.5, 2.0, 0.0, 1.0, 1.0, 1.0, -4.0, 9.0]),
            (-4.0, 9.0)
        );
    }

    #[test]
    fn matches_a_naive_dynamic_quantized_product() {
        let (m, k, n) = (4, 33, 6);
        let mut rng = Rng::new(5);
        let a: Vec<f32> = (0..m * k).map(|_| rng.f32() * 4.0 - 1.5).collect();
        let b: Vec<i8> = (0..k * n).map(|_| rng.below(256) as u8 as i8).collect();
        let bs: Vec<f32> = (0..n).map(|j| 0.02 + 0.01 * j as f32).collect();
        let zb: Vec<i8> = (0..n).map(|j| 2 - j as i8).collect();
        let bias: Vec<f32> = (0..n).map(|j| 0.5 * j as f32).collect();
        let (lo, hi) = a
            .iter()
            .fold((0f32, 0f32), |(l, h), &v| (l.min(v), h.max(v)));
        let scale = (hi - lo) / 255.0;
        let zero = (-lo / scale).clamp(0.0, 255.0).round_ties_even() as i32;
        let q: Vec<i32> = a
            .iter()
            .map(|&v| ((v / scale).round_ties_even() as i32 + zero).clamp(0, 255))
            .collect();
        let mut expected = vec![];
        for i in 0..m {
            for j in 0..n {
                let s: i32 = (0..k)
                    .map(|p| (q[i * k + p] - zero) * (i32::from(b[p * n + j]) - i32::from(zb[j])))
                    .sum();
                expected.push(s as f32 * (scale * bs[j]) + bias[j]);
            }
        }
        let inputs = [
            t(&a, &[m, k]),
            t(&b, &[k, n]),
            t(&bs, &[n]),
            t(&zb, &[n]),
            t(&bias, &[n]),
        ];
        let y = OpRun::new("DynamicQuantizeMatMul", 1)
            .domain("com.microsoft")
            .constant_inputs()
            .checked_writes()
            .run(&inputs)
            .unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), expected);
    }
}
