//! The integer matrix product behind MatMulInteger and QLinearMatMul: `(A - a_zero_point) @
//! (B - b_zero_point)` with numpy batch broadcasting, where A's zero point is a scalar or one per
//! row (M) and B's a scalar or one per column (N).
//!
//! The centered operands are at most 9-bit integers, so every product and every sum of them (for
//! any K below 2^35) is exact in f64: the product runs on the project's f64 GEMM and the result
//! is the exact i32-accumulated value. The f64 operands, product and per-line parameters live in
//! the kernel's planned scratch ([`product_work_len`]).

use strata_core::{bf16, f16, DType, Tensor};

use crate::kernels::matmul::batched_matmul;
use crate::ops::quantization::values::read_f64_into;
use crate::support::axes::required;
use crate::support::scratch::carve;
use crate::{Fact, OpError, OpResult};

/// Checks the eight inputs shared by QLinearMatMul and QLinearConv — (x, x_scale, x_zero_point,
/// w, w_scale, w_zero_point, y_scale, y_zero_point) — and returns x, w and the output dtype.
pub(crate) fn check_qlinear_inputs<'a>(
    op: &str,
    inputs: &[&'a Fact],
) -> OpResult<(&'a Fact, &'a Fact, DType)> {
    let x = required(op, inputs, 0)?;
    let w = required(op, inputs, 3)?;
    check_operand(op, x, 0, Some(required(op, inputs, 2)?), 2)?;
    check_operand(op, w, 3, Some(required(op, inputs, 5)?), 5)?;
    for index in [1, 4, 6] {
        let scale = required(op, inputs, index)?;
        if !scale.dtype.is_float() {
            return Err(OpError::DType {
                op: op.into(),
                index,
                expected: "a float scale".into(),
                actual: scale.dtype,
            });
        }
    }
    let y_zero_point = required(op, inputs, 7)?;
    if !matches!(y_zero_point.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            op: op.into(),
            index: 7,
            expected: "uint8 or int8".into(),
            actual: y_zero_point.dtype,
        });
    }
    Ok((x, w, y_zero_point.dtype))
}

/// Checks that `x` is uint8 or int8 and its zero point (if any) has its type.
pub(crate) fn check_operand(
    op: &str,
    x: &Fact,
    index: usize,
    zero_point: Option<&Fact>,
    zero_index: usize,
) -> OpResult<()> {
    if !matches!(x.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            op: op.into(),
            index,
            expected: "uint8 or int8".into(),
            actual: x.dtype,
        });
    }
    match zero_point {
        Some(zp) if zp.dtype != x.dtype => Err(OpError::DType {
            op: op.into(),
            index: zero_index,
            expected: format!("{} like input {index}", x.dtype),
            actual: zp.dtype,
        }),
        _ => Ok(()),
    }
}

/// One value per row or column of a matrix operand (or per output channel): a scalar or a 1-D
/// tensor of `lines` values, read as f64 into a buffer carved from `work` (at most `lines`
/// values). `None` when `param` is absent.
pub(crate) fn per_line<'w>(
    op: &str,
    what: &str,
    param: &Tensor,
    lines: usize,
    work: &mut &'w mut [f64],
) -> OpResult<Option<&'w [f64]>> {
    if !param.is_defined() {
        return Ok(None);
    }
    let len = param.numel();
    let ok = param.rank() == 0 || (param.rank() == 1 && (len == 1 || len == lines));
    if !ok {
        return Err(OpError::shape(
            op,
            format!(
                "{what} must be a scalar or a 1-D tensor of {lines}, got dims {:?}",
                param.dims()
            ),
        ));
    }
    let values = carve(op, work, len)?;
    read_f64_into(op, param, values)?;
    Ok(Some(values))
}

/// The value of a per-line parameter for line `line`.
pub(crate) fn line_value(values: &[f64], line: usize) -> f64 {
    if values.len() == 1 {
        values[0]
    } else {
        values[line]
    }
}

/// Rows (M) of a matmul operand A and columns (N) of B, after numpy's rank-1 promotion.
fn rows_and_cols(a_dims: &[usize], b_dims: &[usize]) -> (usize, usize) {
    let m = if a_dims.len() >= 2 {
        a_dims[a_dims.len() - 2]
    } else {
        1
    };
    let n = if b_dims.len() >= 2 {
        b_dims[b_dims.len() - 1]
    } else {
        1
    };
    (m, n)
}

/// f64 scratch values [`centered_product`] carves: both operands, the product and the two
/// zero points (`None` on overflow).
pub(crate) fn product_work_len(
    a_dims: &[usize],
    b_dims: &[usize],
    out_len: usize,
) -> Option<usize> {
    let (m, n) = rows_and_cols(a_dims, b_dims);
    let numel = |dims: &[usize]| dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    numel(a_dims)?
        .checked_add(numel(b_dims)?)?
        .checked_add(out_len)?
        .checked_add(m)?
        .checked_add(n)
}

/// `(A - a_zp) @ (B - b_zp)` exactly, in row-major order of the matmul output, in a buffer
/// carved from `work`; also returns M and N so callers can apply per-row/per-column factors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn centered_product<'w>(
    op: &str,
    a: &Tensor,
    a_zero_point: &Tensor,
    b: &Tensor,
    b_zero_point: &Tensor,
    out_len: usize,
    threads: usize,
    work: &mut &'w mut [f64],
) -> OpResult<(&'w [f64], usize, usize)> {
    let (m, n) = rows_and_cols(a.dims(), b.dims());
    let k = a.dims().last().copied().unwrap_or(0);
    let av = carve(op, work, a.numel())?;
    read_f64_into(op, a, av)?;
    let bv = carve(op, work, b.numel())?;
    read_f64_into(op, b, bv)?;
    if let Some(zp) = per_line(op, "A's zero point", a_zero_point, m, work)? {
        for (i, v) in av.iter_mut().enumerate() {
            // Element i of A sits in row (i / K) mod M.
            *v -= line_value(zp, (i / k.max(1)) % m.max(1));
        }
    }
    if let Some(zp) = per_line(op, "B's zero point", b_zero_point, n, work)? {
        for (j, v) in bv.iter_mut().enumerate() {
            *v -= line_value(zp, j % n.max(1));
        }
    }
    let out = carve(op, work, out_len)?;
    batched_matmul(av, a.dims(), bv, b.dims(), out, threads)?;
    Ok((out, m, n))
}

/// `value` rounded to `dtype`'s precision: requantization multipliers are computed in the
/// scales' own type, as the ONNX reference does.
pub(crate) fn round_to(dtype: DType, value: f64) -> f64 {
    match dtype {
        DType::F16 => f16::from_f64(value).to_f64(),
        DType::BF16 => bf16::from_f64(value).to_f64(),
        DType::F32 => f64::from(value as f32),
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centered_product_with_row_and_column_zero_points() {
        // A = [[1, 2], [3, 4]] - [1, 2] per row; B = [[1, 0], [0, 1]] - 1 per tensor.
        let a = Tensor::from_slice(&[1u8, 2, 3, 4], &[2, 2]).unwrap();
        let a_zp = Tensor::from_slice(&[1u8, 2], &[2]).unwrap();
        let b = Tensor::from_slice(&[1u8, 0, 0, 1], &[2, 2]).unwrap();
        let b_zp = Tensor::from_slice(&[1u8], &[]).unwrap();
        let mut buf = vec![0.0; product_work_len(&[2, 2], &[2, 2], 4).unwrap()];
        let (out, m, n) =
            centered_product("T", &a, &a_zp, &b, &b_zp, 4, 1, &mut &mut buf[..]).unwrap();
        // A' = [[0, 1], [1, 2]], B' = [[0, -1], [-1, 0]].
        assert_eq!((out, m, n), (&[-1.0, 0.0, -2.0, -1.0][..], 2, 2));
        // Without room for the product the scratch is too small.
        let err = centered_product("T", &a, &a_zp, &b, &b_zp, 4, 1, &mut &mut buf[..10]);
        assert!(err.is_err());
    }

    #[test]
    fn zero_points_of_the_wrong_length_are_errors() {
        let a = Tensor::from_slice(&[1u8, 2, 3, 4], &[2, 2]).unwrap();
        let zp = Tensor::from_slice(&[1u8, 2, 3], &[3]).unwrap();
        let mut buf = vec![0.0; 32];
        let none = Tensor::undefined();
        let err = centered_product("T", &a, &zp, &a, &none, 4, 1, &mut &mut buf[..]).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
    }
}
