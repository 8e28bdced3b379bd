//! Element access shared by the quantization operators: any numeric input read as f64 values
//! (decoding float8/float4 bit patterns and the unpacked sub-byte integers), and quantized
//! values written into an output of any quantized dtype.
//!
//! The kernels convert each input once into an f64 buffer carved from their planned scratch
//! ([`read_f64_into`]), which holds every quantized value, scale and 32-bit accumulator exactly;
//! scalar parameters are read without a buffer ([`read_scalar`]).

use num_traits::AsPrimitive;
use strata_core::{decode_e8m0, BytesWrite, DType, Element, MiniFloat, Tensor};

use crate::{dispatch_plain, KernelIo, OpError, OpResult};

/// Scratch bytes for `values` f64 working values (`None`: the size overflowed).
pub(crate) fn f64_scratch_bytes(op: &str, values: Option<usize>) -> OpResult<usize> {
    values
        .and_then(|v| v.checked_mul(std::mem::size_of::<f64>()))
        .ok_or_else(|| OpError::shape(op, "working memory size overflows"))
}

/// Scratch bytes for reading the listed inputs whole as f64 (0 while a dims is unknown).
pub(crate) fn whole_inputs_scratch_bytes(
    op: &str,
    inputs: &[&crate::Fact],
    indices: &[usize],
) -> OpResult<usize> {
    let mut values = Some(0usize);
    for &index in indices {
        let Some(fact) = crate::support::inputs::optional(inputs, index) else {
            continue;
        };
        let Some(dims) = fact.concrete() else {
            return Ok(0);
        };
        let numel = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        values = values.zip(numel).and_then(|(a, b)| a.checked_add(b));
    }
    f64_scratch_bytes(op, values)
}

/// Carves a buffer for `tensor` off `work` and reads its elements into it as f64.
pub(crate) fn take_f64<'w>(
    op: &str,
    tensor: &Tensor,
    work: &mut &'w mut [f64],
) -> OpResult<&'w mut [f64]> {
    let values = crate::support::scratch::carve(op, work, tensor.numel())?;
    read_f64_into(op, tensor, values)?;
    Ok(values)
}

/// Write access to the kernel's planned scratch (view it with `scratch_as::<f64>`).
pub(crate) fn scratch<'a>(op: &str, io: &KernelIo<'a>) -> OpResult<BytesWrite<'a>> {
    let tensor = io
        .scratch
        .ok_or_else(|| OpError::kernel(op, "needs planned scratch"))?;
    Ok(tensor.write_bytes("quantization kernel")?)
}

/// The elements of `tensor` in logical order, as f64 values (a new vector, for tests; kernels
/// use [`read_f64_into`]).
#[cfg(test)]
pub(crate) fn read_f64(op: &str, tensor: &Tensor) -> OpResult<Vec<f64>> {
    let mut values = vec![0.0; tensor.numel()];
    read_f64_into(op, tensor, &mut values)?;
    Ok(values)
}

/// Writes the elements of `tensor` in logical order, as f64 values, into `dst` (one slot per
/// element).
pub(crate) fn read_f64_into(op: &str, tensor: &Tensor, dst: &mut [f64]) -> OpResult<()> {
    if dst.len() != tensor.numel() {
        return Err(OpError::kernel(
            op,
            format!(
                "{} values do not fit a buffer of {}",
                tensor.numel(),
                dst.len()
            ),
        ));
    }
    let dtype = tensor.dtype();
    if let Some(format) = MiniFloat::of(dtype) {
        return convert::<u8>(tensor, dst, |c| f64::from(format.decode(c)));
    }
    match dtype {
        DType::F8E8M0 => convert::<u8>(tensor, dst, |c| f64::from(decode_e8m0(c))),
        DType::I4 | DType::I2 => convert::<i8>(tensor, dst, f64::from),
        DType::U4 | DType::U2 => convert::<u8>(tensor, dst, f64::from),
        _ => dispatch_plain!(dtype, T => convert::<T>(tensor, dst, |v: T| v.as_()), _ => Err(
            OpError::kernel(op, format!("cannot read {dtype} values"))
        )),
    }
}

/// The single value of a scalar (or one-element) parameter.
pub(crate) fn read_scalar(op: &str, what: &str, tensor: &Tensor) -> OpResult<f64> {
    if tensor.numel() != 1 {
        return Err(OpError::shape(
            op,
            format!("{what} must be a scalar, got dims {:?}", tensor.dims()),
        ));
    }
    let mut value = [0.0];
    read_f64_into(op, tensor, &mut value)?;
    Ok(value[0])
}

fn convert<T: Element>(
    tensor: &Tensor,
    dst: &mut [f64],
    to_f64: impl Fn(T) -> f64,
) -> OpResult<()> {
    let read = tensor.read::<T>()?;
    for (d, &v) in dst.iter_mut().zip(read.elements()?.iter()) {
        *d = to_f64(v);
    }
    Ok(())
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

    #[test]
    fn reads_into_buffers_and_scalars() {
        let t = Tensor::from_slice(&[3u8, 250], &[2]).unwrap();
        let mut buf = [0.0; 2];
        read_f64_into("test", &t, &mut buf).unwrap();
        assert_eq!(buf, [3.0, 250.0]);
        assert!(read_f64_into("test", &t, &mut [0.0; 3]).is_err());
        let s = Tensor::from_slice(&[0.5f32], &[1]).unwrap();
        assert_eq!(read_scalar("test", "scale", &s).unwrap(), 0.5);
        let err = read_scalar("test", "scale", &t).unwrap_err();
        assert!(err.to_string().contains("scale"), "{err}");
    }
}
