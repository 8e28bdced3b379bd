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
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just now.
        return unsafe { range_avx512(xs) };
    }
    let mut out = (f32::INFINITY, f32::NEG_INFINITY);
    lane_range((), xs, &mut out);
    out
}

/// [`range`] with AVX-512: four independent min and max accumulators of 16 lanes (`vminps`
/// returns its second operand when the first is NaN, so NaNs are skipped).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn range_avx512(xs: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let mut lo = [_mm512_set1_ps(f32::INFINITY); 4];
    let mut hi = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
    let chunks = xs.chunks_exact(64);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (q, (l, h)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
            // SAFETY: lanes 16q..16q + 16 of a 64-value chunk; unaligned load.
            let v = unsafe { _mm512_loadu_ps(chunk.as_ptr().add(16 * q)) };
            *l = _mm512_min_ps(v, *l);
            *h = _mm512_max_ps(v, *h);
        }
    }
    let (mut los, mut his) = ([0f32; 64], [0f32; 64]);
    for q in 0..4 {
        // SAFETY: each store writes 16 values inside the 64-value arrays.
        unsafe {
            _mm512_storeu_ps(los.as_mut_ptr().add(16 * q), lo[q]);
            _mm512_storeu_ps(his.as_mut_ptr().add(16 * q), hi[q]);
        }
    }
    let (a, b) = lanes(tail);
    let min = los.iter().fold(a, |m, &v| m.min(v));
    let max = his.iter().fold(b, |m, &v| m.max(v));
    (min, max)
}

/// `dst[i] = saturate(round_half_even(xs[i] / scale) + zero_point)` (NaN to 0), as
/// `quantize_slice` computes it, with AVX-512 where the CPU has it.
fn quantize(xs: &[f32], scale: f32, zero_point: i32, dst: &mut [u8]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just now.
        done = unsafe { quantize_avx512(xs, scale, zero_point as f32, dst) };
    }
    super::per_tensor::quantize_slice(&xs[done..], scale, zero_point, &mut dst[done..]);
}

/// The whole 16-value blocks of [`quantize`]; returns how many values it wrote. The quotient is
/// rounded half to even (`vrndscaleps`), offset, then clamped with NaN going to the low bound
/// (`vmaxps` returns its second operand on NaN); the clamped values are exact integers.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_avx512(xs: &[f32], scale: f32, zero_point: f32, dst: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let (s, z) = (_mm512_set1_ps(scale), _mm512_set1_ps(zero_point));
    let (lo, hi) = (_mm512_set1_ps(0.0), _mm512_set1_ps(255.0));
    let blocks = xs.len().min(dst.len()) / 16;
    for b in 0..blocks {
        // SAFETY: values 16b..16b + 16 lie in both `xs` and `dst` (b < blocks); unaligned.
        unsafe {
            let v = _mm512_loadu_ps(xs.as_ptr().add(16 * b));
            let q = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_div_ps(v, s),
            );
            let q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, z), lo), hi);
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
            _mm_storeu_si128(dst.as_mut_ptr().add(16 * b).cast(), bytes);
        }
    }
    blocks * 16
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
            quantize(&xs, scale, zero_point as i32, dst);
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
    fn vector_paths_match_the_scalar_ones_on_ties_nan_and_infinities() {
        // Quotients k / 2: every odd k is a tie (rounded to even); NaN and infinities saturate.
        let mut xs: Vec<f32> = (-700..700).map(|k| k as f32 * 0.25).collect();
        xs[17] = f32::NAN;
        xs[40] = f32::INFINITY;
        xs[41] = f32::NEG_INFINITY;
        xs[1000] = 3.0e9;
        let mut want = vec![0u8; xs.len()];
        crate::ops::quantization::per_tensor::quantize_slice(&xs, 0.5, 77, &mut want);
        let mut got = vec![0u8; xs.len()];
        quantize(&xs, 0.5, 77, &mut got);
        assert_eq!(got, want);
        assert_eq!(got[17], 0);
        assert_eq!((got[40], got[41]), (255, 0));
        // (k=1 -> 0.5 rounds to 0, k=3 -> 1.5 rounds to 2) around the zero point.
        assert_eq!((got[701], got[703]), (77, 79));
        // NaN skipped by the range; the extremes found wherever they sit.
        let mut ys: Vec<f32> = (0..1000).map(|i| (i % 37) as f32 - 10.0).collect();
        ys[5] = f32::NAN;
        ys[999] = -55.0;
        ys[640] = 70.0;
        assert_eq!(range(&ys), (-55.0, 70.0));
        assert_eq!(range(&ys[..3]), (-10.0, -8.0));
    }

    #[test]
    fn non_float_input_is_an_error() {
        let x = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let err = run_op(OP, 11, &[], &[x]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
    }
}
