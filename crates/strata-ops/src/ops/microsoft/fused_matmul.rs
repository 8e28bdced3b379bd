//! com.microsoft FusedMatMul: `Y = alpha · op(A) · op(B)` with numpy batch broadcasting, where
//! `op` transposes the last two dims (`transA` / `transB`) after optionally moving the first dim
//! behind the batch dims (`transBatchA` / `transBatchB`: `(d0, b…, c)` read as `(b…, d0, c)`).
//! Every transposition is a stride, so no operand is copied; each batch is one GEMM.

use std::marker::PhantomData;

use strata_core::{Device, Element};

use super::access::{contiguous, contiguous_mut};
use crate::kernels::{gemm, GemmFloat};
use crate::support::inputs::required;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "FusedMatMul";

/// Batch dims beyond this many are refused (offsets are computed without allocating).
const MAX_BATCH_RANK: usize = 8;

#[derive(Debug, Clone, Copy)]
pub(crate) struct FusedMatMul {
    alpha: f32,
    trans: [bool; 2],
    trans_batch: [bool; 2],
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let flag = |name: &str| -> OpResult<bool> {
        match ctx.attrs.int_or(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(OpError::attribute(
                OP,
                name,
                format!("must be 0 or 1, got {v}"),
            )),
        }
    };
    Ok(Box::new(FusedMatMul {
        alpha: ctx.attrs.float_or("alpha", 1.0)?,
        trans: [flag("transA")?, flag("transB")?],
        trans_batch: [flag("transBatchA")?, flag("transBatchB")?],
    }))
}

/// One operand read as a batch of matrices through strides (in elements).
#[derive(Debug, Clone)]
struct Operand {
    batch: Vec<usize>,
    batch_strides: Vec<usize>,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl Operand {
    /// `dims` as operand `which` (0 = A, 1 = B); a 1-D A is a row, a 1-D B a column.
    fn new(dims: &[usize], which: usize, trans: bool, trans_batch: bool) -> OpResult<Operand> {
        let n = dims.len();
        if n == 0 {
            return Err(OpError::shape(OP, "operands must have rank >= 1"));
        }
        if n == 1 {
            let (rows, cols) = if which == 0 {
                (1, dims[0])
            } else {
                (dims[0], 1)
            };
            let (rs, cs) = if which == 0 { (dims[0], 1) } else { (1, 1) };
            return Ok(Operand {
                batch: vec![],
                batch_strides: vec![],
                rows,
                cols,
                row_stride: rs,
                col_stride: cs,
            });
        }
        let mut strides = vec![1usize; n];
        for i in (0..n - 1).rev() {
            strides[i] = strides[i + 1] * dims[i + 1];
        }
        let perm: Vec<usize> = if trans_batch && n >= 3 {
            (1..n - 1).chain([0, n - 1]).collect()
        } else {
            (0..n).collect()
        };
        let ld: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let ls: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
        let (mut rows, mut cols, mut rs, mut cs) = (ld[n - 2], ld[n - 1], ls[n - 2], ls[n - 1]);
        if trans {
            std::mem::swap(&mut rows, &mut cols);
            std::mem::swap(&mut rs, &mut cs);
        }
        if n - 2 > MAX_BATCH_RANK {
            return Err(OpError::shape(
                OP,
                format!("at most {MAX_BATCH_RANK} batch dims, got {dims:?}"),
            ));
        }
        Ok(Operand {
            batch: ld[..n - 2].to_vec(),
            batch_strides: ls[..n - 2].to_vec(),
            rows,
            cols,
            row_stride: rs,
            col_stride: cs,
        })
    }
}

/// The product's geometry: both operands, the broadcast batch dims and the output dims.
#[derive(Debug)]
struct Geometry {
    a: Operand,
    b: Operand,
    batch: Vec<usize>,
    out_dims: Vec<usize>,
}

impl FusedMatMul {
    fn geometry(&self, a_dims: &[usize], b_dims: &[usize]) -> OpResult<Geometry> {
        let a = Operand::new(a_dims, 0, self.trans[0], self.trans_batch[0])?;
        let b = Operand::new(b_dims, 1, self.trans[1], self.trans_batch[1])?;
        if a.cols != b.rows {
            return Err(OpError::shape(
                OP,
                format!(
                    "op(A) is {}×{} and op(B) {}×{} (A {a_dims:?}, B {b_dims:?})",
                    a.rows, a.cols, b.rows, b.cols
                ),
            ));
        }
        let rank = a.batch.len().max(b.batch.len());
        let mut batch = vec![1usize; rank];
        for (i, out) in batch.iter_mut().enumerate() {
            let pick = |o: &Operand| {
                let skip = rank - o.batch.len();
                if i < skip {
                    1
                } else {
                    o.batch[i - skip]
                }
            };
            let (da, db) = (pick(&a), pick(&b));
            *out = match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => {
                    return Err(OpError::shape(
                        OP,
                        format!("batch dims of A {a_dims:?} and B {b_dims:?} do not broadcast"),
                    ))
                }
            };
        }
        let mut out_dims = batch.clone();
        if a_dims.len() > 1 {
            out_dims.push(a.rows);
        }
        if b_dims.len() > 1 {
            out_dims.push(b.cols);
        }
        Ok(Geometry {
            a,
            b,
            batch,
            out_dims,
        })
    }
}

impl Operator for FusedMatMul {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (a, b) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        if !matches!(a.dtype, strata_core::DType::F32 | strata_core::DType::F64)
            || b.dtype != a.dtype
        {
            return Err(OpError::DType {
                op: OP.into(),
                index: usize::from(b.dtype != a.dtype),
                expected: "float or double, the same for A and B".into(),
                actual: if b.dtype != a.dtype { b.dtype } else { a.dtype },
            });
        }
        let dims = match (a.concrete(), b.concrete()) {
            (Some(ad), Some(bd)) => self
                .geometry(&ad, &bd)?
                .out_dims
                .into_iter()
                .map(Dim::Known)
                .collect(),
            _ => {
                let rank = a.rank().max(b.rank());
                vec![Dim::Unknown; rank]
            }
        };
        Ok(vec![Fact::new(a.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        crate::support::kernel_choice::cpu_only(OP, dtype, device)?;
        match dtype {
            strata_core::DType::F32 => Ok(Box::new(FusedMatMulKernel::<f32> {
                op: *self,
                planned: self.planned(inputs),
                _t: PhantomData,
            })),
            strata_core::DType::F64 => Ok(Box::new(FusedMatMulKernel::<f64> {
                op: *self,
                planned: self.planned(inputs),
                _t: PhantomData,
            })),
            other => Err(OpError::no_kernel(OP, other, device)),
        }
    }
}

#[derive(Debug)]
struct FusedMatMulKernel<T> {
    op: FusedMatMul,
    /// The geometry for the dims known when the plan was built (a run with those dims
    /// allocates nothing), with the dims of A and B it is for.
    planned: Option<(Vec<usize>, Vec<usize>, Geometry)>,
    _t: PhantomData<T>,
}

impl FusedMatMul {
    /// The geometry for the planned dims of A and B, when both are known.
    fn planned(&self, inputs: &[&Fact]) -> Option<(Vec<usize>, Vec<usize>, Geometry)> {
        let (a, b) = (inputs.first()?.concrete()?, inputs.get(1)?.concrete()?);
        let g = self.geometry(&a, &b).ok()?;
        Some((a, b, g))
    }
}

/// Offset of batch `index` (row-major over `batch`) in an operand whose batch dims are
/// right-aligned against it; broadcast dims add nothing.
fn batch_offset(o: &Operand, batch: &[usize], mut index: usize) -> usize {
    let skip = batch.len() - o.batch.len();
    let mut offset = 0;
    for axis in (0..batch.len()).rev() {
        let i = index % batch[axis];
        index /= batch[axis];
        if axis >= skip && o.batch[axis - skip] != 1 {
            offset += i * o.batch_strides[axis - skip];
        }
    }
    offset
}

impl<T: GemmFloat + Element> Kernel for FusedMatMulKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a_t, b_t) = (io.input(0), io.input(1));
        let fresh;
        let g = match &self.planned {
            Some((a, b, g)) if a == a_t.dims() && b == b_t.dims() => g,
            _ => {
                fresh = self.op.geometry(a_t.dims(), b_t.dims())?;
                &fresh
            }
        };
        let (ar, br) = (a_t.read::<T>()?, b_t.read::<T>()?);
        let (a, b) = (contiguous(OP, "A", &ar)?, contiguous(OP, "B", &br)?);
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "Y", &mut yw)?;
        let (m, n, k) = (g.a.rows, g.b.cols, g.a.cols);
        let batches: usize = g.batch.iter().product();
        if y.len() != batches * m * n {
            return Err(OpError::kernel(
                OP,
                format!("Y has {} elements, need {}", y.len(), batches * m * n),
            ));
        }
        let alpha = T::from_f32(self.op.alpha);
        let strides = |o: &Operand| (o.row_stride as isize, o.col_stride as isize);
        for (i, out) in y.chunks_exact_mut((m * n).max(1)).enumerate().take(batches) {
            let (oa, ob) = (
                batch_offset(&g.a, &g.batch, i),
                batch_offset(&g.b, &g.batch, i),
            );
            gemm(
                m,
                n,
                k,
                &a[oa..],
                strides(&g.a),
                &b[ob..],
                strides(&g.b),
                out,
                (n as isize, 1),
                alpha,
                T::from_f32(0.0),
                io.threads,
            )?;
        }
        Ok(())
    }
}
