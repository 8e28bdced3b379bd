//! Value conversions the signal operators share: scalar arguments read from inputs, float
//! tensors read as f64 (copied, or borrowed in their own type by [`with_floats`]), and f64
//! results stored in the requested dtype (computing in f64 keeps f16/bf16/f32 outputs within one
//! rounding of the exact value), whole or element by element into a bound output
//! ([`with_float_output`]).

use strata_core::{bf16, f16, DType, Tensor};

use crate::support::axes::read_ints;
use crate::{int_values, OpError, OpResult};

/// A scalar (or one-element) int32/int64 tensor's value.
pub(crate) fn scalar_int(op: &str, what: &str, t: &Tensor) -> OpResult<i64> {
    match read_ints(op, t)?.as_slice() {
        &[v] => Ok(v),
        other => Err(OpError::shape(
            op,
            format!("{what} must hold one value, got {other:?}"),
        )),
    }
}

/// Like [`scalar_int`] for a plan-time constant.
pub(crate) fn known_scalar_int(op: &str, what: &str, t: &Tensor) -> OpResult<i64> {
    match int_values(op, t)?.as_slice() {
        &[v] => Ok(v),
        other => Err(OpError::shape(
            op,
            format!("{what} must hold one value, got {other:?}"),
        )),
    }
}

/// A float tensor's values (any layout) as f64.
pub(crate) fn read_f64(op: &str, t: &Tensor) -> OpResult<Vec<f64>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f64::from).collect(),
        DType::F64 => t.to_vec::<f64>()?,
        DType::F16 => t.to_vec::<f16>()?.into_iter().map(f64::from).collect(),
        DType::BF16 => t.to_vec::<bf16>()?.into_iter().map(f64::from).collect(),
        other => {
            return Err(OpError::shape(
                op,
                format!("expected a float tensor, got {other}"),
            ))
        }
    })
}

/// A float tensor's elements in logical order, borrowed in their own type.
pub(crate) enum Floats<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl Floats<'_> {
    /// Element `i` as f64 (exact for every float type).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> f64 {
        match self {
            Floats::F32(v) => f64::from(v[i]),
            Floats::F64(v) => v[i],
            Floats::F16(v) => f64::from(v[i]),
            Floats::Bf16(v) => f64::from(v[i]),
        }
    }
}

/// Calls `body` with a float tensor's elements, without copying a contiguous tensor.
pub(crate) fn with_floats<R>(
    op: &str,
    t: &Tensor,
    body: impl FnOnce(Floats<'_>) -> OpResult<R>,
) -> OpResult<R> {
    match t.dtype() {
        DType::F32 => body(Floats::F32(&t.read::<f32>()?.elements()?)),
        DType::F64 => body(Floats::F64(&t.read::<f64>()?.elements()?)),
        DType::F16 => body(Floats::F16(&t.read::<f16>()?.elements()?)),
        DType::BF16 => body(Floats::Bf16(&t.read::<bf16>()?.elements()?)),
        other => Err(OpError::shape(
            op,
            format!("expected a float tensor, got {other}"),
        )),
    }
}

/// A bound float output's elements, written from f64 values (rounded as [`to_tensor`] does).
pub(crate) enum FloatsMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    Bf16(&'a mut [bf16]),
}

impl FloatsMut<'_> {
    #[inline]
    pub(crate) fn set(&mut self, i: usize, value: f64) {
        match self {
            FloatsMut::F32(v) => v[i] = value as f32,
            FloatsMut::F64(v) => v[i] = value,
            FloatsMut::F16(v) => v[i] = f16::from_f64(value),
            FloatsMut::Bf16(v) => v[i] = bf16::from_f64(value),
        }
    }
}

/// Calls `body` with write access to float output `out` (which must be contiguous).
pub(crate) fn with_float_output<R>(
    op: &str,
    out: &Tensor,
    body: impl FnOnce(FloatsMut<'_>) -> OpResult<R>,
) -> OpResult<R> {
    let not_contiguous = || OpError::kernel(op, "output is not contiguous");
    macro_rules! write {
        ($t:ty, $variant:ident) => {{
            let mut guard = out.write::<$t>()?;
            body(FloatsMut::$variant(
                guard.as_mut_slice().ok_or_else(not_contiguous)?,
            ))
        }};
    }
    match out.dtype() {
        DType::F32 => write!(f32, F32),
        DType::F64 => write!(f64, F64),
        DType::F16 => write!(f16, F16),
        DType::BF16 => write!(bf16, Bf16),
        other => Err(OpError::kernel(
            op,
            format!("cannot write float values into a {other} output"),
        )),
    }
}

/// Whether [`to_tensor`] can produce `dtype`.
pub(crate) fn is_storable(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32
            | DType::F64
            | DType::F16
            | DType::BF16
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

/// A tensor of `dtype` holding `values` (integers truncate toward zero and saturate).
pub(crate) fn to_tensor(
    op: &str,
    values: &[f64],
    dims: &[usize],
    dtype: DType,
) -> OpResult<Tensor> {
    macro_rules! cast {
        ($t:ty) => {
            Tensor::from_slice(&values.iter().map(|&v| v as $t).collect::<Vec<$t>>(), dims)?
        };
    }
    Ok(match dtype {
        DType::F32 => cast!(f32),
        DType::F64 => Tensor::from_slice(values, dims)?,
        DType::F16 => Tensor::from_slice(
            &values.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(),
            dims,
        )?,
        DType::BF16 => Tensor::from_slice(
            &values
                .iter()
                .map(|&v| bf16::from_f64(v))
                .collect::<Vec<_>>(),
            dims,
        )?,
        DType::I8 => cast!(i8),
        DType::I16 => cast!(i16),
        DType::I32 => cast!(i32),
        DType::I64 => cast!(i64),
        DType::U8 => cast!(u8),
        DType::U16 => cast!(u16),
        DType::U32 => cast!(u32),
        DType::U64 => cast!(u64),
        other => {
            return Err(OpError::shape(
                op,
                format!("cannot produce values of type {other}"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects() {
        let t = to_tensor("Op", &[1.5, -2.0], &[2], DType::F16).unwrap();
        assert_eq!(read_f64("Op", &t).unwrap(), vec![1.5, -2.0]);
        let t = to_tensor("Op", &[1.9, -2.7], &[2], DType::I32).unwrap();
        assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, -2]);
        assert!(read_f64("Op", &t).is_err());
        let s = Tensor::from_slice(&[4i64, 5], &[2]).unwrap();
        assert!(scalar_int("Op", "size", &s).is_err());
        assert!(to_tensor("Op", &[1.0], &[1], DType::Bool).is_err());
    }

    #[test]
    fn borrowed_floats_read_and_write_every_float_type() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let t = to_tensor("Op", &[1.5, -2.0], &[2], dtype).unwrap();
            let sum = with_floats("Op", &t, |x| Ok(x.get(0) + x.get(1))).unwrap();
            assert_eq!(sum, -0.5, "{dtype}");
            with_float_output("Op", &t, |mut y| {
                y.set(1, 4.0);
                Ok(())
            })
            .unwrap();
            assert_eq!(read_f64("Op", &t).unwrap(), [1.5, 4.0], "{dtype}");
        }
        let ints = Tensor::from_slice(&[1i32], &[1]).unwrap();
        assert!(with_floats("Op", &ints, |_| Ok(())).is_err());
        assert!(with_float_output("Op", &ints, |_| Ok(())).is_err());
    }
}
