//! Element access shared by the quantization operators: any numeric input read as f64 values
//! (decoding float8/float4 bit patterns and the unpacked sub-byte integers), and quantized
//! values written into an output of any quantized dtype.
//!
//! The operators convert each input once into an f64 buffer, which holds every quantized value,
//! scale and 32-bit accumulator exactly. These buffers are allocated per run: the quantization
//! kernels do not yet take planned scratch space.

use num_traits::AsPrimitive;
use strata_core::{DType, Tensor};

use super::low_float::{decode_e8m0, MiniFloat};
use crate::{dispatch_plain, OpError, OpResult};

/// The elements of `tensor` in logical order, as f64 values.
pub(crate) fn read_f64(op: &str, tensor: &Tensor) -> OpResult<Vec<f64>> {
    let dtype = tensor.dtype();
    if let Some(format) = MiniFloat::of(dtype) {
        return Ok(codes(tensor)?
            .into_iter()
            .map(|c| f64::from(format.decode(c)))
            .collect());
    }
    match dtype {
        DType::F8E8M0 => Ok(codes(tensor)?
            .into_iter()
            .map(|c| f64::from(decode_e8m0(c)))
            .collect()),
        DType::I4 | DType::I2 => Ok(converted::<i8>(tensor)?),
        DType::U4 | DType::U2 => Ok(converted::<u8>(tensor)?),
        _ => dispatch_plain!(dtype, T => converted::<T>(tensor), _ => Err(OpError::kernel(
            op,
            format!("cannot read {dtype} values"),
        ))),
    }
}

fn codes(tensor: &Tensor) -> OpResult<Vec<u8>> {
    Ok(tensor.read::<u8>()?.to_vec())
}

fn converted<T: strata_core::Element + AsPrimitive<f64>>(tensor: &Tensor) -> OpResult<Vec<f64>> {
    let read = tensor.read::<T>()?;
    Ok(match read.as_slice() {
        Some(slice) => slice.iter().map(|&v| v.as_()).collect(),
        None => read.to_vec().into_iter().map(|v| v.as_()).collect(),
    })
}

/// What a quantized value is stored as.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum QuantTarget {
    /// An integer type of this range: round half to even, add the zero point, clamp.
    Int { min: i32, max: i32 },
    /// A float8 format: round to nearest even; the zero point must be zero and is not added.
    Float8(MiniFloat),
    /// Float4 E2M1: the zero point is added before rounding; always saturates.
    Float4,
}

impl QuantTarget {
    /// The target of a quantized dtype; `None` for dtypes QuantizeLinear cannot produce.
    pub(crate) fn of(dtype: DType) -> Option<QuantTarget> {
        let int = |min, max| Some(QuantTarget::Int { min, max });
        match dtype {
            DType::U8 => int(0, 255),
            DType::I8 => int(-128, 127),
            DType::U16 => int(0, 65535),
            DType::I16 => int(-32768, 32767),
            DType::U4 => int(0, 15),
            DType::I4 => int(-8, 7),
            DType::U2 => int(0, 3),
            DType::I2 => int(-2, 1),
            DType::F4E2M1 => Some(QuantTarget::Float4),
            _ => MiniFloat::of(dtype).map(QuantTarget::Float8),
        }
    }

    /// The stored integer (or bit pattern) of `scaled` = x / scale with `zero_point`.
    pub(crate) fn quantize(self, scaled: f64, zero_point: f64, saturate: bool) -> i32 {
        match self {
            QuantTarget::Int { min, max } => {
                let rounded = scaled.round_ties_even() + zero_point;
                // NaN clamps to nothing in particular; ONNX leaves it undefined, we give `min`.
                if rounded.is_nan() {
                    return min;
                }
                rounded.clamp(f64::from(min), f64::from(max)) as i32
            }
            QuantTarget::Float8(format) => i32::from(format.encode(scaled, saturate)),
            QuantTarget::Float4 => i32::from(MiniFloat::E2M1.encode(scaled + zero_point, true)),
        }
    }
}

/// Writes `values` (from [`QuantTarget::quantize`]) into contiguous output `out` of a quantized
/// dtype.
pub(crate) fn write_quantized(
    op: &str,
    out: &Tensor,
    values: impl Iterator<Item = i32>,
) -> OpResult<()> {
    fn fill<T: strata_core::Element>(
        op: &str,
        out: &Tensor,
        values: impl Iterator<Item = i32>,
        narrow: impl Fn(i32) -> T,
    ) -> OpResult<()> {
        let mut write = out.write::<T>()?;
        let data = write
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(op, "output is not contiguous"))?;
        for (slot, value) in data.iter_mut().zip(values) {
            *slot = narrow(value);
        }
        Ok(())
    }
    // The values are already in the dtype's range, so the narrowing casts are exact.
    match out.dtype() {
        DType::I8 | DType::I4 | DType::I2 => fill(op, out, values, |v| v as i8),
        DType::I16 => fill(op, out, values, |v| v as i16),
        DType::U16 => fill(op, out, values, |v| v as u16),
        DType::I32 => fill(op, out, values, |v| v),
        DType::U8 | DType::U4 | DType::U2 => fill(op, out, values, |v| v as u8),
        dtype if dtype.is_low_precision_float() => fill(op, out, values, |v| v as u8),
        dtype => Err(OpError::kernel(
            op,
            format!("cannot write quantized {dtype} values"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_targets_round_half_to_even_and_clamp() {
        let u8_target = QuantTarget::of(DType::U8).unwrap();
        assert_eq!(u8_target.quantize(2.5, 0.0, true), 2);
        assert_eq!(u8_target.quantize(3.5, 10.0, true), 14);
        assert_eq!(u8_target.quantize(-7.0, 3.0, true), 0);
        assert_eq!(u8_target.quantize(300.0, 0.0, true), 255);
        let i4 = QuantTarget::of(DType::I4).unwrap();
        assert_eq!(i4.quantize(-9.2, 0.0, true), -8);
        assert_eq!(QuantTarget::of(DType::F32), None);
    }

    #[test]
    fn float_targets_encode() {
        let e4m3 = QuantTarget::of(DType::F8E4M3FN).unwrap();
        assert_eq!(e4m3.quantize(1.0, 0.0, true), 0x38);
        assert_eq!(e4m3.quantize(1e6, 0.0, false), 0x7F);
        let f4 = QuantTarget::of(DType::F4E2M1).unwrap();
        assert_eq!(f4.quantize(2.0, 1.0, false), 5);
    }

    #[test]
    fn reads_and_writes_sub_byte_and_float8_tensors() {
        let i4 = Tensor::zeros(&[2], DType::I4).unwrap();
        write_quantized("test", &i4, [-8, 7].into_iter()).unwrap();
        assert_eq!(read_f64("test", &i4).unwrap(), [-8.0, 7.0]);
        let out = Tensor::zeros(&[2], DType::F8E5M2).unwrap();
        write_quantized("test", &out, [0x3C, 0x7C].into_iter()).unwrap();
        assert_eq!(read_f64("test", &out).unwrap(), [1.0, f64::INFINITY]);
        let bools = Tensor::from_bools(&[true], &[1]).unwrap();
        assert!(write_quantized("test", &bools, [1].into_iter()).is_err());
    }
}
