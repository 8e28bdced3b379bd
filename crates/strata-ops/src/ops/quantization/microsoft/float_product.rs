//! The integer product with a float result that MatMulIntegerToFloat and DynamicQuantizeMatMul
//! share: `Y = (A − a_zero)(B − b_zero) · multiplier[j] + bias[j]` with numpy batch
//! broadcasting, on the integer GEMM (`kernels::igemm`) with the scaling and the bias in its
//! write-back, as onnxruntime's MLAS scale-bias output processor does (`acc as f32 · m + b`).
//! A comes as 8-bit values (quantized in scratch by DynamicQuantizeMatMul); B is packed at plan
//! time when it is a constant matrix, else into scratch per batch.

use strata_core::{DType, Tensor};

use crate::kernels::igemm::{
    igemm, pack_b_into, Epilogue, IntSlice, MatrixA, OutMat, PackedB, Requant,
};
use crate::kernels::matmul::MatMulGeometry;
use crate::ops::linalg::integer_matmul_kernel::{b_dims, with_b};
use crate::ops::quantization::int_params::{packed_b_words, with_dest};
use crate::support::scratch::carve;
use crate::{Fact, OpError, OpResult};

/// Scratch words for B packed per run (0 when it is packed at plan time), the per-column
/// parameters (zero points, multipliers: `n` each) and slack for scalars.
pub(crate) fn product_words(k: usize, n: usize, prepacked: bool) -> Option<usize> {
    let pack = if prepacked { 0 } else { packed_b_words(k, n)? };
    pack.checked_add(n.checked_mul(3)?)?.checked_add(16)
}

/// Checks that a float scale (input `index`) is f32.
pub(crate) fn check_f32(op: &str, f: Option<&Fact>, index: usize) -> OpResult<()> {
    match f {
        Some(f) if f.dtype != DType::F32 => Err(OpError::DType {
            op: op.into(),
            index,
            expected: "float32".into(),
            actual: f.dtype,
        }),
        _ => Ok(()),
    }
}

/// The float product's operands and write-back.
pub(crate) struct FloatProduct<'a> {
    pub a: IntSlice<'a>,
    pub a_dims: &'a [usize],
    pub a_zero: &'a [i32],
    pub b: &'a Tensor,
    pub b_zero: &'a [i32],
    pub packed: Option<&'a PackedB>,
    /// `a_scale · b_scale[j]`, one or one per column.
    pub multipliers: &'a [f32],
    pub bias: Option<&'a [f32]>,
}

impl FloatProduct<'_> {
    /// Writes the product into `out` (f32, the broadcast product's dims).
    pub(crate) fn run(
        &self,
        op: &str,
        out: &Tensor,
        work: &mut &mut [i32],
        threads: usize,
    ) -> OpResult<()> {
        let b_dims = b_dims(op, self.b, self.packed)?;
        let g = MatMulGeometry::new(self.a_dims, &b_dims)?;
        let (m, n, k) = (g.m, g.n, g.k);
        if out.numel() != g.batches * m * n {
            return Err(OpError::kernel(op, "output does not hold the product"));
        }
        if self.bias.is_some_and(|b| b.len() != n) {
            return Err(OpError::shape(op, format!("bias must hold {n} values")));
        }
        let packed = self
            .packed
            .filter(|p| p.view().depth() == k && p.view().cols() == n && b_dims.len() == 2);
        let mut b_buffer = match packed {
            Some(_) => None,
            None => {
                let words =
                    packed_b_words(k, n).ok_or_else(|| OpError::shape(op, "B is too large"))?;
                let buf = carve(op, work, words)?;
                let (bytes, sums) = buf.split_at_mut(words - n);
                Some((bytemuck::cast_slice_mut::<i32, i8>(bytes), sums))
            }
        };
        let epilogue = Epilogue {
            scale: Some(Requant {
                col: self.multipliers,
                row: None,
            }),
            bias_f32: self.bias,
            ..Epilogue::default()
        };
        // One B for every batch: all of A's rows form one product.
        let fold = g.b_batches <= 1 && g.a_batches == g.batches;
        let (batches, rows) = if fold {
            (1, g.batches * m)
        } else {
            (g.batches, m)
        };
        // A constant B packed at plan time is never read (the plan may have let it go).
        with_b(op, self.b, packed.is_some(), |b_vals| {
            with_dest(op, out, |mut dest| {
                for index in 0..batches {
                    let (a_at, b_at) = if fold { (0, 0) } else { g.batch_offsets(index) };
                    let a_mat =
                        MatrixA::new(self.a.range(a_at * m * k, rows * k), rows, k, (k, 1))?;
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
                    igemm(
                        &a_mat,
                        self.a_zero,
                        b_view,
                        self.b_zero,
                        c,
                        &epilogue,
                        threads,
                    )?;
                }
                Ok(())
            })
        })
    }
}
