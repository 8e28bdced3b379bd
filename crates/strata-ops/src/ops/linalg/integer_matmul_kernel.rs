//! The integer matrix product behind MatMulInteger and QLinearMatMul: `(A - a_zero_point) @
//! (B - b_zero_point)` with numpy batch broadcasting, where A's zero point is a scalar or one per
//! row (M) and B's a scalar or one per column (N).
//!
//! The centered operands are at most 9-bit integers, so every product and every sum of them (for
//! any K below 2^35) is exact in f64: the product runs on the project's f64 GEMM and the result
//! is the exact i32-accumulated value. The f64 operands, product and per-line parameters live in
//! the kernel's planned scratch ([`product_work_len`]).

use strata_core::Tensor;

use crate::kernels::matmul::batched_matmul;
use crate::ops::quantization::integer_operands::{line_value, per_line};
use crate::ops::quantization::values::read_f64_into;
use crate::support::scratch::carve;
use crate::OpResult;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpError;

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
