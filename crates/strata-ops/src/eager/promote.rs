//! Type promotion for mixed-dtype calls, after PyTorch: bool < integers < floats; within a
//! category the wider type wins; a signed and an unsigned integer meet in the next wider signed
//! type. Types PyTorch does not promote (block-quantized, sub-byte, float8, text, u64 with a
//! signed type) are a typed error.

use std::borrow::Cow;

use strata_core::{DType, Tensor};

use crate::eager::convert::cast_dense;
use crate::{OpError, OpResult};

/// The common dtype of `a` and `b` for `op`.
pub fn promote_types(op: &str, a: DType, b: DType) -> OpResult<DType> {
    if a == b {
        return Ok(a);
    }
    let rank = |d: DType| -> Option<(u8, u8)> {
        // (category, width rank); None for types that do not promote.
        Some(match d {
            DType::Bool => (0, 0),
            DType::U8 => (1, 1),
            DType::I8 => (1, 1),
            DType::I16 | DType::U16 => (1, 2),
            DType::I32 | DType::U32 => (1, 3),
            DType::I64 | DType::U64 => (1, 4),
            DType::F16 | DType::BF16 => (2, 2),
            DType::F32 => (2, 3),
            DType::F64 => (2, 4),
            _ => return None,
        })
    };
    let refuse = || OpError::DType {
        op: op.into(),
        index: 1,
        expected: format!("a dtype that promotes with {a}"),
        actual: b,
    };
    let (Some((ca, wa)), Some((cb, wb))) = (rank(a), rank(b)) else {
        return Err(refuse());
    };
    if ca != cb {
        return Ok(if ca > cb { a } else { b });
    }
    if ca == 2 {
        // f16 with bf16: neither holds the other, f32 holds both.
        return Ok(match wa.cmp(&wb) {
            std::cmp::Ordering::Greater => a,
            std::cmp::Ordering::Less => b,
            std::cmp::Ordering::Equal => DType::F32,
        });
    }
    // Integers of different types.
    if a.is_signed_int() == b.is_signed_int() {
        return Ok(if wa > wb { a } else { b });
    }
    let (signed, unsigned, ws, wu) = if a.is_signed_int() {
        (a, b, wa, wb)
    } else {
        (b, a, wb, wa)
    };
    if ws > wu {
        return Ok(signed);
    }
    Ok(match wu {
        1 => DType::I16,
        2 => DType::I32,
        3 => DType::I64,
        _ => {
            let _ = unsigned;
            return Err(refuse());
        }
    })
}

/// `t` in `dtype`: itself when it already is, else a converted copy.
pub(crate) fn as_dtype(t: &Tensor, dtype: DType) -> OpResult<Cow<'_, Tensor>> {
    if t.dtype() == dtype {
        Ok(Cow::Borrowed(t))
    } else {
        Ok(Cow::Owned(cast_dense(t, dtype)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotes_like_pytorch_or_refuses() {
        let p = |a, b| promote_types("t", a, b).unwrap();
        assert_eq!(p(DType::I32, DType::F32), DType::F32);
        assert_eq!(p(DType::F16, DType::I64), DType::F16);
        assert_eq!(p(DType::F16, DType::BF16), DType::F32);
        assert_eq!(p(DType::F32, DType::F64), DType::F64);
        assert_eq!(p(DType::U8, DType::I8), DType::I16);
        assert_eq!(p(DType::I64, DType::U32), DType::I64);
        assert_eq!(p(DType::Bool, DType::U8), DType::U8);
        assert!(promote_types("t", DType::U64, DType::I8).is_err());
        assert!(matches!(
            promote_types("t", DType::F32, DType::Q4_0),
            Err(OpError::DType { .. })
        ));
    }
}
