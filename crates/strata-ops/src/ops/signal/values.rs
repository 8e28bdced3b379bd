//! Value conversions the signal operators share: scalar arguments read from inputs, float
//! tensors read as f64, and f64 results stored in the requested dtype (computing in f64 keeps
//! f16/bf16/f32 outputs within one rounding of the exact value).

use strata_core::{bf16, f16, DType, Tensor};

use crate::ops::axes::read_ints;
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

/// Stores `values` into a bound output of matching dims (any storable dtype).
pub(crate) fn store(op: &str, out: &Tensor, values: &[f64]) -> OpResult<()> {
    if out.numel() != values.len() {
        return Err(OpError::kernel(
            op,
            format!(
                "output has dims {:?}, expected {} values",
                out.dims(),
                values.len()
            ),
        ));
    }
    let result = to_tensor(op, values, out.dims(), out.dtype())?;
    out.copy_from(&result)?;
    Ok(())
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
}
