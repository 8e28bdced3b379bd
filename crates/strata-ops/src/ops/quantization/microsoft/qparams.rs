//! The (scale, zero point) pair of one quantized tensor in the com.microsoft QLinear operators,
//! and the float round trip through it, computed as onnxruntime does: dequantize
//! `(q - zero) * scale` in f32, quantize `round_half_even(v / scale) + zero`, saturated.

use strata_core::{DType, Tensor};

use crate::ops::quantization::int_params::{scales_into, zero_points_into};
use crate::{Fact, OpError, OpResult};

/// Scale and zero point of an 8-bit tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct QParam {
    pub scale: f32,
    pub zero: i32,
    pub signed: bool,
}

impl QParam {
    /// Reads a scalar scale and an optional scalar zero point for values of `dtype`.
    pub(crate) fn read(
        op: &str,
        what: &str,
        scale: &Tensor,
        zero: &Tensor,
        dtype: DType,
    ) -> OpResult<QParam> {
        let mut words = [0i32; 2];
        let mut work: &mut [i32] = &mut words;
        let scale = scales_into(op, what, scale, 1, &mut work)?[0];
        let zero = zero_points_into(op, what, zero, 1, &mut work)?[0];
        if !(scale.is_finite() && scale > 0.0) {
            return Err(OpError::kernel(
                op,
                format!("{what}: scale {scale} is not a positive number"),
            ));
        }
        Ok(QParam {
            scale,
            zero,
            signed: dtype == DType::I8,
        })
    }

    /// The real value of stored byte `raw`.
    #[inline]
    pub(crate) fn dequantize(&self, raw: u8) -> f32 {
        let q = if self.signed {
            i32::from(raw as i8)
        } else {
            i32::from(raw)
        };
        (q - self.zero) as f32 * self.scale
    }

    /// The stored byte of real value `v`.
    #[inline]
    pub(crate) fn quantize(&self, v: f32) -> u8 {
        let (lo, hi) = if self.signed {
            (-128.0, 127.0)
        } else {
            (0.0, 255.0)
        };
        let q = (crate::kernels::igemm::round_half_even(v / self.scale) + self.zero as f32)
            .clamp(lo, hi);
        // NaN saturates to the low end (the cast gives 0).
        (q as i32) as u8
    }

    /// The stored byte of a value already divided by the scale.
    #[inline]
    pub(crate) fn quantize_scaled(&self, scaled: f32) -> u8 {
        let (lo, hi) = if self.signed {
            (-128.0, 127.0)
        } else {
            (0.0, 255.0)
        };
        let q = (crate::kernels::igemm::round_half_even(scaled) + self.zero as f32).clamp(lo, hi);
        (q as i32) as u8
    }

    /// The 256-entry table `raw x -> raw y` of `y = f(x)`.
    pub(crate) fn table(&self, y: &QParam, f: impl Fn(f32) -> f32) -> [u8; 256] {
        let mut table = [0u8; 256];
        for (raw, slot) in table.iter_mut().enumerate() {
            *slot = y.quantize(f(self.dequantize(raw as u8)));
        }
        table
    }
}

/// Checks that input `index` is uint8 or int8 and returns its fact.
pub(crate) fn eight_bit<'a>(op: &str, inputs: &[&'a Fact], index: usize) -> OpResult<&'a Fact> {
    let f = crate::support::inputs::required(op, inputs, index)?;
    if !matches!(f.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            op: op.into(),
            index,
            expected: "uint8 or int8".into(),
            actual: f.dtype,
        });
    }
    Ok(f)
}

/// Runs `f` on a contiguous 8-bit tensor's bytes.
pub(crate) fn with_bytes<R>(
    op: &str,
    t: &Tensor,
    f: impl FnOnce(&[u8]) -> OpResult<R>,
) -> OpResult<R> {
    crate::ops::quantization::int_params::with_int_slice(op, t, |s| f(s.bytes()))
}

/// Runs `f` on a contiguous 8-bit output's bytes.
pub(crate) fn with_bytes_mut<R>(
    op: &str,
    t: &Tensor,
    f: impl FnOnce(&mut [u8]) -> OpResult<R>,
) -> OpResult<R> {
    use crate::kernels::igemm::Dest;
    crate::ops::quantization::int_params::with_dest(op, t, |d| match d {
        Dest::U8(s) => f(s),
        Dest::I8(s) => f(bytemuck::cast_slice_mut(s)),
        _ => Err(OpError::kernel(
            op,
            format!("output must be 8-bit, got {}", t.dtype()),
        )),
    })
}
