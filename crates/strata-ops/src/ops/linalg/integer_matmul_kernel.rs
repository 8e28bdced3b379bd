//! The integer matrix product behind MatMulInteger, QLinearMatMul and the com.microsoft
//! quantized products: `(A - a_zero) @ (B - b_zero)` with numpy batch broadcasting through the
//! integer GEMM (`kernels::igemm`), the write-back given by the caller's epilogue. B is packed
//! at plan time when it is a constant matrix; otherwise each of its matrices is packed into the
//! kernel's planned scratch per run.

use strata_core::Tensor;

use crate::kernels::spatial::Dims;

use crate::kernels::igemm::{igemm, pack_b_into, Epilogue, IntSlice, MatrixA, OutMat, PackedB};
use crate::kernels::matmul::MatMulGeometry;
use crate::ops::quantization::int_params::{packed_b_words, with_dest, with_int_slice};
use crate::support::scratch::carve;
use crate::{OpError, OpResult};

/// Rows (M), depth (K) and columns (N) of a matmul of `a_dims` by `b_dims`.
pub(crate) fn matmul_mkn(a_dims: &[usize], b_dims: &[usize]) -> (usize, usize, usize) {
    let m = if a_dims.len() >= 2 {
        a_dims[a_dims.len() - 2]
    } else {
        1
    };
    let k = a_dims.last().copied().unwrap_or(1);
    let n = if b_dims.len() >= 2 {
        b_dims[b_dims.len() - 1]
    } else {
        1
    };
    (m, k, n)
}

/// Scratch words [`int_matmul`] needs to pack B at run time (0 when it was packed at plan time).
pub(crate) fn int_matmul_words(
    a_dims: &[usize],
    b_dims: &[usize],
    prepacked: bool,
) -> Option<usize> {
    if prepacked {
        return Some(0);
    }
    let (_, k, n) = matmul_mkn(a_dims, b_dims);
    packed_b_words(k, n)
}

/// `C = epilogue((A - a_zero) @ (B - b_zero))` into `out`. `packed` is B packed at plan time
/// (used when it matches B's dims); per-row zero points of A (`a_zero.len() == M`) and per-column
/// ones of B apply to every batch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn int_matmul(
    op: &str,
    a: &Tensor,
    a_zero: &[i32],
    b: &Tensor,
    b_zero: &[i32],
    packed: Option<&PackedB>,
    out: &Tensor,
    epilogue: &Epilogue<'_>,
    work: &mut &mut [i32],
    threads: usize,
) -> OpResult<()> {
    let b_dims = b_dims(op, b, packed)?;
    let g = MatMulGeometry::new(a.dims(), &b_dims)?;
    let (m, n, k) = (g.m, g.n, g.k);
    let expected: usize = g.batches * m * n;
    if out.numel() != expected {
        return Err(OpError::kernel(
            op,
            format!(
                "output holds {} elements, the product {expected}",
                out.numel()
            ),
        ));
    }
    let packed =
        packed.filter(|p| p.view().depth() == k && p.view().cols() == n && b_dims.len() == 2);
    let mut b_buffer = match packed {
        Some(_) => None,
        None => {
            let words = packed_b_words(k, n).ok_or_else(|| OpError::shape(op, "B is too large"))?;
            let buf = carve(op, work, words)?;
            let (bytes, sums) = buf.split_at_mut(words - n);
            Some((bytemuck::cast_slice_mut::<i32, i8>(bytes), sums))
        }
    };
    let fold = g.b_batches <= 1
        && g.a_batches == g.batches
        && a_zero.len() == 1
        && epilogue.scale.is_none_or(|s| s.row.is_none());
    with_int_slice(op, a, |a_vals| {
        // A constant B packed at plan time is never read (the plan may have let it go).
        with_b(op, b, packed.is_some(), |b_vals| {
            with_dest(op, out, |mut dest| {
                let (batches, rows) = if fold {
                    (1, g.batches * m)
                } else {
                    (g.batches, m)
                };
                for index in 0..batches {
                    let (a_at, b_at) = if fold { (0, 0) } else { g.batch_offsets(index) };
                    let a_mat =
                        MatrixA::new(a_vals.range(a_at * m * k, rows * k), rows, k, (k, 1))?;
                    let b_view = match (packed, b_buffer.as_mut()) {
                        (Some(p), _) => p.view(),
                        (None, Some((bytes, sums))) => pack_b_into(
                            b_vals
                                .ok_or_else(|| OpError::kernel(op, "B is not bound"))?
                                .range(b_at * k * n, k * n),
                            k,
                            n,
                            (n, 1),
                            bytes,
                            sums,
                        )?,
                        (None, None) => return Err(OpError::kernel(op, "B is not packed")),
                    };
                    let c = OutMat {
                        dest: dest.sub(index * rows * n, rows * n),
                        rs: n,
                        cs: 1,
                    };
                    igemm(&a_mat, a_zero, b_view, b_zero, c, epilogue, threads)?;
                }
                Ok(())
            })
        })
    })
}

/// B's dims: its own, or, when the plan let a constant B go once it was packed (an undefined
/// tensor here), the packed matrix's `[k, n]`. Inline, so a run allocates nothing.
pub(crate) fn b_dims(op: &str, b: &Tensor, packed: Option<&PackedB>) -> OpResult<Dims> {
    match packed {
        _ if b.is_defined() => Ok(Dims::from_slice(b.dims())),
        Some(p) => Ok(Dims::from_slice(&[p.view().depth(), p.view().cols()])),
        None => Err(OpError::kernel(op, "B is neither bound nor packed")),
    }
}

/// Runs `f` on B's values, or on `None` without reading B when it is `packed`.
pub(crate) fn with_b<R>(
    op: &str,
    b: &Tensor,
    packed: bool,
    f: impl FnOnce(Option<IntSlice<'_>>) -> OpResult<R>,
) -> OpResult<R> {
    if packed {
        f(None)
    } else {
        with_int_slice(op, b, |values| f(Some(values)))
    }
}
