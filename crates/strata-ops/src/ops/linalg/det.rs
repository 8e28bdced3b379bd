//! Det (opsets 11-22): the determinant of each trailing square matrix of `[*, M, M]`, by LU
//! decomposition with partial pivoting in f64 (f32, f16 and bf16 inputs are widened and the
//! result rounded once). An empty batch gives an empty output; a 0x0 matrix has determinant 1.

use std::marker::PhantomData;

use strata_core::{DType, Device, Element};

use crate::support::inputs::required;
use crate::support::numeric::Real;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Det";

#[derive(Debug, Clone, Copy)]
pub struct Det;

impl Det {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Det))
    }
}

impl Operator for Det {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: x.dtype,
            });
        }
        let r = x.rank();
        if r < 2 {
            return Err(OpError::shape(
                OP,
                format!("input must have rank >= 2, got dims {:?}", x.dims),
            ));
        }
        if let (Some(a), Some(b)) = (x.dims[r - 2].known(), x.dims[r - 1].known()) {
            if a != b {
                return Err(OpError::shape(
                    OP,
                    format!("matrices must be square, got dims {:?}", x.dims),
                ));
            }
        }
        Ok(vec![Fact::new(x.dtype, x.dims[..r - 2].to_vec())])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        // One f64 copy of a matrix for the in-place elimination.
        let Some(dims) = inputs[0].concrete() else {
            return Ok(0);
        };
        let n = dims.last().copied().unwrap_or(0);
        n.checked_mul(n)
            .and_then(|v| v.checked_mul(8))
            .ok_or_else(|| OpError::shape(OP, "matrix size overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        match (dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(DetKernel::<f32>(PhantomData))),
            (DType::F64, Device::Cpu) => Ok(Box::new(DetKernel::<f64>(PhantomData))),
            (DType::F16, Device::Cpu) => Ok(Box::new(DetKernel::<strata_core::f16>(PhantomData))),
            (DType::BF16, Device::Cpu) => Ok(Box::new(DetKernel::<strata_core::bf16>(PhantomData))),
            (dtype, device) => Err(OpError::no_kernel(OP, dtype, device)),
        }
    }
}

/// How an element type converts to and from the f64 the elimination runs in.
trait ToF64: Element + Real {
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl ToF64 for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

macro_rules! via_f32 {
    ($($t:ty),*) => {$(
        impl ToF64 for $t {
            fn to_f64(self) -> f64 {
                f64::from(self.widen())
            }
            fn from_f64(v: f64) -> Self {
                <$t as Real>::narrow(v as f32)
            }
        }
    )*};
}
via_f32!(f32, strata_core::f16, strata_core::bf16);

#[derive(Debug)]
struct DetKernel<T>(PhantomData<T>);

impl<T: ToF64> Kernel for DetKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let dims = x.dims();
        let r = dims.len();
        if r < 2 || dims[r - 1] != dims[r - 2] || out.dims() != &dims[..r - 2] {
            return Err(OpError::kernel(
                OP,
                format!("input {dims:?} and output {:?} do not fit", out.dims()),
            ));
        }
        let n = dims[r - 1];
        let not_contiguous = || OpError::kernel(OP, "operands must be contiguous");
        let rx = x.read::<T>()?;
        let xs = rx.as_slice().ok_or_else(not_contiguous)?;
        let mut wo = out.write::<T>()?;
        let os = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        let mut guard = match io.scratch {
            Some(s) => Some(s.write_bytes(OP)?),
            None => None,
        };
        let work: &mut [f64] = match &mut guard {
            Some(g) => {
                let bytes = g.bytes();
                let whole = bytes.len() / 8 * 8;
                bytemuck::try_cast_slice_mut(&mut bytes[..whole])
                    .map_err(|e| OpError::kernel(OP, format!("scratch: {e}")))?
            }
            None => &mut [],
        };
        if work.len() < n * n {
            return Err(OpError::kernel(OP, "scratch is smaller than one matrix"));
        }
        let work = &mut work[..n * n];
        for (matrix, d) in xs.chunks_exact(n * n).zip(os.iter_mut()) {
            for (w, &v) in work.iter_mut().zip(matrix) {
                *w = v.to_f64();
            }
            *d = T::from_f64(determinant(work, n));
        }
        if n == 0 {
            // No elements to chunk: every (empty) matrix has determinant 1.
            os.fill(T::from_f64(1.0));
        }
        Ok(())
    }
}

/// The determinant of the row-major `n x n` matrix `a`, destroying it: Gaussian elimination
/// with partial pivoting, the product of the pivots with a sign per row swap.
fn determinant(a: &mut [f64], n: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..n {
        let pivot = (col..n)
            .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
            .unwrap_or(col);
        if a[pivot * n + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..n {
                a.swap(col * n + k, pivot * n + k);
            }
            det = -det;
        }
        let p = a[col * n + col];
        det *= p;
        for row in col + 1..n {
            let f = a[row * n + col] / p;
            if f != 0.0 {
                for k in col..n {
                    a[row * n + k] -= f * a[col * n + k];
                }
            }
        }
    }
    det
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_determinants() {
        assert_eq!(determinant(&mut [3.0, 8.0, 4.0, 6.0], 2), -14.0);
        // Needs a row swap: [[0, 1], [1, 0]] -> -1.
        assert_eq!(determinant(&mut [0.0, 1.0, 1.0, 0.0], 2), -1.0);
        let mut m = [6.0, 1.0, 1.0, 4.0, -2.0, 5.0, 2.0, 8.0, 7.0];
        assert!((determinant(&mut m, 3) - (-306.0)).abs() < 1e-9);
        assert_eq!(determinant(&mut [1.0, 2.0, 2.0, 4.0], 2), 0.0);
        assert_eq!(determinant(&mut [], 0), 1.0);
    }

    #[test]
    fn batched_kernel_and_bad_shapes() {
        use crate::support::test_util::OpRun;
        use strata_core::Tensor;
        let x =
            Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 2.0, 0.0, 0.0, 2.0], &[2, 2, 2]).unwrap();
        let facts = [Fact::known(DType::F32, &[2, 2, 2])];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out_fact = Det.infer(&refs).unwrap().remove(0);
        assert_eq!(out_fact.concrete().unwrap(), [2]);
        let out = OpRun::new(OP, 11).run(&[x]).unwrap().remove(0);
        assert_eq!(out.to_vec::<f32>().unwrap(), [-2.0, 4.0]);
        let bad = [Fact::known(DType::F32, &[2, 3])];
        assert!(Det.infer(&[&bad[0]]).is_err());
        let bad = [Fact::known(DType::F32, &[4])];
        assert!(Det.infer(&[&bad[0]]).is_err());
        let bad = [Fact::known(DType::I64, &[2, 2])];
        assert!(matches!(Det.infer(&[&bad[0]]), Err(OpError::DType { .. })));
    }
}
