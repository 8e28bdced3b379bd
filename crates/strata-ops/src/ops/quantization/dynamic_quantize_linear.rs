//! DynamicQuantizeLinear (opset 11): quantizes a float tensor to uint8 with a scale and zero
//! point computed from its range, which is widened to include 0:
//! `scale = (max - min) / 255` (1 when max == min), `zero_point = round(clamp(-min / scale))`,
//! `y = saturate(round(x / scale) + zero_point)`, rounding half to even, in f32 as the spec does.

use strata_core::{DType, Device};

use crate::ops::quantization::values::write_quantized;
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "DynamicQuantizeLinear";

#[derive(Debug, Clone, Copy)]
pub struct DynamicQuantizeLinear;

impl DynamicQuantizeLinear {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(DynamicQuantizeLinear))
    }
}

impl Operator for DynamicQuantizeLinear {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x] = exact_inputs(OP, inputs)?;
        if x.dtype != DType::F32 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "float".into(),
                actual: x.dtype,
            });
        }
        Ok(vec![
            Fact::new(DType::U8, x.dims.clone()),
            Fact::known(DType::F32, &[]),
            Fact::known(DType::U8, &[]),
        ])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(DynamicQuantizeLinear))
    }
}

/// The smallest and largest value (NaNs skipped).
fn range(xs: &[f32]) -> (f32, f32) {
    let mut out = (f32::INFINITY, f32::NEG_INFINITY);
    lane_range((), xs, &mut out);
    out
}

crate::kernels::simd::multiversion! {
    /// [`range`] over 16 lanes, so the loop vectorizes (`T` is unused: the macro wants a type
    /// parameter).
    fn lane_range<T: Copy>(_unit: T, xs: &[f32], out: &mut (f32, f32)) {
        *out = lanes(xs);
    }
}

#[inline(always)]
fn lanes(xs: &[f32]) -> (f32, f32) {
    let mut lo = [f32::INFINITY; 16];
    let mut hi = [f32::NEG_INFINITY; 16];
    let chunks = xs.chunks_exact(16);
    let tail = chunks.remainder();
    for chunk in chunks {
        for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(chunk) {
            // Compare-and-select (one min/max instruction each) skips a NaN `v` just as
            // `f32::min`/`max` do, without their NaN fix-up code.
            *l = if v < *l { v } else { *l };
            *h = if v > *h { v } else { *h };
        }
    }
    let fold = |init: (f32, f32), v: &[f32], w: &[f32]| {
        v.iter()
            .zip(w)
            .fold(init, |(a, b), (&l, &h)| (a.min(l), b.max(h)))
    };
    let lanes = fold((f32::INFINITY, f32::NEG_INFINITY), &lo, &hi);
    fold(lanes, tail, tail)
}

/// The uint8 scale and zero point of values spanning `[min, max]` (f32 arithmetic).
fn scale_and_zero_point(min: f32, max: f32) -> (f32, f32) {
    let (min, max) = (min.min(0.0), max.max(0.0));
    let scale = if max == min { 1.0 } else { max - min } / 255.0;
    let zero_point = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zero_point)
}

impl Kernel for DynamicQuantizeLinear {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let read = io.input(0).read::<f32>()?;
        let xs = read.elements()?;
        let (min, max) = range(&xs);
        let (scale, zero_point) = scale_and_zero_point(min, max);
        {
            let mut write = io.output(0).write::<u8>()?;
            let dst = write
                .as_mut_slice()
                .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
            super::per_tensor::quantize_slice(&xs, scale, zero_point as i32, dst);
        }
        {
            let mut write = io.output(1).write::<f32>()?;
            let slot = write
                .as_mut_slice()
                .and_then(<[f32]>::first_mut)
                .ok_or_else(|| OpError::kernel(OP, "y_scale output has no element"))?;
            *slot = scale;
        }
        write_quantized(OP, io.output(2), std::iter::once(zero_point as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::{run_op, run_outputs};
    use strata_core::Tensor;

    #[test]
    fn range_scale_and_zero_point() {
        let x = Tensor::from_slice(&[0.0f32, 2.0, -3.0, -2.5, 1.34, 0.5], &[6]).unwrap();
        let y = run_outputs(OP, 11, &[], &[x], 3).unwrap();
        // scale = 5 / 255, zero point = round(3 / scale) = 153.
        assert_eq!(y[1].to_vec::<f32>().unwrap(), [5.0f32 / 255.0]);
        assert_eq!(y[2].to_vec::<u8>().unwrap(), [153]);
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [153, 255, 0, 26, 221, 179]);
        assert_eq!(scale_and_zero_point(0.0, 0.0), (1.0 / 255.0, 0.0));
    }

    #[test]
    fn long_inputs_match_the_scalar_formula() {
        // Lanes and a tail: the range and every value against the spec's formula.
        let xs: Vec<f32> = (0..1003)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.013 - 4.2)
            .collect();
        let x = Tensor::from_slice(&xs, &[1003]).unwrap();
        let y = run_outputs(OP, 11, &[], &[x], 3).unwrap();
        let (min, max) = xs
            .iter()
            .fold((0f32, 0f32), |(a, b), &v| (a.min(v), b.max(v)));
        let (scale, zero) = scale_and_zero_point(min, max);
        assert_eq!(y[1].to_vec::<f32>().unwrap(), [scale]);
        assert_eq!(y[2].to_vec::<u8>().unwrap(), [zero as u8]);
        let want: Vec<u8> = xs
            .iter()
            .map(|&v| ((v / scale).round_ties_even() + zero).clamp(0.0, 255.0) as u8)
            .collect();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), want);
        assert!(want.contains(&0) && want.contains(&255));
    }

    #[test]
    fn non_float_input_is_an_error() {
        let x = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let err = run_op(OP, 11, &[], &[x]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
    }
}
